// `serve`'s options: what the daemon binds, who it trusts, its bounds and its threads.
#include <CLI/CLI.hpp>

#include "cli/flags.h"
#include "cli/serve.h"
#include "cli/validators.h"

namespace ecstore::cli {
namespace {

// serve's options for a node of --cluster.
// The entry events stream (docs/events.md).
void EventsOptions(CLI::App* serve, ServeArgs& a) {
  serve->add_option("--events", a.events,
                    "publish where entries are (stored, removed, cleared) on this ZMQ endpoint, "
                    "e.g. tcp://127.0.0.1:5557 (docs/events.md); off when not given");
  serve->add_option("--events-replay", a.events_replay,
                    "answer replay and snapshot requests on this ZMQ endpoint (with --events)");
  serve->add_option("--events-key", a.events_key,
                    "CURVE on the event sockets: a file holding this node's secret key "
                    "(`ec-store events-keys PREFIX` makes one); subscribers are the ACL's "
                    "curve= proofs with the events right. Needed with TLS, an ACL, or an "
                    "endpoint that is not loopback");
  serve
      ->add_option("--events-heartbeat", a.events_heartbeat,
                   "publish an empty batch where nothing was published for this long, so "
                   "subscribers see a lost batch or a restart without traffic (0: never)")
      ->check(kDuration)
      ->capture_default_str();
  serve
      ->add_option("--events-interval", a.events_interval,
                   "send event batches at most this often: longer costs the publisher fewer "
                   "wake-ups, and routers that much more lag")
      ->capture_default_str();
}

void ClusterOptions(CLI::App* serve, ServeArgs& a) {
  serve->add_option("--node-id", a.node_id,
                    "this node's id in --cluster (default: kept in the store directory)");
  serve->add_option("--advertise", a.advertise,
                    "HOST:PORT other hosts' clients reach this node at (default: --listen)");
  serve
      ->add_option("--cluster-ttl", a.cluster_ttl,
                   "the etcd lease of this node's membership: a dead node leaves after it")
      ->check(kDuration)
      ->capture_default_str();
  serve
      ->add_option("--cluster-keep", a.cluster_keep,
                   "how many of a key's places (replicas first) hold or are cleared of it: "
                   "clients' --replicas at most this, and every node of a cluster alike")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
}

// Who may use the daemon: client certificates and the ACL (docs/security.md); its own
// certificate and CA are the global --tls-* options.
void TrustOptions(CLI::App* serve, ServeArgs& a) {
  serve
      ->add_option("--tls-auth-clients", a.tls_auth_clients,
                   "with --tls-ca: required (default), optional or no client certificates")
      ->check(CLI::IsMember({"required", "optional", "no"}));
  serve->add_option("--metrics-token-file", a.metrics_token_file,
                    "file holding a bearer token /metrics requires (Authorization: Bearer ...)");
  serve->add_option("--acl-file", a.acl_file,
                    "principals and their rights per namespace (docs/security.md); reloaded at "
                    "SIGHUP");
}

}  // namespace

void AddServeOptions(CLI::App* serve, ServeArgs& a) {
  serve->add_option("--listen", a.listen, "HOST:PORT to bind")->capture_default_str();
  serve->add_option("--rdma-listen", a.rdma_listen,
                    "IP:PORT of an RDMA (RoCE/IB) port to serve gets over verbs");
  TrustOptions(serve, a);
  serve->add_option("--metrics-listen", a.metrics_listen,
                    "HOST:PORT of the HTTP operator port: /metrics, /healthz, /readyz");
  // A zero bound would fail every frame, a zero lease end every read at once: refused.
  const auto positive_duration = [](const std::string& v) -> std::string {
    auto d = ParseDuration(v);
    if (!d.ok()) return d.status().message();
    return *d >= 1000 ? "" : "must be at least 1ms (e.g. 30s)";
  };
  serve->add_option("--lease-ttl", a.lease_ttl, "a client lease not released within this ends")
      ->check(CLI::Validator(positive_duration, "DURATION>0"))
      ->capture_default_str();
  serve
      ->add_option("--idle-timeout", a.idle_timeout,
                   "close connections idle this long, holding no lease (0 = never)")
      ->check(kDuration)
      ->capture_default_str();
  // A frame's bound below a scheduler's hiccup on a busy host refuses every client.
  const auto io_bound = [](const std::string& v) -> std::string {
    auto d = ParseDuration(v);
    if (!d.ok()) return d.status().message();
    return *d >= 100'000 ? "" : "must be at least 100ms (e.g. 30s): below it clients are refused";
  };
  serve->add_option("--io-timeout", a.io_timeout, "bound on sending or receiving one frame")
      ->check(CLI::Validator(io_bound, "DURATION>=100ms"))
      ->capture_default_str();
  ClusterOptions(serve, a);
  EventsOptions(serve, a);
  serve->add_option("--log-format", a.log_format, "text, or json: one object per log line")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  serve->add_option("--slow-request", a.slow_request, "log requests slower than this (0 = off)")
      ->check(kDuration)
      ->capture_default_str();
  serve->add_option("--log-summary", a.log_summary, "log a one-line summary this often (0 = off)")
      ->check(kDuration)
      ->capture_default_str();
  serve
      ->add_option("--arena-budget", a.arena_budget,
                   "same-host clients' put arenas together at most this size (0 = the pool's "
                   "size, at least 256MiB); past it their puts go through the socket")
      ->check(kSize)
      ->capture_default_str();
  serve
      ->add_option("--max-connections", a.max_connections,
                   "refuse clients beyond this many (a waiting one costs a descriptor and a "
                   "few KiB, no thread)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  serve
      ->add_option("--workers", a.workers,
                   "threads that serve requests, whatever the number of connections (0 = twice "
                   "the cores, 8 to 64)")
      ->check(CLI::Range(0u, 1024u))
      ->capture_default_str();
  serve
      ->add_option("--copy-threads", a.copy_threads,
                   "threads besides the worker's own that split each same-host put's copy "
                   "into the pool (-1 = half the cores less one, at most 7)")
      ->check(CLI::Range(-1, 64))
      ->capture_default_str();
  serve
      ->add_option("--check-put-pieces", a.check_put_pieces,
                   "checksum a TCP put's pieces on a helper thread per worker while the "
                   "next is received (1 yes, 0 no, -1 = where there are 4 or more cores)")
      ->check(CLI::Range(-1, 1))
      ->capture_default_str();
}

}  // namespace ecstore::cli
