// The `ec-store` commands on entries -- put, get, inspect, ls, stats, evict, import,
// export -- written once against ecstore::Cache, so each runs the same on a store directory
// (--dir) and through a server (--server).
// Thread rules: single-threaded; a Target owns the store or connection it opens.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cluster/cluster_cache.h"
#include "net/client.h"
#include "store/store.h"

namespace ecstore::cli {

struct Globals {
  std::string dir = "./.ec-store";
  bool json = false;
  bool pretty = false;                 // --json indented for humans; else one object per line
  std::string pool_size = "256MiB";    // the one default: CLI, Python open, the vLLM connector
  std::string device_pool_size = "0";  // the GPU tier: 0 = none
  int device = 0;
  std::string disk_quota = "16GiB";
  bool compress = false;
  bool group_access = false;
  std::string eviction_policy = "freq";  // Options::eviction_policy
  std::string server;                    // HOST:PORT of a running `ec-store serve`
  std::string cluster;                   // etcd://HOST:PORT[,...]/NAME: serve joins it
  size_t replicas = 1;                   // through a cluster: nodes a put goes to
  std::string timeout = "5s";            // a client's bound on one reply (not verify/compact)
  std::string token_file;  // the shared secret (serve: required of clients; else: presented)
  // TLS: serve's certificate and key, and the CA of client certificates; a client's CA to
  // trust, its own pair, and the server name to verify.
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  // etcd over TLS (etcds://) and etcd auth: its CA, this process's certificate and key, an
  // etcd user and a file holding its password.
  std::string etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file;
  std::string log_level = "warn";
  bool log_level_given = false;  // serve logs at info unless told
  std::string config;            // the config file read beneath the command line
  bool dry_run = false;          // the command line parses: say so and run nothing
};

// JSON output's indent: one object per line unless --pretty.
inline int JsonIndent(const Globals& g) { return g.pretty ? 2 : -1; }

// True when stdout (fd 1) or stderr (fd 2) is a terminal: tables shorten keys and progress
// is drawn only there.
bool IsTerminal(int fd);

// kInspect and kRepair open with the smallest pool (1 MiB) and no promotion: they read disk
// entries straight into their own buffers instead of mapping and pinning --pool-size of
// memory for a one-shot process. kServe backs the pool by a memfd same-host readers map.
enum class Use { kWrite, kInspect, kRepair, kServe };
std::unique_ptr<Store> OpenStore(const Globals& g, Use use);

// Where an entry command runs: a store opened here, or a server.
class Target {
 public:
  static Target Open(const Globals& g, Use use);
  Cache& cache() {
    if (store_) return *store_;
    if (cluster_) return *cluster_;
    return *client_;
  }
  Store* local() { return store_.get(); }
  net::Client* client() { return client_.get(); }
  cluster::ClusterCache* cluster() { return cluster_.get(); }
  std::string where() const;  // "" locally, " on HOST:PORT" through a server, " in cluster NAME"
  // Closes a local store (persisting what the command put); nothing to do remotely.
  void Close();

 private:
  std::unique_ptr<Store> store_;
  std::unique_ptr<net::Client> client_;
  std::unique_ptr<cluster::ClusterCache> cluster_;
  std::string server_;
};

struct PutArgs {
  std::string ns, key, file, dtype, shape;
};
struct ListArgs {
  std::string tier, ns, prefix, sort = "age";
  size_t limit = 0;
  bool wide = false;  // full keys even on a terminal
};
struct EvictArgs {
  std::vector<std::string> keys;
  bool all = false;
  std::string ns, older_than, to_bytes;
};

int PutCommand(const Globals& g, const PutArgs& a);
// `get` and `inspect` match KEY whole; with `prefix`, KEY is a prefix naming one key.
int GetCommand(const Globals& g, const std::string& ns, const std::string& key, bool prefix,
               const std::string& out);
int InspectCommand(const Globals& g, const std::string& ns, const std::string& key, bool prefix);
int ListCommand(const Globals& g, const ListArgs& a);
int NamespacesCommand(const Globals& g);
int StatsCommand(const Globals& g);
int EvictCommand(const Globals& g, const EvictArgs& a);
int ImportCommand(const Globals& g, const std::string& src_dir, const std::string& ns);
int ExportCommand(const Globals& g, const std::string& out_dir, const std::string& ns_filter);

}  // namespace ecstore::cli
