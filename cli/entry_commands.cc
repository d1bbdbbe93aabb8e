#include "cli/entry_commands.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/safetensors.h"
#include "cli/flags.h"
#include "cli/output.h"
#include "cli/reach.h"

namespace ecstore::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::span<uint8_t> Bytes(std::string& s) {
  return {reinterpret_cast<uint8_t*>(s.data()), s.size()};
}
std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The tensor `put` stores: a .safetensors file (dtype and shape from its header), or raw
// bytes described by --dtype and --shape.
void LoadPutInput(const PutArgs& a, TensorMeta* meta, std::string* bytes) {
  if (EndsWith(a.file, ".safetensors") && a.dtype.empty()) {
    Check(safetensors::Load(a.file, meta, bytes));
    return;
  }
  if (a.dtype.empty() || a.shape.empty())
    throw CliError("InvalidArgument: " + a.file +
                   " is raw bytes; give --dtype and --shape (or a .safetensors file)");
  meta->dtype = Check(ParseDType(a.dtype));
  meta->shape = Check(ParseShape(a.shape));
  *bytes = Check(safetensors::ReadFile(a.file));
}

// What `get -o FILE` writes: safetensors when FILE ends so, raw bytes otherwise; `-o -`
// writes the raw bytes to stdout.
void WriteGetOutput(const std::string& out, const TensorMeta& meta, const std::string& buf) {
  if (EndsWith(out, ".safetensors")) {
    Check(safetensors::Save(out, meta, Bytes(buf)));
    return;
  }
  if (out == "-") {
    if (std::fwrite(buf.data(), 1, buf.size(), stdout) != buf.size() || std::fflush(stdout) != 0)
      throw CliError("IOError: writing to stdout failed: " + std::string(std::strerror(errno)));
    return;
  }
  FILE* f = std::fopen(out.c_str(), "wb");
  if (!f) throw CliError("IOError: cannot write " + out + ": " + std::strerror(errno));
  bool ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw CliError("IOError: writing " + out + " failed: " + std::strerror(errno));
}

// A cluster lists each replica of an entry: one (namespace, key) is one entry.
void Distinct(std::vector<EntryInfo>* entries) {
  std::set<std::pair<std::string, std::string>> seen;
  std::erase_if(*entries, [&](const EntryInfo& e) { return !seen.emplace(e.ns, e.key).second; });
}

std::string Candidates(const std::vector<EntryInfo>& matches) {
  std::string some;
  for (size_t i = 0; i < std::min<size_t>(matches.size(), 4); ++i)
    some += (i ? ", " : " ") + matches[i].ns + "/" + matches[i].key;
  return some + (matches.size() > 4 ? ", ..." : "");
}

// Without --namespace: the key in whichever namespace holds it (the vLLM connector's are
// vllm-<model>-<hash>); with --prefix the one key of any namespace it begins. A key or prefix
// found in several namespaces is an error listing them; a missing key names the keys that
// begin with it, taken only when asked for. A plain key is matched whole, so a missing key is
// a miss, never another key's bytes (img-1 is not img-12; an unsalted hash not a salted one).
EntryInfo ResolveKeyAnywhere(Cache& cache, const std::string& want, bool by_prefix) {
  std::vector<EntryInfo> exact, prefixed;
  Check(cache.ListPages(1024, [&](std::vector<EntryInfo>&& page) {
    for (EntryInfo& e : page) {
      if (!by_prefix && e.key == want)
        exact.push_back(std::move(e));
      else if (prefixed.size() < 5 && e.key.rfind(want, 0) == 0)
        prefixed.push_back(std::move(e));
    }
    return true;
  }));
  Distinct(&exact);
  Distinct(&prefixed);
  if (exact.size() == 1) return exact[0];
  if (exact.size() > 1)
    throw CliError("InvalidArgument: key '" + want + "' is in " + std::to_string(exact.size()) +
                   " namespaces:" + Candidates(exact) + "; give one with --namespace");
  if (by_prefix && prefixed.size() == 1) return prefixed[0];
  if (by_prefix && prefixed.size() > 1)
    throw CliError("InvalidArgument: key prefix '" + want + "' is ambiguous:" +
                   Candidates(prefixed) + "; give more characters or --namespace");
  throw CliError("NotFound: no entry for key '" + want + "' in any namespace" +
                 (!by_prefix && !prefixed.empty()
                      ? " (keys that begin with it:" + Candidates(prefixed) +
                            "; add --prefix to take the one it begins)"
                      : "; `ec-store ls` lists the keys, `ec-store namespaces` the namespaces"));
}

// The entry a key names in `ns`: the key itself, or with `by_prefix` the one key of the
// namespace it begins (as git takes a short hash). Several matches are an error listing a
// few. An empty `ns` looks in every namespace.
EntryInfo ResolveKey(Cache& cache, const std::string& ns, const std::string& prefix,
                     bool by_prefix) {
  if (ns.empty()) return ResolveKeyAnywhere(cache, prefix, by_prefix);
  if (!by_prefix) return Check(cache.Lookup(ns, prefix));
  std::vector<EntryInfo> matches;
  Check(cache.ListPages(1024, [&](std::vector<EntryInfo>&& page) {
    for (EntryInfo& e : page)
      if (e.ns == ns && e.key.rfind(prefix, 0) == 0) matches.push_back(std::move(e));
    return matches.size() < 4;
  }));
  Distinct(&matches);
  if (matches.size() == 1) return matches[0];
  if (matches.empty())
    throw CliError("NotFound: no key of namespace " + ns + " begins with '" + prefix + "'");
  std::string some;
  for (size_t i = 0; i < std::min<size_t>(matches.size(), 3); ++i) some += " " + matches[i].key;
  throw CliError("InvalidArgument: key prefix '" + prefix + "' is ambiguous in namespace " + ns +
                 ": it starts" + some + (matches.size() > 3 ? " ..." : "") +
                 "; give more characters");
}

// The entries `evict` removes: the named keys that exist -- full keys only, never a
// prefix, as removal cannot be undone (others are reported in *missing) -- plus --all /
// --older-than / --to-bytes over the listing.
std::vector<EntryInfo> EvictionVictims(Cache& cache, const EvictArgs& a,
                                       std::vector<std::string>* missing) {
  std::vector<EntryInfo> victims, entries;
  if (a.all || !a.older_than.empty() || !a.to_bytes.empty()) entries = Check(cache.List());
  if (!a.ns.empty()) std::erase_if(entries, [&](const EntryInfo& e) { return e.ns != a.ns; });
  // Without --namespace a key is looked for in every namespace, full keys only.
  std::map<std::string, std::vector<EntryInfo>> anywhere;
  if (a.ns.empty() && !a.keys.empty()) {
    std::set<std::string> wanted(a.keys.begin(), a.keys.end());
    Check(cache.ListPages(1024, [&](std::vector<EntryInfo>&& page) {
      for (EntryInfo& e : page)
        if (wanted.count(e.key)) anywhere[e.key].push_back(std::move(e));
      return true;
    }));
  }
  for (const std::string& k : a.keys) {
    if (a.ns.empty()) {
      auto found = anywhere.find(k);
      if (found != anywhere.end()) Distinct(&found->second);
      if (found == anywhere.end()) {
        missing->push_back(k);
      } else if (found->second.size() > 1) {
        throw CliError("InvalidArgument: key '" + k + "' is in " +
                       std::to_string(found->second.size()) +
                       " namespaces:" + Candidates(found->second) +
                       "; give one with --namespace (nothing was evicted)");
      } else {
        victims.push_back(found->second[0]);
      }
      continue;
    }
    // A miss is not "not found": in a cluster a place that did not answer reads as a miss.
    // The key is erased at every place all the same, and is missing only where that erase,
    // answered by every place, found it nowhere.
    auto info = cache.Lookup(a.ns, k);
    if (info.ok())
      victims.push_back(std::move(info).value());
    else if (info.status().IsNotFound())
      victims.push_back(EntryInfo{.ns = a.ns, .key = k, .tiers = {}, .meta = {}});
    else
      Check(info.status());
  }
  if (a.all) victims.insert(victims.end(), entries.begin(), entries.end());
  if (!a.older_than.empty()) {
    uint64_t age = Check(ParseDuration(a.older_than));
    uint64_t now = static_cast<uint64_t>(std::time(nullptr)) * 1000000;
    for (const auto& e : entries)
      if (e.last_access_us + age < now) victims.push_back(e);
  }
  if (!a.to_bytes.empty()) {
    uint64_t target = Check(ParseSize(a.to_bytes));
    std::sort(entries.begin(), entries.end(),
              [](auto& x, auto& y) { return x.last_access_us < y.last_access_us; });
    uint64_t total = 0;
    for (auto& e : entries) total += e.bytes;
    for (auto& e : entries) {
      if (total <= target) break;
      victims.push_back(e);
      total -= e.bytes;
    }
  }
  return victims;
}

}  // namespace

bool IsTerminal(int fd) { return isatty(fd) == 1; }

std::unique_ptr<Store> OpenStore(const Globals& g, Use use) {
  // Reading commands never create a store where there is none (a mistyped --dir).
  if ((use == Use::kInspect || use == Use::kRepair) && !fs::exists(g.dir + "/index.sqlite") &&
      !fs::exists(g.dir + "/segments"))
    throw CliError("NotFound: no store in " + g.dir +
                   " (no index.sqlite or segments/ there); check --dir (or EC_STORE_DIR), or "
                   "reach a server with --server");
  Options o;
  if (use == Use::kServe) o.memory_backend = NewSharedHostBackend;
  const bool inspect = use == Use::kInspect || use == Use::kRepair;
  o.pool_bytes = Check(ParseSize(g.pool_size));  // checked even where it is not used
  if (inspect) o.pool_bytes = 1ull << 20;
  o.promote_on_get = !inspect;
  o.disk_quota_bytes = Check(ParseSize(g.disk_quota));
  o.compress = g.compress;
  o.group_access = g.group_access;
  o.eviction_policy = g.eviction_policy;
  o.rebuild_index = use == Use::kRepair;
  if (!inspect) {  // a device tier only where entries are served
    o.device = g.device;
    o.device_pool_bytes = Check(ParseSize(g.device_pool_size));
  }
  return Check(Store::Open(g.dir, o));
}

Target Target::Open(const Globals& g, Use use) {
  Target t;
  if (!g.server.empty() && !g.cluster.empty())
    throw CliError(
        "InvalidArgument: give --server (one daemon) or --cluster (all of them), "
        "not both");
  if (g.server.empty() && g.cluster.empty()) {
    t.store_ = OpenStore(g, use);
    return t;
  }
  net::ClientOptions co = ClientOptionsOf(g);
  if (!g.cluster.empty()) {
    cluster::ClusterOptions o;
    o.client = co;
    o.etcd = EtcdAccessOf(g);
    o.replicas = g.replicas;
    t.cluster_ = Check(cluster::ClusterCache::Open(g.cluster, o));
    t.server_ = "cluster " + t.cluster_->name();
    return t;
  }
  t.client_ = Check(net::Client::Connect(g.server, co));
  t.server_ = g.server;
  return t;
}

std::string Target::where() const {
  if (server_.empty()) return "";
  return (cluster_ ? " in " : " on ") + server_;
}

void Target::Close() {
  if (store_) Check(store_->Close());
}

int PutCommand(const Globals& g, const PutArgs& a) {
  TensorMeta meta;
  std::string bytes;
  LoadPutInput(a, &meta, &bytes);
  Check(ValidateNewNamespace(a.ns));  // before opening: bad input creates no store
  Check(ValidateNewKey(a.key));
  Check(ValidateMeta(meta, bytes.size()));
  Target t = Target::Open(g, Use::kWrite);
  Check(t.cache().Put(a.ns, a.key, meta, Bytes(bytes)));
  EntryInfo info = Check(t.cache().Lookup(a.ns, a.key));
  t.Close();
  if (g.json)
    std::cout << InfoJson(info).dump() << "\n";
  else
    std::printf("stored %s (%s, %s [%s]) in namespace %s%s\n", a.key.c_str(),
                HumanBytes(info.bytes).c_str(), DTypeName(info.meta.dtype),
                info.meta.ShapeString().c_str(), a.ns.c_str(), t.where().c_str());
  return 0;
}

// Reads an entry into *buf sized first by `expected` (a lookup's answer), then by what the
// read says it holds: a row whose length was wrong (corrected from the record) or a key
// replaced meanwhile by another size must not leave a tail the read never wrote.
static Result<EntryInfo> ReadSized(const std::function<Result<EntryInfo>(std::string*)>& get,
                                   const std::function<Result<EntryInfo>()>& lookup,
                                   uint64_t expected, std::string* buf) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    buf->assign(expected, '\0');
    Result<EntryInfo> info = get(buf);
    if (info.ok()) {
      if (info->bytes <= buf->size()) {
        buf->resize(info->bytes);
        return info;
      }
      expected = info->bytes;
      continue;
    }
    if (!info.status().IsInvalidArgument()) return info;
    auto now = lookup();  // larger now than the buffer: sized again
    if (!now.ok()) return now.status();
    expected = now->bytes;
  }
  return Status::Busy("the entry kept changing size while being read; try again");
}

int GetCommand(const Globals& g, const std::string& ns, const std::string& key, bool prefix,
               const std::string& out) {
  Target t = Target::Open(g, Use::kInspect);
  EntryInfo info = ResolveKey(t.cache(), ns, key, prefix);
  const std::string k = info.key, at = info.ns;
  std::string buf;
  info = Check(ReadSized([&](std::string* b) { return t.cache().Get(at, k, Bytes(*b)); },
                         [&] { return t.cache().Lookup(at, k); }, info.bytes, &buf));
  WriteGetOutput(out, info.meta, buf);
  t.Close();
  // With `-o -` stdout carries the bytes: the report goes to stderr.
  FILE* report = out == "-" ? stderr : stdout;
  if (g.json)
    std::fprintf(report, "%s\n", InfoJson(info).dump().c_str());
  else
    std::fprintf(report, "wrote %s (%s)%s to %s\n", info.key.c_str(),
                 HumanBytes(info.bytes).c_str(), t.where().c_str(),
                 out == "-" ? "stdout" : out.c_str());
  return 0;
}

int InspectCommand(const Globals& g, const std::string& ns, const std::string& key, bool prefix) {
  Target t = Target::Open(g, Use::kInspect);
  EntryInfo info = ResolveKey(t.cache(), ns, key, prefix);
  t.Close();
  if (g.json)
    std::cout << InfoJson(info).dump(JsonIndent(g)) << "\n";
  else
    PrintInfo(info);
  return 0;
}

int ListCommand(const Globals& g, const ListArgs& a) {
  Target t = Target::Open(g, Use::kInspect);
  std::vector<std::pair<EntryInfo, std::string>> rows;  // an entry, and its node in a cluster
  auto keep = [&](std::vector<EntryInfo>&& page, const std::string& node) {
    for (EntryInfo& e : page) {
      // --tier disk: every entry with a durable copy; --tier pool: those served from the pool
      if (a.tier == "disk" && !e.on_disk()) continue;
      if (!a.tier.empty() && a.tier != "disk" && a.tier != TierName(e.tier())) continue;
      if (!a.ns.empty() && e.ns != a.ns) continue;
      if (!a.prefix.empty() && e.key.rfind(a.prefix, 0) != 0) continue;
      rows.emplace_back(std::move(e), node);
    }
    return true;
  };
  if (t.cluster())
    Check(t.cluster()->ListNodePages(1024, keep));
  else
    Check(t.cache().ListPages(1024,
                              [&](std::vector<EntryInfo>&& p) { return keep(std::move(p), ""); }));
  t.Close();
  std::sort(rows.begin(), rows.end(), [&](const auto& x, const auto& y) {
    if (a.sort == "size") return x.first.bytes > y.first.bytes;
    if (a.sort == "hits") return x.first.hits > y.first.hits;
    return x.first.last_access_us < y.first.last_access_us;  // oldest first
  });
  if (a.limit && rows.size() > a.limit) rows.resize(a.limit);
  std::vector<EntryInfo> entries;
  std::vector<std::string> nodes;
  for (auto& [e, node] : rows) entries.push_back(std::move(e)), nodes.push_back(std::move(node));
  if (g.json) {
    json arr = json::array();
    for (size_t i = 0; i < entries.size(); ++i) {
      json j = InfoJson(entries[i]);
      if (t.cluster()) j["node"] = nodes[i];
      arr.push_back(std::move(j));
    }
    std::cout << arr.dump(JsonIndent(g)) << "\n";
  } else {
    PrintInfoTable(entries, a.wide || !IsTerminal(1), t.cluster() ? &nodes : nullptr);
    std::printf("%zu entries\n", entries.size());
  }
  return 0;
}

// Every namespace with its entries and bytes, largest first.
int NamespacesCommand(const Globals& g) {
  Target t = Target::Open(g, Use::kInspect);
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_ns;  // ns -> (entries, bytes)
  Check(t.cache().ListPages(1024, [&](std::vector<EntryInfo>&& page) {
    for (const EntryInfo& e : page) {
      auto& [n, bytes] = by_ns[e.ns];
      ++n;
      bytes += e.bytes;
    }
    return true;
  }));
  t.Close();
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> rows(by_ns.begin(),
                                                                          by_ns.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& x, const auto& y) { return x.second.second > y.second.second; });
  if (g.json) {
    json arr = json::array();
    for (const auto& [ns, v] : rows)
      arr.push_back({{"namespace", ns}, {"entries", v.first}, {"bytes", v.second}});
    std::cout << arr.dump() << "\n";
    return 0;
  }
  size_t width = 9;
  for (const auto& r : rows) width = std::max(width, r.first.size());
  std::printf("%-*s %10s %10s\n", static_cast<int>(width), "NAMESPACE", "ENTRIES", "BYTES");
  for (const auto& [ns, v] : rows)
    std::printf("%-*s %10llu %10s\n", static_cast<int>(width), ns.c_str(),
                static_cast<unsigned long long>(v.first), HumanBytes(v.second).c_str());
  std::printf("%zu namespaces\n", rows.size());
  return 0;
}

// Through a cluster: the nodes that answered, added up; nodes that did not make it a partial
// sum, said in the JSON ("partial", "not_answering") and on stderr, and the exit status 1.
int StatsCommand(const Globals& g) {
  Target t = Target::Open(g, Use::kInspect);
  std::vector<std::string> missing;
  StoreStats s = Check(t.cluster() ? t.cluster()->Stats(&missing) : t.cache().Stats());
  const std::string transport = t.cache().transport();
  json extra = json::object();
  if (t.cluster()) {
    // Each node counts its own copies: a key with replicas is one entry in several copies.
    std::set<std::pair<std::string, std::string>> distinct;
    Check(t.cluster()->ListPages(1024, [&](std::vector<EntryInfo>&& page) {
      for (EntryInfo& e : page) distinct.emplace(std::move(e.ns), std::move(e.key));
      return true;
    }));
    extra["partial"] = !missing.empty(), extra["not_answering"] = missing;
    extra["cluster"] = {{"entries", distinct.size()}, {"copies", s.keydir_entries}};
    if (!g.json)
      std::printf("cluster: %zu entries in %llu copies\n", distinct.size(),
                  static_cast<unsigned long long>(s.keydir_entries));
  }
  t.Close();
  PrintStats(s, transport, g.json, JsonIndent(g), extra.dump());
  if (missing.empty()) return 0;
  std::string ids;
  for (const std::string& id : missing) ids += " " + id;
  std::fprintf(stderr, "ec-store: partial: %zu node(s) did not answer and are not counted:%s\n",
               missing.size(), ids.c_str());
  return 1;
}

int EvictCommand(const Globals& g, const EvictArgs& a) {
  if (a.keys.empty() && !a.all && a.older_than.empty() && a.to_bytes.empty())
    throw CliError("InvalidArgument: say what to evict: KEY..., --all, --older-than or --to-bytes");
  Target t = Target::Open(g, Use::kInspect);
  std::vector<std::string> missing;
  std::vector<EntryInfo> victims = EvictionVictims(t.cache(), a, &missing);
  std::vector<std::pair<std::string, std::string>> ns_keys;
  for (const auto& v : victims) ns_keys.emplace_back(v.ns, v.key);
  std::vector<bool> erased;
  // Locally one batch: one durable tombstone write for all of them. A place that did not
  // answer fails it (not done), never reads as "not found".
  Check(t.cache().EraseMany(ns_keys, &erased));
  uint64_t n = 0, bytes = 0;
  std::set<std::string> named_gone;
  for (size_t i = 0; i < victims.size(); ++i)
    if (erased[i]) ++n, bytes += victims[i].bytes, named_gone.insert(victims[i].key);
  if (!a.ns.empty())
    for (const std::string& k : a.keys)
      if (!named_gone.count(k) && std::find(missing.begin(), missing.end(), k) == missing.end())
        missing.push_back(k);
  t.Close();
  if (g.json)
    std::cout << json{{"evicted", n}, {"bytes", bytes}, {"not_found", missing}}.dump() << "\n";
  else
    std::printf(
        "evicted %llu entries (%s)%s\n", (unsigned long long)n, HumanBytes(bytes).c_str(),
        missing.empty() ? "" : (", " + std::to_string(missing.size()) + " not found").c_str());
  for (const std::string& k : missing) std::fprintf(stderr, "ec-store: not found: %s\n", k.c_str());
  return missing.empty() ? 0 : 1;  // the others are evicted; a named key that was not there
}

// Loads DIR/<key>/encoder_cache.safetensors files. A bad entry (a file that does not parse,
// a name that is not a valid key) is reported and skipped; a store error stops the import.
int ImportCommand(const Globals& g, const std::string& src_dir, const std::string& ns) {
  Target t = Target::Open(g, Use::kWrite);
  uint64_t n = 0, bytes = 0;
  std::vector<std::string> dirs, skipped;
  for (const auto& d : fs::directory_iterator(src_dir))
    if (d.is_directory()) dirs.push_back(d.path().filename());
  std::sort(dirs.begin(), dirs.end());
  Progress progress("import", "entries", !g.json);
  for (const std::string& hash : dirs) {
    std::string path = src_dir + "/" + hash + "/encoder_cache.safetensors";
    if (!fs::exists(path)) continue;
    TensorMeta meta;
    std::string data;
    Status st = ValidateNewKey(hash);
    if (st.ok()) st = safetensors::Load(path, &meta, &data);
    if (st.ok()) st = t.cache().Put(ns, hash, meta, Bytes(data));
    if (st.IsInvalidArgument()) {
      skipped.push_back(path + ": " + st.message());
      continue;
    }
    Check(st);
    ++n;
    bytes += data.size();
    progress.Update(n, dirs.size());
  }
  progress.Done();
  t.Close();
  ReportSkipped(skipped);
  if (g.json)
    std::cout << json{{"imported", n}, {"bytes", bytes}, {"skipped", skipped}}.dump() << "\n";
  else
    std::printf("imported %llu entries (%s)%s, skipped %zu\n", (unsigned long long)n,
                HumanBytes(bytes).c_str(), t.where().c_str(), skipped.size());
  return skipped.empty() ? 0 : 1;
}

// Writes entries as vLLM's file connector lays them out: DIR/<key>/encoder_cache.safetensors,
// each file all-or-nothing (temporary name, fsync, rename). Entries of several namespaces go
// to DIR/<namespace>/<key>/... so equal keys never overwrite each other. Reading a local
// store for export leaves no trace (no hits, no LRU touch, no promotion); through a server
// the reads count as gets. An entry that cannot be written is reported and skipped.
int ExportCommand(const Globals& g, const std::string& out_dir, const std::string& ns_filter) {
  Target t = Target::Open(g, Use::kInspect);
  std::vector<EntryInfo> entries = Check(t.cache().List());
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
    std::string buf;
    std::error_code ec;
    if (st.ok() && !fs::create_directories(dir, ec) && ec)
      st = Status::IOError("cannot create " + dir + ": " + ec.message());
    Result<EntryInfo> info = st;
    if (st.ok())
      info = ReadSized(
          [&](std::string* b) {
            return t.local() ? t.local()->Get(e.ns, e.key, Bytes(*b), quiet)
                             : t.cache().Get(e.ns, e.key, Bytes(*b));
          },
          [&] { return t.cache().Lookup(e.ns, e.key); }, e.bytes, &buf);
    st = info.ok() ? safetensors::SaveDurable(dir + "/encoder_cache.safetensors", info->meta,
                                              Bytes(std::as_const(buf)))
                   : info.status();
    if (!st.ok()) {
      skipped.push_back(e.ns + "/" + e.key + ": " + st.ToString());
      continue;
    }
    ++n;
  }
  t.Close();
  ReportSkipped(skipped);
  if (g.json)
    std::cout << json{{"exported", n}, {"skipped", skipped}, {"by_namespace", nested}}.dump()
              << "\n";
  else
    std::printf("exported %llu entries to %s%s, skipped %zu\n", (unsigned long long)n,
                out_dir.c_str(), nested ? " (one folder per namespace)" : "", skipped.size());
  return skipped.empty() ? 0 : 1;
}

}  // namespace ecstore::cli
