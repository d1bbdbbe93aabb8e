#include "cli/commands.h"

#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/safetensors.h"
#include "net/client.h"
#include "net/server.h"
#include "store/stats_json.h"
#include "store/store.h"

namespace ecstore::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Globals {
  std::string dir = "./.ec-store";
  bool json = false;
  std::string pool_size = "64MiB";
  std::string disk_quota = "16GiB";
  bool compress = false;
  std::string server;  // HOST:PORT of a running `ec-store serve`
};

class CliError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void Check(const Status& st) {
  if (!st.ok()) throw CliError(st.ToString());
}
template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) throw CliError(r.status().ToString());
  return std::move(r).value();
}

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

std::string TimeString(uint64_t us) {
  std::time_t t = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

enum class Use { kWrite, kInspect, kRepair, kServe };

// Commands that only read or remove entries need no pool: they open with the smallest one
// (1 MiB) and read disk entries straight into their own buffers, instead of mapping and
// pinning --pool-size of memory for a one-shot process.
std::unique_ptr<Store> OpenStore(const Globals& g, Use use = Use::kWrite) {
  Options o;
  o.shareable_pool = use == Use::kServe;
  const bool inspect = use == Use::kInspect || use == Use::kRepair;
  o.pool_bytes = Check(ParseSize(g.pool_size));  // checked even where it is not used
  if (inspect) o.pool_bytes = 1ull << 20;
  o.promote_on_get = !inspect;
  const bool rebuild = use == Use::kRepair;
  o.disk_quota_bytes = Check(ParseSize(g.disk_quota));
  o.compress = g.compress;
  o.rebuild_index = rebuild;
  return Check(Store::Open(g.dir, o));
}

std::unique_ptr<net::Client> ConnectClient(const Globals& g) {
  net::ClientOptions co;
  if (const char* env = std::getenv("EC_STORE_TOKEN")) co.token = env;
  return Check(net::Client::Connect(g.server, co));
}

json InfoJson(const EntryInfo& e) {
  return {{"key", e.key},
          {"namespace", e.ns},
          {"tier", TierName(e.tier)},
          {"on_disk", e.on_disk},
          {"bytes", e.bytes},
          {"dtype", DTypeName(e.meta.dtype)},
          {"shape", e.meta.shape},
          {"created", TimeString(e.created_us)},
          {"last_access", TimeString(e.last_access_us)},
          {"hits", e.hits},
          {"checksum", e.checksum}};
}

void PrintInfoTable(const std::vector<EntryInfo>& rows) {
  std::printf("%-20s %-12s %-5s %10s %-6s %-14s %6s %-20s\n", "KEY", "NAMESPACE", "TIER", "BYTES",
              "DTYPE", "SHAPE", "HITS", "LAST ACCESS");
  for (const EntryInfo& e : rows) {
    std::string key = e.key.size() > 20 ? e.key.substr(0, 17) + "..." : e.key;
    std::printf("%-20s %-12s %-5s %10s %-6s %-14s %6llu %-20s\n", key.c_str(), e.ns.c_str(),
                TierName(e.tier), HumanBytes(e.bytes).c_str(), DTypeName(e.meta.dtype),
                e.meta.ShapeString().c_str(), static_cast<unsigned long long>(e.hits),
                TimeString(e.last_access_us).c_str());
  }
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The tensor `put` stores: a .safetensors file (dtype and shape from its header), or raw
// bytes described by --dtype and --shape.
void LoadPutInput(const std::string& file, const std::string& dtype, const std::string& shape,
                  TensorMeta* meta, std::string* bytes) {
  if (EndsWith(file, ".safetensors") && dtype.empty()) {
    Check(safetensors::Load(file, meta, bytes));
    return;
  }
  if (dtype.empty() || shape.empty())
    throw CliError("InvalidArgument: " + file +
                   " is raw bytes; give --dtype and --shape (or a .safetensors file)");
  meta->dtype = Check(ParseDType(dtype));
  meta->shape = Check(ParseShape(shape));
  *bytes = Check(safetensors::ReadFile(file));
}

// What `get -o FILE` writes: safetensors when FILE ends so, raw bytes otherwise.
void WriteGetOutput(const std::string& out, const TensorMeta& meta, const std::string& buf) {
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(buf.data()), buf.size());
  if (EndsWith(out, ".safetensors")) {
    Check(safetensors::Save(out, meta, bytes));
    return;
  }
  FILE* f = std::fopen(out.c_str(), "wb");
  if (!f) throw CliError("IOError: cannot write " + out + ": " + std::strerror(errno));
  bool ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw CliError("IOError: writing " + out + " failed: " + std::strerror(errno));
}

// The library's errors speak of Options fields and library terms; on the command line the
// same advice names the flag.
std::string WithFlagHints(std::string msg) {
  static const std::pair<const char*, const char*> kHints[] = {
      {"a writable store directory", "a writable --dir"},
      {"a shorter store directory path", "a shorter --dir"},
      {"connect to it as a client", "reach it with --server HOST:PORT"},
      {"Options::pool_bytes", "--pool-size"},
      {"Options::disk_quota_bytes", "--disk-quota"},
      {"the TensorMeta shape/dtype", "--shape/--dtype"},
      {"ServerOptions::rdma_listen", "--rdma-listen"},
      {"set ServerOptions::token", "give --token-file FILE or set EC_STORE_TOKEN"},
      {"ClientOptions::token", "EC_STORE_TOKEN"},
  };
  for (auto [lib, flag] : kHints)
    for (size_t at = msg.find(lib); at != std::string::npos; at = msg.find(lib, at + 1))
      msg.replace(at, std::strlen(lib), flag);
  return msg;
}

// One stats writer for a local store and a server: the same fields, plus the transport.
void PrintStats(const StoreStats& s, const std::string& transport, bool as_json) {
  if (as_json) {
    std::cout << StatsToJson(s, 2, json{{"transport", transport}}.dump()) << "\n";
    return;
  }
  std::printf("%-6s %8s %12s %8s %8s %10s %8s %10s\n", "TIER", "ENTRIES", "BYTES", "HITS", "MISSES",
              "EVICTIONS", "SPILLS", "PROMOTIONS");
  for (auto [name, t] : {std::pair{"pool", s.pool}, std::pair{"disk", s.disk}})
    std::printf("%-6s %8llu %12s %8llu %8llu %10llu %8llu %10llu\n", name,
                (unsigned long long)t.entries, HumanBytes(t.bytes).c_str(),
                (unsigned long long)t.hits, (unsigned long long)t.misses,
                (unsigned long long)t.evictions, (unsigned long long)t.spills,
                (unsigned long long)t.promotions);
  std::printf("pool: %s of %s allocated, fragmentation %.2f%%, %s%s\n",
              HumanBytes(s.pool_allocated).c_str(), HumanBytes(s.pool_capacity).c_str(),
              100 * s.pool_fragmentation, s.pool_locked ? "pinned" : "not pinned",
              s.pool_huge_pages ? ", huge pages" : "");
  std::printf("disk: %s in %llu segment(s), quota %s\n", HumanBytes(s.disk_file_bytes).c_str(),
              (unsigned long long)s.segments, HumanBytes(s.disk_quota).c_str());
  std::printf("transport: %s\n", transport.c_str());
}

void ReportSkipped(const std::vector<std::string>& skipped) {
  for (const std::string& why : skipped)
    std::fprintf(stderr, "ec-store: skipped %s\n", why.c_str());
}

// Loads DIR/<key>/encoder_cache.safetensors files. A bad entry (a file that does not parse,
// a name that is not a valid key) is reported and skipped; a store error stops the import.
int ImportEntries(const Globals& g, const std::string& src_dir, const std::string& ns) {
  auto store = OpenStore(g);
  uint64_t n = 0, bytes = 0;
  std::vector<std::string> dirs, skipped;
  for (const auto& d : fs::directory_iterator(src_dir))
    if (d.is_directory()) dirs.push_back(d.path().filename());
  std::sort(dirs.begin(), dirs.end());
  for (const std::string& hash : dirs) {
    std::string path = src_dir + "/" + hash + "/encoder_cache.safetensors";
    if (!fs::exists(path)) continue;
    TensorMeta meta;
    std::string data;
    Status st = ValidateNewKey(hash);
    if (st.ok()) st = safetensors::Load(path, &meta, &data);
    if (st.ok())
      st = store->Put(ns, hash, meta, {reinterpret_cast<const uint8_t*>(data.data()), data.size()});
    if (st.IsInvalidArgument()) {
      skipped.push_back(path + ": " + st.message());
      continue;
    }
    Check(st);
    ++n;
    bytes += data.size();
    if (!g.json) std::fprintf(stderr, "\rimport: %llu entries", (unsigned long long)n);
  }
  if (!g.json && n) std::fprintf(stderr, "\n");
  Check(store->Close());
  ReportSkipped(skipped);
  if (g.json)
    std::cout << json{{"imported", n}, {"bytes", bytes}, {"skipped", skipped}}.dump() << "\n";
  else
    std::printf("imported %llu entries (%s), skipped %zu\n", (unsigned long long)n,
                HumanBytes(bytes).c_str(), skipped.size());
  return skipped.empty() ? 0 : 1;
}

// Writes entries as vLLM's file connector lays them out: DIR/<key>/encoder_cache.safetensors,
// each file all-or-nothing (temporary name, fsync, rename). Entries of several namespaces go
// to DIR/<namespace>/<key>/... so equal keys never overwrite each other. Reading for export
// leaves no trace (no hits, no LRU touch, no promotion). An entry that cannot be written is
// reported and skipped.
int ExportEntries(const Globals& g, const std::string& out_dir, const std::string& ns_filter) {
  auto store = OpenStore(g, Use::kInspect);
  std::vector<EntryInfo> entries = store->List();
  std::erase_if(entries,
                [&](const EntryInfo& e) { return !ns_filter.empty() && e.ns != ns_filter; });
  std::sort(entries.begin(), entries.end(), [](const EntryInfo& a, const EntryInfo& b) {
    return std::tie(a.ns, a.key) < std::tie(b.ns, b.key);
  });
  bool nested = std::any_of(entries.begin(), entries.end(),
                            [&](const EntryInfo& e) { return e.ns != entries[0].ns; });
  uint64_t n = 0;
  std::vector<std::string> skipped;
  ReadOptions quiet;
  quiet.record_access = false;
  for (const auto& e : entries) {
    const std::string ns_dir = e.ns.empty() ? "_default_" : e.ns;
    Status st = ValidateNewKey(e.key);
    if (st.ok() && nested) st = ValidateNewNamespace(ns_dir);
    std::string dir = out_dir + (nested ? "/" + ns_dir : "") + "/" + e.key;
    std::string buf(e.bytes, '\0');
    std::error_code ec;
    if (st.ok() && !fs::create_directories(dir, ec) && ec)
      st = Status::IOError("cannot create " + dir + ": " + ec.message());
    Result<EntryInfo> info = st;
    if (st.ok())
      info = store->Get(e.ns, e.key, {reinterpret_cast<uint8_t*>(buf.data()), buf.size()}, quiet);
    if (info.ok())
      st = safetensors::SaveDurable(dir + "/encoder_cache.safetensors", info->meta,
                                    {reinterpret_cast<const uint8_t*>(buf.data()), buf.size()});
    else
      st = info.status();
    if (!st.ok()) {
      skipped.push_back(e.ns + "/" + e.key + ": " + st.ToString());
      continue;
    }
    ++n;
  }
  Check(store->Close());
  ReportSkipped(skipped);
  if (g.json)
    std::cout << json{{"exported", n}, {"skipped", skipped}, {"by_namespace", nested}}.dump()
              << "\n";
  else
    std::printf("exported %llu entries to %s%s, skipped %zu\n", (unsigned long long)n,
                out_dir.c_str(), nested ? " (one folder per namespace)" : "", skipped.size());
  return skipped.empty() ? 0 : 1;
}

}  // namespace

namespace {
// A plain decimal ("12", "1.5") at the start of text: no sign, exponent, hex, inf or nan, so
// nothing like 1e300 or 0x10 is read as a number. Returns how many characters it took.
size_t ParseDecimal(const std::string& text, double* v) {
  size_t pos = 0, digits = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos, ++digits;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
      ++pos, ++digits;
  }
  if (digits == 0 || digits > 30) return 0;
  *v = std::strtod(text.substr(0, pos).c_str(), nullptr);
  return pos;
}
}  // namespace

Result<uint64_t> ParseSize(const std::string& text) {
  double v = 0;
  size_t pos = ParseDecimal(text, &v);
  std::string unit = text.substr(pos);
  std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},          {"b", 1},
      {"k", 1024.0},    {"kb", 1e3},
      {"kib", 1024.0},  {"m", 1 << 20},
      {"mb", 1e6},      {"mib", 1 << 20},
      {"g", 1 << 30},   {"gb", 1e9},
      {"gib", 1 << 30}, {"t", 1099511627776.0},
      {"tb", 1e12},     {"tib", 1099511627776.0}};
  const bool letters_only = std::all_of(
      unit.begin(), unit.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
  if (pos == 0 || !letters_only)
    return Status::InvalidArgument("bad size '" + text +
                                   "'; write a plain decimal number and a unit: 256MiB, 4GiB, "
                                   "1.5GiB or bytes");
  for (auto& [name, mult] : kUnits) {
    if (unit != name) continue;
    constexpr double kMax = 1ull << 60;  // 1 EiB: far past any pool or disk
    if (v * mult > kMax)
      return Status::InvalidArgument("size '" + text + "' is out of range (at most 1EiB)");
    return static_cast<uint64_t>(v * mult);
  }
  return Status::InvalidArgument("unknown size unit in '" + text + "'; use B, KiB, MiB, GiB, TiB");
}

Result<uint64_t> ParseDuration(const std::string& text) {
  double v = 0;
  size_t pos = ParseDecimal(text, &v);
  std::string unit = text.substr(pos);
  double mult = 0;
  if (unit == "s" || unit.empty())
    mult = 1;
  else if (unit == "m")
    mult = 60;
  else if (unit == "h")
    mult = 3600;
  else if (unit == "d")
    mult = 86400;
  if (pos == 0 || mult == 0)
    return Status::InvalidArgument("bad duration '" + text + "'; write it as 90s, 15m, 2h or 7d");
  constexpr double kMaxSeconds = 100.0 * 365 * 86400;
  if (v * mult > kMaxSeconds)
    return Status::InvalidArgument("duration '" + text + "' is out of range (at most 100 years)");
  return static_cast<uint64_t>(v * mult * 1e6);
}

int Run(int argc, char** argv) {
  // Logs go to stderr: stdout carries results (and --json must stay parseable).
  spdlog::set_default_logger(spdlog::stderr_color_mt("ec-store"));
  spdlog::set_level(spdlog::level::warn);
  spdlog::set_pattern("ec-store: %l: %v");
  Globals g;
  CLI::App app{"ec-store: inspect, fill and evict an encoder-cache store"};
  app.require_subcommand(1);
  app.add_option("--dir", g.dir, "store directory")->capture_default_str();
  app.add_flag("--json", g.json, "machine-readable output");
  app.add_option("--pool-size", g.pool_size, "pinned pool size (e.g. 256MiB)")
      ->capture_default_str();
  app.add_option("--disk-quota", g.disk_quota, "disk tier quota (e.g. 4GiB)")
      ->capture_default_str();
  app.add_flag("--compress", g.compress, "LZ4-compress entries spilled to disk where it pays");
  app.add_option("--server", g.server,
                 "talk to a running `ec-store serve` at HOST:PORT instead of opening --dir "
                 "(token from EC_STORE_TOKEN)");

  std::string ns = "default", key, file, out, dtype, shape;
  auto* put = app.add_subcommand("put", "store FILE (.safetensors, or raw bytes) under KEY");
  put->add_option("key", key, "entry key (the image's mm_hash)")->required();
  put->add_option("file", file, "tensor file")->required()->check(CLI::ExistingFile);
  put->add_option("-n,--namespace", ns, "model / encoder namespace")->capture_default_str();
  put->add_option("--dtype", dtype, "dtype of raw bytes (BF16, F16, F32, ...)");
  put->add_option("--shape", shape, "shape of raw bytes, ROWS,COLS");

  auto* get = app.add_subcommand("get", "write an entry to a file");
  get->add_option("key", key)->required();
  get->add_option("-o,--output", out, "output file; .safetensors gets a header")->required();
  get->add_option("-n,--namespace", ns)->capture_default_str();

  auto* inspect = app.add_subcommand("inspect", "show one entry");
  inspect->add_option("key", key)->required();
  inspect->add_option("-n,--namespace", ns)->capture_default_str();

  std::string tier_filter, ns_filter, prefix, sort = "age";
  size_t limit = 0;
  auto* ls = app.add_subcommand("ls", "list entries");
  ls->add_option("--tier", tier_filter, "pool or disk")->check(CLI::IsMember({"pool", "disk"}));
  ls->add_option("-n,--namespace", ns_filter, "only this namespace");
  ls->add_option("--prefix", prefix, "only keys starting with this");
  ls->add_option("--sort", sort, "size, age or hits")
      ->check(CLI::IsMember({"size", "age", "hits"}));
  ls->add_option("--limit", limit, "at most this many rows");

  auto* stats = app.add_subcommand("stats", "per-tier statistics");

  std::vector<std::string> keys;
  bool all = false;
  std::string older_than, to_bytes;
  auto* evict = app.add_subcommand("evict", "remove entries from every tier");
  evict->add_option("keys", keys, "keys to remove");
  evict->add_flag("--all", all, "remove every entry (of --namespace, when given)");
  evict->add_option("-n,--namespace", ns_filter, "only this namespace");
  evict->add_option("--older-than", older_than, "entries not accessed for this long (2h, 7d)");
  evict->add_option("--to-bytes", to_bytes, "evict least recently used until the store holds this");

  auto* verify = app.add_subcommand("verify", "check every entry's checksum");
  auto* compact = app.add_subcommand("compact", "rewrite segments holding dead records");
  auto* repair = app.add_subcommand("repair", "rebuild the index from the segment files");

  std::string src_dir;
  auto* import = app.add_subcommand("import", "load DIR/<mm_hash>/encoder_cache.safetensors");
  import->add_option("dir", src_dir)->required()->check(CLI::ExistingDirectory);
  import->add_option("-n,--namespace", ns)->capture_default_str();
  auto* exportc =
      app.add_subcommand("export", "write entries as DIR/<mm_hash>/encoder_cache.safetensors");
  exportc->add_option("dir", src_dir)->required();
  exportc->add_option("-n,--namespace", ns_filter, "only this namespace");

  std::string listen = "127.0.0.1:7070", token_file, rdma_listen;
  auto* serve = app.add_subcommand("serve", "run a store daemon serving clients over TCP");
  serve->add_option("--listen", listen, "HOST:PORT to bind")->capture_default_str();
  serve->add_option("--rdma-listen", rdma_listen,
                    "IP:PORT of an RDMA (RoCE/IB) port to serve gets over verbs");
  serve->add_option("--token-file", token_file,
                    "shared secret clients must present (or set EC_STORE_TOKEN); required "
                    "for a non-loopback --listen");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (!g.server.empty()) {
      if (serve->parsed()) throw CliError("InvalidArgument: serve takes --dir, not --server");
      if (ls->parsed() || evict->parsed()) goto shared_commands;  // below, for both modes
      auto client = ConnectClient(g);
      if (put->parsed()) {
        TensorMeta meta;
        std::string bytes;
        LoadPutInput(file, dtype, shape, &meta, &bytes);
        Check(client->Put(ns, key, meta,
                          {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}));
        if (!g.json)
          std::printf("stored %s (%s) on %s\n", key.c_str(), HumanBytes(bytes.size()).c_str(),
                      g.server.c_str());
        else
          std::cout << json{{"key", key}, {"bytes", bytes.size()}, {"server", g.server}}.dump()
                    << "\n";
      } else if (get->parsed() || inspect->parsed()) {
        auto found = Check(client->Lookup(ns, {key}));
        if (!found[0])
          throw CliError("NotFound: no entry for key '" + key + "' in namespace '" + ns + "' on " +
                         g.server);
        EntryInfo info = *found[0];
        if (inspect->parsed()) {
          std::cout << InfoJson(info).dump(g.json ? -1 : 2) << "\n";
        } else {
          std::string buf(info.bytes, '\0');
          info = Check(client->Get(ns, key, {reinterpret_cast<uint8_t*>(buf.data()), buf.size()}));
          WriteGetOutput(out, info.meta, buf);
          if (g.json)
            std::cout << InfoJson(info).dump() << "\n";
          else
            std::printf("wrote %s (%s) from %s to %s\n", key.c_str(),
                        HumanBytes(info.bytes).c_str(), g.server.c_str(), out.c_str());
        }
      } else if (stats->parsed()) {
        std::string js = Check(client->StatsJson());
        PrintStats(Check(StatsFromJson(js)), json::parse(js).value("transport", "tcp"), g.json);
      } else {
        throw CliError(
            "InvalidArgument: this command is not available with --server "
            "(remote: put, get, inspect, ls, stats, evict); run it with --dir on "
            "the server's host after stopping the server");
      }
      return 0;
    }
  shared_commands:
    if (serve->parsed()) {
      std::string token;
      if (!token_file.empty()) {
        token = Check(safetensors::ReadFile(token_file));
        while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
        if (token.empty())
          throw CliError("InvalidArgument: token file " + token_file + " is empty");
      } else if (const char* env = std::getenv("EC_STORE_TOKEN")) {
        token = env;
      }
      // Block the stop signals before any thread starts, so only sigwait below sees them.
      sigset_t stop;
      sigemptyset(&stop);
      sigaddset(&stop, SIGINT);
      sigaddset(&stop, SIGTERM);
      sigaddset(&stop, SIGQUIT);
      sigaddset(&stop, SIGHUP);
      pthread_sigmask(SIG_BLOCK, &stop, nullptr);
      spdlog::set_level(spdlog::level::info);
      spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ec-store] [%l] %v");
      auto store = OpenStore(g, Use::kServe);
      net::ServerOptions so;
      so.listen = listen;
      so.token = token;
      // Same-host readers map the pool through this socket (its permissions gate them).
      so.shm_socket = fs::absolute(g.dir + "/serve.sock").string();
      so.rdma_listen = rdma_listen;
      auto server = Check(net::Server::Start(store.get(), so));
      std::printf(
          "serving %s on %s (port %u, transport %s); SIGINT/SIGTERM to stop, SIGHUP "
          "to persist the pool\n",
          g.dir.c_str(), listen.c_str(), server->port(), server->transport());
      std::fflush(stdout);
      int sig = 0;
      // SIGHUP (a closed terminal, or an operator's "sync now") persists and keeps serving.
      while (sigwait(&stop, &sig) == 0 && sig == SIGHUP) {
        Status st = store->Flush();
        if (st.ok())
          spdlog::info("SIGHUP: the pool is persisted; still serving");
        else
          spdlog::error("SIGHUP: persisting the pool failed: {}", st.ToString());
      }
      spdlog::info("signal {}: stopping, persisting the pool", sig);
      server->Stop();
      Check(store->Close());
      spdlog::info("stopped cleanly");
      return 0;
    }
    if (put->parsed()) {
      TensorMeta meta;
      std::string bytes;
      LoadPutInput(file, dtype, shape, &meta, &bytes);
      Check(ValidateNewNamespace(ns));
      Check(ValidateNewKey(key));
      Check(ValidateMeta(meta, bytes.size()));
      auto store = OpenStore(g);
      Check(store->Put(ns, key, meta,
                       {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}));
      auto info = Check(store->Lookup(ns, key));
      Check(store->Close());
      if (g.json)
        std::cout << InfoJson(info).dump() << "\n";
      else
        std::printf("stored %s (%s, %s [%s]) in namespace %s\n", key.c_str(),
                    HumanBytes(info.bytes).c_str(), DTypeName(info.meta.dtype),
                    info.meta.ShapeString().c_str(), ns.c_str());
    } else if (get->parsed()) {
      auto store = OpenStore(g, Use::kInspect);
      auto info = Check(store->Lookup(ns, key));
      std::string buf(info.bytes, '\0');
      info = Check(store->Get(ns, key, {reinterpret_cast<uint8_t*>(buf.data()), buf.size()}));
      WriteGetOutput(out, info.meta, buf);
      Check(store->Close());
      if (g.json)
        std::cout << InfoJson(info).dump() << "\n";
      else
        std::printf("wrote %s (%s) to %s\n", key.c_str(), HumanBytes(info.bytes).c_str(),
                    out.c_str());
    } else if (inspect->parsed()) {
      auto store = OpenStore(g, Use::kInspect);
      auto info = Check(store->Lookup(ns, key));
      if (g.json) {
        std::cout << InfoJson(info).dump(2) << "\n";
      } else {
        std::printf(
            "key:          %s\nnamespace:    %s\ntier:         %s%s\nbytes:        %llu (%s)\n"
            "dtype:        %s\nshape:        [%s]\ncreated:      %s\nlast access:  %s\nhits:       "
            "  %llu\n",
            info.key.c_str(), info.ns.c_str(), TierName(info.tier),
            info.on_disk && info.tier == Tier::kPool ? " (also on disk)" : "",
            static_cast<unsigned long long>(info.bytes), HumanBytes(info.bytes).c_str(),
            DTypeName(info.meta.dtype), info.meta.ShapeString().c_str(),
            TimeString(info.created_us).c_str(), TimeString(info.last_access_us).c_str(),
            static_cast<unsigned long long>(info.hits));
      }
      Check(store->Close());
    } else if (ls->parsed()) {
      std::unique_ptr<Store> store;
      std::vector<EntryInfo> listed;
      if (g.server.empty()) {
        store = OpenStore(g, Use::kInspect);
        listed = store->List();
      } else {
        listed = Check(ConnectClient(g)->List());
      }
      std::vector<EntryInfo> rows;
      for (EntryInfo& e : listed) {
        if (!tier_filter.empty() && tier_filter != TierName(e.tier) &&
            !(tier_filter == "disk" && e.on_disk))
          continue;
        if (!ns_filter.empty() && e.ns != ns_filter) continue;
        if (!prefix.empty() && e.key.rfind(prefix, 0) != 0) continue;
        rows.push_back(std::move(e));
      }
      std::sort(rows.begin(), rows.end(), [&](const EntryInfo& a, const EntryInfo& b) {
        if (sort == "size") return a.bytes > b.bytes;
        if (sort == "hits") return a.hits > b.hits;
        return a.last_access_us < b.last_access_us;  // oldest first
      });
      if (limit && rows.size() > limit) rows.resize(limit);
      if (g.json) {
        json arr = json::array();
        for (auto& e : rows) arr.push_back(InfoJson(e));
        std::cout << arr.dump(2) << "\n";
      } else {
        PrintInfoTable(rows);
        std::printf("%zu entries\n", rows.size());
      }
      if (store) Check(store->Close());
    } else if (stats->parsed()) {
      auto store = OpenStore(g, Use::kInspect);
      StoreStats s = store->Stats();
      Check(store->Close());
      PrintStats(s, "local", g.json);
    } else if (evict->parsed()) {
      if (keys.empty() && !all && older_than.empty() && to_bytes.empty())
        throw CliError(
            "InvalidArgument: say what to evict: KEY..., --all, --older-than or --to-bytes");
      std::unique_ptr<Store> store;
      std::unique_ptr<net::Client> client;
      if (g.server.empty())
        store = OpenStore(g, Use::kInspect);
      else
        client = ConnectClient(g);
      std::vector<EntryInfo> victims;
      std::vector<EntryInfo> entries;
      if (all || !older_than.empty() || !to_bytes.empty())
        entries = store ? store->List() : Check(client->List());
      if (!ns_filter.empty())
        std::erase_if(entries, [&](const EntryInfo& e) { return e.ns != ns_filter; });
      std::string key_ns = ns_filter.empty() ? "default" : ns_filter;
      for (const std::string& k : keys) {
        if (store) {
          victims.push_back(Check(store->Lookup(key_ns, k)));
          continue;
        }
        auto found = Check(client->Lookup(key_ns, {k}));
        if (!found[0])
          throw CliError("NotFound: no entry for key '" + k + "' in namespace '" + key_ns + "'");
        victims.push_back(*found[0]);
      }
      if (all) victims.insert(victims.end(), entries.begin(), entries.end());
      if (!older_than.empty()) {
        uint64_t age = Check(ParseDuration(older_than));
        uint64_t now = static_cast<uint64_t>(std::time(nullptr)) * 1000000;
        for (const auto& e : entries)
          if (e.last_access_us + age < now) victims.push_back(e);
      }
      if (!to_bytes.empty()) {
        uint64_t target = Check(ParseSize(to_bytes));
        std::sort(entries.begin(), entries.end(),
                  [](auto& a, auto& b) { return a.last_access_us < b.last_access_us; });
        uint64_t total = 0;
        for (auto& e : entries) total += e.bytes;
        for (auto& e : entries) {
          if (total <= target) break;
          victims.push_back(e);
          total -= e.bytes;
        }
      }
      uint64_t n = 0, bytes = 0;
      if (store) {  // one batch: one durable tombstone write for all of them
        std::vector<std::pair<std::string, std::string>> ns_keys;
        for (const auto& v : victims) ns_keys.emplace_back(v.ns, v.key);
        std::vector<bool> erased;
        Check(store->EraseMany(ns_keys, &erased));
        for (size_t i = 0; i < victims.size(); ++i)
          if (erased[i]) ++n, bytes += victims[i].bytes;  // a key listed twice counts once
      }
      for (const auto& v : client ? victims : std::vector<EntryInfo>{}) {
        Status st = client->Erase(v.ns, v.key);
        if (st.IsNotFound()) continue;  // listed twice
        Check(st);
        ++n;
        bytes += v.bytes;
      }
      if (store) Check(store->Close());
      if (g.json)
        std::cout << json{{"evicted", n}, {"bytes", bytes}}.dump() << "\n";
      else
        std::printf("evicted %llu entries (%s)\n", (unsigned long long)n,
                    HumanBytes(bytes).c_str());
    } else if (verify->parsed()) {
      auto store = OpenStore(g, Use::kInspect);
      auto report = Check(store->Verify([&](uint64_t done, uint64_t total) {
        if (!g.json)
          std::fprintf(stderr, "\rverify: %llu/%llu entries", (unsigned long long)done,
                       (unsigned long long)total);
      }));
      if (!g.json) std::fprintf(stderr, "\n");
      Check(store->Close());
      if (g.json) {
        std::cout << json{{"checked", report.checked},
                          {"bytes", report.bytes},
                          {"corrupt", report.corrupt},
                          {"errors", report.errors}}
                         .dump(2)
                  << "\n";
      } else {
        std::printf("checked %llu entries (%s): %zu corrupt, %zu unreadable\n",
                    (unsigned long long)report.checked, HumanBytes(report.bytes).c_str(),
                    report.corrupt.size(), report.errors.size());
        for (auto& c : report.corrupt) std::printf("  dropped %s\n", c.c_str());
        for (auto& c : report.errors) std::printf("  kept (I/O error) %s\n", c.c_str());
      }
      if (!report.corrupt.empty())
        std::fprintf(stderr, "ec-store: error: %zu corrupt entries were dropped; recompute them\n",
                     report.corrupt.size());
      if (!report.errors.empty())
        std::fprintf(stderr,
                     "ec-store: error: %zu entries could not be read (I/O error) and were "
                     "kept; check the device, then run verify again\n",
                     report.errors.size());
      if (!report.corrupt.empty() || !report.errors.empty()) return 1;
    } else if (compact->parsed()) {
      auto store = OpenStore(g, Use::kInspect);
      uint64_t before = store->Stats().disk_file_bytes;
      Check(store->Compact(1.0));
      uint64_t after = store->Stats().disk_file_bytes;
      Check(store->Close());
      if (g.json)
        std::cout << json{{"before", before}, {"after", after}}.dump() << "\n";
      else
        std::printf("compacted: %s -> %s\n", HumanBytes(before).c_str(), HumanBytes(after).c_str());
    } else if (repair->parsed()) {
      auto store = OpenStore(g, Use::kRepair);
      StoreStats s = store->Stats();
      Check(store->Close());
      if (g.json)
        std::cout
            << json{{"entries", s.disk.entries}, {"corrupt_dropped", s.corrupt_dropped}}.dump()
            << "\n";
      else
        std::printf("index rebuilt from segments: %llu entries, %llu corrupt records skipped\n",
                    (unsigned long long)s.disk.entries, (unsigned long long)s.corrupt_dropped);
    } else if (import->parsed()) {
      return ImportEntries(g, src_dir, ns);
    } else if (exportc->parsed()) {
      return ExportEntries(g, src_dir, ns_filter);
    }
  } catch (const CliError& e) {
    std::fprintf(stderr, "ec-store: error: %s\n", WithFlagHints(e.what()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ec-store: error: %s\n", WithFlagHints(e.what()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace ecstore::cli
