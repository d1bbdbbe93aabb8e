// `ec-store serve`: the daemon -- a Store served over TCP, shared memory and RDMA, with its
// operator port (/metrics, /healthz, /readyz), start-up and periodic summary logs, and the
// signals operators send (SIGHUP persists, SIGINT/SIGTERM stop after persisting).
// Thread rules: runs on the main thread; it owns the store, server and endpoint it starts,
// and one summary thread.
#pragma once

#include <functional>
#include <string>

#include "cli/entry_commands.h"

namespace CLI {
class App;
}

namespace ecstore::cli {

struct ServeArgs {
  std::string listen = "127.0.0.1:7070", rdma_listen, metrics_listen;
  std::string lease_ttl = "30s", idle_timeout = "10m", io_timeout = "30s";
  std::string slow_request = "250ms", log_summary = "60s";
  std::string log_format = "text";  // or "json": one object per line
  std::string node_id, advertise;   // in the cluster (--cluster): this node's id and address
  std::string cluster_ttl = "10s";  // its etcd lease
  size_t cluster_keep = 3;          // how deep in a key's places it keeps the key
  std::string arena_budget = "0";
  size_t max_connections = 16384;
  unsigned workers = 0;  // 0: twice the cores, 8 to 64
  int copy_threads = -1;
  int check_put_pieces = -1;
  std::string tls_auth_clients;  // with a CA: required (the default), optional, no
  std::string acl_file;
  std::string metrics_token_file;       // /metrics asks for this bearer token
  std::string events, events_replay;    // the entry events' PUB and ROUTER endpoints
  std::string events_interval = "2ms";  // batches are sent at most this often
  std::string events_key;               // a file holding the events' CURVE secret key
  std::string events_heartbeat = "1s";  // an empty batch where nothing else went for this long
};

// What `serve` was started with; read again at SIGHUP.
struct Settings {
  Globals g;
  ServeArgs serve;
};

// `reread` gives the settings as the command line, environment and config file say now: at
// SIGHUP the log level, the slow-request threshold and the token take effect, and any other
// change is logged as needing a restart.
// What serve checks before it opens anything: its addresses and durations, that a
// non-loopback --listen has a way for clients to prove themselves (`has_token`: a token given
// by file or environment), and the event stream's rules. CliError says what to give.
void CheckServe(const Globals& g, const ServeArgs& a, bool has_token);
int ServeCommand(const Globals& g, const ServeArgs& a,
                 const std::function<Result<Settings>()>& reread);
// `serve`'s options, into `a` (cli/serve_flags.cc).
void AddServeOptions(CLI::App* serve, ServeArgs& a);

}  // namespace ecstore::cli
