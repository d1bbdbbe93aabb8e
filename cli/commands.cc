#include "cli/commands.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/safetensors.h"
#include "cli/cluster_commands.h"
#include "cli/completion.h"
#include "cli/config.h"
#include "cli/entry_commands.h"
#include "cli/flags.h"
#include "cli/output.h"
#include "cli/reach.h"
#include "cli/serve.h"
#include "cli/serve_events.h"
#include "cli/validators.h"
#include "cluster/etcd.h"
#include "net/socket.h"

namespace ecstore::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Admin (verify, compact) runs where one store is: a local directory, or one daemon through
// --server (no progress there: one reply at the end). A cluster has no admin facet.
Target OpenAdmin(const Globals& g, const char* what, Admin** admin) {
  if (!g.cluster.empty())
    throw CliError(std::string("InvalidArgument: ") + what +
                   " runs on one node's store: give --server HOST:PORT (`cluster status` lists "
                   "the nodes' addresses)");
  Target t = Target::Open(g, Use::kInspect);
  *admin = t.cache().capabilities().admin;
  if (!*admin) throw CliError(std::string("InvalidArgument: ") + what + " is not offered here");
  return t;
}

int VerifyCommand(const Globals& g) {
  Admin* admin = nullptr;
  Target t = OpenAdmin(g, "verify", &admin);
  Progress progress("verify", "entries", !g.json && t.local());
  VerifyReport report =
      Check(admin->Verify([&](uint64_t done, uint64_t total) { progress.Update(done, total); }));
  progress.Done();
  t.Close();
  if (g.json) {
    std::cout << json{{"checked", report.checked},
                      {"bytes", report.bytes},
                      {"corrupt", report.corrupt},
                      {"errors", report.errors}}
                     .dump(JsonIndent(g))
              << "\n";
  } else {
    std::printf("checked %llu entries (%s)%s: %zu corrupt, %zu unreadable\n",
                (unsigned long long)report.checked, HumanBytes(report.bytes).c_str(),
                t.where().c_str(), report.corrupt.size(), report.errors.size());
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
  return report.corrupt.empty() && report.errors.empty() ? 0 : 1;
}

int CompactCommand(const Globals& g) {
  Admin* admin = nullptr;
  Target t = OpenAdmin(g, "compact", &admin);
  CompactReport r = Check(admin->Compact(1.0));
  t.Close();
  if (g.json)
    std::cout << json{{"before", r.before}, {"after", r.after}}.dump() << "\n";
  else
    std::printf("compacted: %s -> %s\n", HumanBytes(r.before).c_str(), HumanBytes(r.after).c_str());
  return 0;
}

int RepairCommand(const Globals& g) {
  auto store = OpenStore(g, Use::kRepair);
  StoreStats s = Check(store->Stats());
  Check(store->Close());
  if (g.json)
    std::cout << json{{"entries", s.disk().entries}, {"corrupt_dropped", s.corrupt_dropped}}.dump()
              << "\n";
  else
    std::printf("index rebuilt from segments: %llu entries, %llu corrupt records skipped\n",
                (unsigned long long)s.disk().entries, (unsigned long long)s.corrupt_dropped);
  return 0;
}

// Every subcommand, and what it runs once parsed.
struct Commands {
  Globals g;
  PutArgs put;
  std::string get_out;
  std::string find_ns;       // get / inspect: empty = whichever namespace holds the key
  bool find_prefix = false;  // get / inspect --prefix: the key is a prefix
  ListArgs ls;
  EvictArgs evict;
  std::string dir_arg;
  ServeArgs serve;
  std::string cluster_what;  // `cluster status`
  std::string keys_prefix;   // `events-keys PREFIX`
  std::vector<std::string> locate_keys;
  std::function<Result<Settings>()> reread;  // serve's settings, read again (SIGHUP)
  std::vector<std::pair<CLI::App*, std::function<int()>>> run;
  // Commands that need the store itself (its files), not a connection to it.
  std::vector<CLI::App*> local_only;
};

// --server: HOST:PORT, tcp://HOST:PORT or unix:/path/serve.sock, checked before any
// connection (a scheme ec-store does not speak, e.g. http://, is named).
const CLI::Validator kServer(
    [](const std::string& v) -> std::string {
      const char* forms =
          " (give HOST:PORT, tcp://HOST:PORT, tls://HOST:PORT or unix:/path/serve.sock)";
      if (v.rfind("unix:", 0) == 0)
        return v.size() > 5 ? "" : std::string("unix: names no socket") + forms;
      std::string rest = v;
      if (const size_t scheme = v.find("://"); scheme != std::string::npos) {
        if (v.compare(0, scheme, "tcp") != 0 && v.compare(0, scheme, "tls") != 0)
          return "'" + v.substr(0, scheme + 3) + "' is not a scheme ec-store speaks: drop it" +
                 forms;
        rest = v.substr(scheme + 3);
      }
      auto hp = net::ParseHostPort(rest);
      return hp.ok() ? "" : hp.status().message() + forms;
    },
    "HOST:PORT");

void AddGlobals(CLI::App& app, Globals& g) {
  app.add_option("--dir", g.dir, "store directory")->capture_default_str();
  app.add_flag("--json", g.json, "machine-readable output: one JSON object per line");
  app.add_flag("--pretty", g.pretty, "with --json: indented for humans");
  app.add_flag("--dry-run", g.dry_run,
               "check the command line (its command, flags, values and the files they name) "
               "and exit 0 without running it");
  app.add_option("--pool-size", g.pool_size,
                 "pinned pool size (e.g. 256MiB; MiB, GiB binary, MB, GB decimal)")
      ->check(kSize)
      ->capture_default_str();
  app.add_option("--device-pool-size", g.device_pool_size,
                 "GPU device tier size (e.g. 8GiB; 0 = none; needs a CUDA build and a GPU)")
      ->check(kSize)
      ->capture_default_str();
  app.add_option("--device,--device-pool-gpu", g.device, "GPU of the device tier (its ordinal)")
      ->capture_default_str();
  app.add_option("--disk-quota", g.disk_quota, "disk tier quota (e.g. 4GiB)")
      ->check(kSize)
      ->capture_default_str();
  app.add_flag("--compress", g.compress, "LZ4-compress entries spilled to disk where it pays");
  app.add_flag("--group-access", g.group_access,
               "a new store directory is 0750 and its files 0640 (default 0700/0600)");
  app.add_option("--eviction-policy", g.eviction_policy,
                 "which entries leave first: freq (fewest recent requests; at the disk quota, "
                 "x recompute cost per byte), lru or gdsf")
      ->check(CLI::IsMember({"freq", "lru", "gdsf"}))
      ->capture_default_str();
  app.add_option("--cluster", g.cluster,
                 "etcd://HOST:PORT[,HOST:PORT...]/NAME: serve joins this cluster; entry "
                 "commands reach every node's entries; `cluster status` lists its nodes")
      ->check(CLI::Validator(
          [](const std::string& v) {
            std::string name;
            auto c = cluster::EtcdClient::Parse(v, &name);
            return c.ok() ? std::string() : c.status().message();
          },
          "etcd://HOST:PORT/NAME"));
  app.add_option("--replicas", g.replicas,
                 "through --cluster: a put goes to this many nodes (distinct hosts where there "
                 "are enough), a get reads the first that answers")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--server", g.server,
                 "talk to a running `ec-store serve` at HOST:PORT (or tcp://HOST:PORT, "
                 "unix:/path/serve.sock) instead of opening --dir")
      ->check(kServer);
  app.add_option("--timeout", g.timeout, "a client's bound on each reply from --server")
      ->check(kDuration)
      ->capture_default_str();
  app.add_option("--token-file", g.token_file,
                 "file holding the shared secret (serve: clients must present it, required for "
                 "a non-loopback --listen; clients: presented). Else EC_STORE_TOKEN");
  app.add_option("--tls-ca", g.tls_ca,
                 "PEM CA certificate: clients trust servers it signed (default: the system's); "
                 "serve asks clients for certificates it signed");
  app.add_option("--tls-cert", g.tls_cert,
                 "PEM certificate: serve's (TLS on its TCP port), or a client's own where the "
                 "server requires one");
  app.add_option("--tls-key", g.tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-server-name", g.tls_server_name,
                 "the name the server's certificate must carry (default: the host connected to)");
  app.add_option("--etcd-ca", g.etcd_ca,
                 "PEM CA the cluster's etcd (etcds://) is verified against");
  app.add_option("--etcd-cert", g.etcd_cert,
                 "PEM client certificate for an etcd with --client-cert-auth");
  app.add_option("--etcd-key", g.etcd_key, "PEM key of --etcd-cert");
  app.add_option("--etcd-user", g.etcd_user, "etcd user (etcdctl auth enable)");
  app.add_option("--etcd-password-file", g.etcd_password_file,
                 "file holding --etcd-user's password");
  app.add_option("--log-level", g.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--config", g.config,
                 "TOML/INI file of settings (global ones at the top, serve's under [serve]); "
                 "the command line and EC_STORE_* variables take precedence");
}

// get and inspect: one entry, by its exact key (a prefix with --prefix).
void AddReadCommands(CLI::App& app, Commands& c) {
  auto* get = app.add_subcommand("get", "write an entry to a file");
  get->add_option("key", c.put.key, "entry key (the image's mm_hash)")->required();
  get->add_option("-o,--output", c.get_out,
                  "output file (.safetensors gets a header); - writes raw bytes to stdout")
      ->required();
  const char* find_ns_help = "the key's namespace (default: whichever namespace holds it)";
  get->add_option("-n,--namespace", c.find_ns, find_ns_help);
  const char* prefix_help = "KEY is a prefix: the one key it begins (several are listed)";
  get->add_flag("--prefix", c.find_prefix, prefix_help);
  c.run.emplace_back(
      get, [&c] { return GetCommand(c.g, c.find_ns, c.put.key, c.find_prefix, c.get_out); });

  auto* inspect = app.add_subcommand("inspect", "show one entry");
  inspect->add_option("key", c.put.key, "entry key (the image's mm_hash)")->required();
  inspect->add_option("-n,--namespace", c.find_ns, find_ns_help);
  inspect->add_flag("--prefix", c.find_prefix, prefix_help);
  c.run.emplace_back(inspect,
                     [&c] { return InspectCommand(c.g, c.find_ns, c.put.key, c.find_prefix); });
}

void AddEntryCommands(CLI::App& app, Commands& c) {
  c.put.ns = kDefaultNamespace;
  auto* put = app.add_subcommand("put", "store FILE (.safetensors, or raw bytes) under KEY");
  put->add_option("key", c.put.key, "entry key (the image's mm_hash)")->required();
  put->add_option("file", c.put.file, "tensor file")->required()->check(CLI::ExistingFile);
  put->add_option("-n,--namespace", c.put.ns, "model / encoder namespace")->capture_default_str();
  put->add_option("--dtype", c.put.dtype, "dtype of raw bytes (BF16, F16, F32, ...)");
  put->add_option("--shape", c.put.shape, "shape of raw bytes, ROWS,COLS");
  c.run.emplace_back(put, [&c] { return PutCommand(c.g, c.put); });

  AddReadCommands(app, c);

  auto* locate = app.add_subcommand("locate", "which nodes and media hold each key");
  locate->add_option("keys", c.locate_keys, "entry keys (the images' mm_hash)")->required();
  locate->add_option("-n,--namespace", c.put.ns, "the keys' namespace")->capture_default_str();
  c.run.emplace_back(locate, [&c] { return LocateCommand(c.g, c.put.ns, c.locate_keys); });

  auto* namespaces = app.add_subcommand("namespaces", "list namespaces, their entries and bytes");
  c.run.emplace_back(namespaces, [&c] { return NamespacesCommand(c.g); });

  auto* ls = app.add_subcommand("ls", "list entries");
  ls->add_option("--tier", c.ls.tier, "pool or disk")->check(CLI::IsMember({"pool", "disk"}));
  ls->add_option("-n,--namespace", c.ls.ns, "only this namespace");
  ls->add_option("--prefix", c.ls.prefix, "only keys starting with this");
  ls->add_option("--sort", c.ls.sort, "size, age or hits")
      ->check(CLI::IsMember({"size", "age", "hits"}));
  ls->add_option("--limit", c.ls.limit, "at most this many rows");
  ls->add_flag("--wide", c.ls.wide, "full keys (the default when stdout is not a terminal)");
  c.run.emplace_back(ls, [&c] { return ListCommand(c.g, c.ls); });

  auto* stats = app.add_subcommand("stats", "per-tier statistics");
  c.run.emplace_back(stats, [&c] { return StatsCommand(c.g); });

  auto* evict = app.add_subcommand("evict", "remove entries from every tier");
  evict->add_option("keys", c.evict.keys, "keys to remove");
  evict->add_flag("--all", c.evict.all, "remove every entry (of --namespace, when given)");
  evict->add_option("-n,--namespace", c.evict.ns,
                    "only this namespace (default: a KEY in whichever namespace holds it)");
  evict
      ->add_option("--older-than", c.evict.older_than,
                   "entries not accessed for this long (2h, 7d)")
      ->check(kDuration);
  evict
      ->add_option("--to-bytes", c.evict.to_bytes,
                   "evict least recently used until the store holds this")
      ->check(kSize);
  c.run.emplace_back(evict, [&c] { return EvictCommand(c.g, c.evict); });

  auto* import = app.add_subcommand("import", "load DIR/<mm_hash>/encoder_cache.safetensors");
  import
      ->add_option(
          "dir", c.dir_arg,
          "a directory vLLM's ECExampleConnector wrote (<mm_hash>/encoder_cache.safetensors)")
      ->required()
      ->check(CLI::ExistingDirectory);
  import->add_option("-n,--namespace", c.put.ns, "the namespace to load into")
      ->capture_default_str();
  c.run.emplace_back(import, [&c] { return ImportCommand(c.g, c.dir_arg, c.put.ns); });
  auto* exportc =
      app.add_subcommand("export", "write entries as DIR/<mm_hash>/encoder_cache.safetensors");
  exportc->add_option("dir", c.dir_arg, "where to write (made if absent)")->required();
  exportc->add_option("-n,--namespace", c.ls.ns, "only this namespace");
  c.run.emplace_back(exportc, [&c] { return ExportCommand(c.g, c.dir_arg, c.ls.ns); });
}

void AddStoreCommands(CLI::App& app, Commands& c) {
  auto local = [&](CLI::App* sub, std::function<int()> fn) {
    c.run.emplace_back(sub, std::move(fn));
    c.local_only.push_back(sub);
  };
  c.run.emplace_back(app.add_subcommand("verify", "check every entry's checksum"),
                     [&c] { return VerifyCommand(c.g); });
  c.run.emplace_back(app.add_subcommand("compact", "rewrite segments holding dead records"),
                     [&c] { return CompactCommand(c.g); });
  local(app.add_subcommand("repair", "rebuild the index from the segment files"),
        [&c] { return RepairCommand(c.g); });
  auto* serve = app.add_subcommand("serve", "run a store daemon serving clients over TCP");
  AddServeOptions(serve, c.serve);
  local(serve, [&c] { return ServeCommand(c.g, c.serve, c.reread); });
  auto* clusterc = app.add_subcommand("cluster", "a cluster's nodes (with --cluster)");
  clusterc->add_option("what", c.cluster_what, "status: the live nodes, their addresses")
      ->required()
      ->check(CLI::IsMember({"status"}));
  c.run.emplace_back(clusterc, [&c] { return ClusterStatusCommand(c.g); });
  auto* keys = app.add_subcommand(
      "events-keys", "make a CURVE key pair for the entry events: PREFIX.key and PREFIX.pub");
  keys->add_option("prefix", c.keys_prefix, "where: PREFIX.key (secret, mode 0600), PREFIX.pub")
      ->required();
  c.run.emplace_back(keys, [&c] { return EventsKeysCommand(c.keys_prefix); });
}

int Dispatch(Commands& c) {
  for (auto& [sub, fn] : c.run) {
    if (!sub->parsed()) continue;
    const bool local_only =
        std::find(c.local_only.begin(), c.local_only.end(), sub) != c.local_only.end();
    if (local_only && !c.g.server.empty())
      throw CliError(
          "InvalidArgument: " + sub->get_name() +
          " is not available with --server (remote: put, get, inspect, locate, ls, namespaces, "
          "stats, "
          "evict, import, export, verify, compact); run it with --dir on the "
          "server's host after stopping the server");
    return fn();
  }
  return 0;
}

// {"error": {"code": "NotFound", "message": "..."}} for --json readers: the status code
// where the message starts with one ("NotFound: no store in ..."), else "Error".
json ErrorJson(const std::string& msg) {
  using C = Status::Code;
  for (C c : {C::kNotFound, C::kCorruption, C::kIOError, C::kNoSpace, C::kBusy, C::kInvalidArgument,
              C::kUnavailable, C::kPermissionDenied}) {
    const char* code = Status::CodeName(c);  // every code the store has, by its own name
    std::string prefix = std::string(code) + ": ";
    if (msg.rfind(prefix, 0) == 0)
      return {{"error", {{"code", code}, {"message", msg.substr(prefix.size())}}}};
  }
  return {{"error", {{"code", "Error"}, {"message", msg}}}};
}

// What a parse error most likely meant: a misspelt command or option, said with the closest
// real one. "" where there is nothing to add to CLI11's own message.
std::string Misspelt(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> commands, options;
  CLI::App* in = &app;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) == 0) {
      std::string name = arg.substr(2, arg.find('=') - 2);
      const CLI::Option* opt = in->get_option_no_throw("--" + name);
      if (!opt && in != &app) opt = app.get_option_no_throw("--" + name);
      if (!opt) {
        for (const CLI::App* a : {&app, in})
          for (const CLI::Option* o : a->get_options())
            for (const auto& l : o->get_lnames()) options.push_back(l);
        std::string near = ClosestOf(name, options);
        return "unknown option '--" + name + "'" +
               (near.empty() ? "" : " (did you mean '--" + near + "'?)") + "; see " +
               (in == &app ? std::string("ec-store --help")
                           : "ec-store " + in->get_name() + " --help");
      }
      // A flag (expected 0) takes no value; an option takes the next word unless it has `=`.
      if (opt->get_expected_max() != 0 && arg.find('=') == std::string::npos) ++i;
      continue;
    }
    if (arg.rfind("-", 0) == 0 || in != &app) continue;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      commands.push_back(sub->get_name());
    if (std::find(commands.begin(), commands.end(), arg) != commands.end()) {
      in = app.get_subcommand(arg);
      continue;
    }
    std::string near = ClosestOf(arg, commands);
    return "unknown command '" + arg + "'" +
           (near.empty() ? "" : " (did you mean '" + near + "'?)") +
           "; see ec-store --help for the commands";
  }
  return "";
}

// A wrong command line: one `ec-store: error:` line on stderr naming what was wrong and the
// help to read, and the same as {"error": {"code": "Usage", ...}} on stdout under --json
// (which the failed parse may not have set). Exit 2.
int UsageError(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::string msg = Misspelt(app, argc, argv);
  bool json = false;
  for (int i = 1; i < argc; ++i) json |= std::string(argv[i]) == "--json";
  if (msg.empty()) {
    std::string command;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App* s) { return s->parsed(); }))
      command = sub->get_name();
    msg = e.what();
    for (char& ch : msg)
      if (ch == '\n') ch = ' ';
    msg = (command.empty() ? "" : command + ": ") + msg + "; see ec-store " +
          (command.empty() ? "" : command + " ") + "--help";
  }
  std::fprintf(stderr, "ec-store: error: %s\n", msg.c_str());
  if (json)
    std::cout << json::object({{"error", {{"code", "Usage"}, {"message", msg}}}}).dump()
              << std::endl;
  return 2;
}

// The whole command line's definition, on `app`, its values landing in `c`.
void Define(CLI::App& app, Commands& c, std::string* shell) {
  app.require_subcommand(1);
  app.fallthrough();  // global options after the subcommand too: `ec-store ls --json`
  app.set_version_flag("--version", std::string("ec-store ") + EC_STORE_VERSION);
  AddGlobals(app, c.g);
  AddEntryCommands(app, c);
  AddStoreCommands(app, c);
  auto* completion = app.add_subcommand("completion", "print a shell completion script");
  completion->add_option("shell", *shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  c.run.emplace_back(completion, [&app, shell] {
    std::fputs(CompletionScript(app, *shell).c_str(), stdout);
    return 0;
  });
  // A command's --help names the options every command takes, not only its own.
  std::string globals;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_lnames().empty()) continue;
    const std::string& name = o->get_lnames()[0];
    if (name != "help" && name != "version") globals += (globals.empty() ? "--" : ", --") + name;
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    sub->footer("Global options, before or after the command: " + globals +
                " (ec-store --help says what each does)");
}

// Parses the command line, then the environment and the config file beneath it. Throws
// CLI::ParseError.
void Parse(CLI::App& app, Commands& c, int argc, char** argv) {
  app.parse(argc, argv);
  std::vector<CLI::App*> sections;
  for (auto* sub : app.get_subcommands({})) sections.push_back(sub);
  const char* env_config = std::getenv("EC_STORE_CONFIG");
  ApplyEnvAndConfig(app, sections, !c.g.config.empty() ? c.g.config : env_config ? env_config : "");
  c.g.log_level_given = app.get_option("--log-level")->count() > 0;
}

const char* kAbout = "ec-store: inspect, fill and evict an encoder-cache store, or serve one";

}  // namespace

// Exit codes: 0 success, 1 the command failed, 2 the command line (or config) was wrong.
int Run(int argc, char** argv) {
  // Logs go to stderr: stdout carries results (and --json must stay parseable).
  spdlog::set_default_logger(spdlog::stderr_color_mt("ec-store"));
  spdlog::set_level(spdlog::level::warn);
  spdlog::set_pattern("ec-store: %l: %v");
  Commands c;
  CLI::App app{kAbout};
  std::string shell;
  Define(app, c, &shell);
  // `serve` reads its settings again at SIGHUP: the same command line, over the environment
  // and the config file as they are then.
  c.reread = [argc, argv]() -> Result<Settings> {
    Commands again;
    CLI::App app2{kAbout};
    std::string shell2;
    Define(app2, again, &shell2);
    try {
      Parse(app2, again, argc, argv);
    } catch (const CLI::ParseError& e) {
      return Status::InvalidArgument(e.what());
    }
    return Settings{again.g, again.serve};
  };
  try {
    Parse(app, c, argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return UsageError(app, e, argc, argv);
  }
  if (c.g.log_level_given) spdlog::set_level(spdlog::level::from_str(c.g.log_level));
  try {
    if (c.g.dry_run) {  // serve's own checks too: what it would refuse before opening anything
      if (app.get_subcommand("serve")->parsed())
        CheckServe(c.g, c.serve, !ClientToken(c.g).empty());  // the token file read too
      std::printf("ec-store: the command line parses; --dry-run: nothing was run\n");
      return 0;
    }
    return Dispatch(c);
  } catch (const std::exception& e) {
    std::string msg = WithFlagHints(e.what());
    std::fprintf(stderr, "ec-store: error: %s\n", msg.c_str());
    if (c.g.json) std::cout << ErrorJson(msg).dump(JsonIndent(c.g)) << std::endl;
    return 1;
  }
}

}  // namespace ecstore::cli
