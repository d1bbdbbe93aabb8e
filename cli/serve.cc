#include "cli/serve.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "base/mutex.h"
#ifdef EC_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cli/cluster_commands.h"
#include "cli/flags.h"
#include "cli/json_log.h"
#include "cli/output.h"
#include "cli/reach.h"
#include "cli/serve_events.h"
#include "net/socket.h"
#include "net/tls.h"
#include "ops/http_endpoint.h"
#include "ops/prometheus.h"
#include "server/acl.h"
#include "server/server.h"

namespace ecstore::cli {
namespace {

namespace fs = std::filesystem;

using std::chrono::milliseconds;

milliseconds Millis(const std::string& text) {
  return milliseconds(Check(ParseDuration(text)) / 1000);
}

#ifndef EC_HAVE_SYSTEMD
// sd_notify(3)'s protocol where libsystemd is not linked (the wheel: it would bring libgcrypt,
// lzma, zstd and libcap along): the state as one datagram to the unix socket NOTIFY_SOCKET
// names, "@" standing for the abstract namespace. 1 sent, 0 not under such a unit, or -errno.
int NotifyDatagram(const char* state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || !*path) return 0;  // not under a Type=notify unit
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const size_t len = std::strlen(path);
  if (len >= sizeof(sa.sun_path) || (path[0] != '/' && path[0] != '@')) return -EINVAL;
  std::memcpy(sa.sun_path, path, len);
  if (path[0] == '@') sa.sun_path[0] = '\0';
  UniqueFd fd(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return -errno;
  const socklen_t sa_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  if (sendto(fd.get(), state, std::strlen(state), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&sa),
             sa_len) < 0)
    return -errno;
  return 1;
}
#endif

// Tells systemd (Type=notify units: NOTIFY_SOCKET is set) what the daemon is doing; outside
// such a unit, nothing.
void Notify(const std::string& state) {
#ifdef EC_HAVE_SYSTEMD
  int rc = sd_notify(0, state.c_str());
#else
  int rc = NotifyDatagram(state.c_str());
#endif
  if (rc < 0) spdlog::warn("telling systemd '{}' failed: {}", state, std::strerror(-rc));
}

// The token, the ACL and the TLS pair read again; what did load, said as ", token, ACL
// reloaded" (empty where none did). What did not is logged with why, and the old one stays.
std::string ReloadProofs(const Globals& g, const ServeArgs& a, net::Server* server) {
  std::string done;
  try {
    server->SetToken(ClientToken(g));
    done += ", token";
  } catch (const std::exception& e) {
    spdlog::error("SIGHUP: the token was not reloaded: {}", e.what());
  }
  if (Status st = server->gate().ReloadAcl(); !st.ok())
    spdlog::error("SIGHUP: the ACL was not reloaded, the old one stays: {}", st.message());
  else if (!a.acl_file.empty())
    done += ", ACL";
  if (Status st = server->gate().ReloadTls(); !st.ok())
    spdlog::error("SIGHUP: the TLS certificate was not reloaded, the old pair stays: {}",
                  st.message());
  else if (!g.tls_cert.empty())
    done += ", TLS pair";
  return done.empty() ? "" : done + " reloaded";
}

// Takes the settings as they read now: the log level, the slow-request threshold and the
// token apply at once; a change to anything else is logged as needing a restart.
void Reload(const std::function<Result<Settings>()>& reread, net::Server* server, Settings* now) {
  auto next = reread ? reread() : Result<Settings>(Status::Unavailable("nothing to read"));
  if (!next.ok()) {
    spdlog::error("SIGHUP: settings not reloaded, they do not parse: {}", next.status().ToString());
    return;
  }
  const Globals& g = next->g;
  const ServeArgs& a = next->serve;
  spdlog::set_level(g.log_level_given ? spdlog::level::from_str(g.log_level) : spdlog::level::info);
  auto slow = ParseDuration(a.slow_request);
  if (slow.ok()) server->SetSlowRequest(milliseconds(*slow / 1000));
  const std::string reloaded = ReloadProofs(g, a, server);
  std::vector<std::string> fixed;
  auto same = [&](const char* flag, const auto& was, const auto& is) {
    if (!(was == is)) fixed.push_back(flag);
  };
  const Globals& w = now->g;
  const ServeArgs& v = now->serve;
  same("--dir", w.dir, g.dir);
  same("--pool-size", w.pool_size, g.pool_size);
  same("--device-pool-size", w.device_pool_size, g.device_pool_size);
  same("--disk-quota", w.disk_quota, g.disk_quota);
  same("--compress", w.compress, g.compress);
  same("--eviction-policy", w.eviction_policy, g.eviction_policy);
  same("--group-access", w.group_access, g.group_access);
  same("--listen", v.listen, a.listen);
  same("--rdma-listen", v.rdma_listen, a.rdma_listen);
  same("--metrics-listen", v.metrics_listen, a.metrics_listen);
  same("--lease-ttl", v.lease_ttl, a.lease_ttl);
  same("--idle-timeout", v.idle_timeout, a.idle_timeout);
  same("--io-timeout", v.io_timeout, a.io_timeout);
  same("--log-summary", v.log_summary, a.log_summary);
  same("--arena-budget", v.arena_budget, a.arena_budget);
  same("--max-connections", v.max_connections, a.max_connections);
  same("--workers", v.workers, a.workers);
  same("--copy-threads", v.copy_threads, a.copy_threads);
  same("--check-put-pieces", v.check_put_pieces, a.check_put_pieces);
  same("--tls-cert", w.tls_cert, g.tls_cert);  // the files' contents reload; their names do not
  same("--tls-key", w.tls_key, g.tls_key);
  same("--tls-ca", w.tls_ca, g.tls_ca);
  same("--tls-auth-clients", v.tls_auth_clients, a.tls_auth_clients);
  same("--acl-file", v.acl_file, a.acl_file);
  same("--metrics-token-file", v.metrics_token_file, a.metrics_token_file);
  std::string list;
  for (const auto& f : fixed) list += (list.empty() ? "" : ", ") + f;
  spdlog::info("SIGHUP: log level {}, slow requests over {}{}",
               spdlog::level::to_string_view(spdlog::get_level()), a.slow_request, reloaded);
  if (!list.empty()) spdlog::warn("SIGHUP: {} changed but take effect only at a restart", list);
  *now = std::move(next).value();
}

// What the daemon is doing, for /readyz and /healthz. The store and server are set once
// they are up and cleared before they go.
class Lifecycle {
 public:
  void Up(Store* store, net::Server* server, const events::EventPublisher* events) {
    MutexLock l(&mu_);
    store_ = store;
    server_ = server;
    events_ = events;
    phase_ = "serving";
  }
  void Phase(const char* phase) {
    MutexLock l(&mu_);
    phase_ = phase;
    if (std::string(phase) != "serving")
      store_ = nullptr, server_ = nullptr, events_ = nullptr, member_ = nullptr;
  }
  // A cluster member's place in its cluster is on /metrics from now until it stops.
  void Joined(const ClusterMembership* member) {
    MutexLock l(&mu_);
    member_ = member;
  }
  // Ready: serving, and healthy (a store that cannot persist should get no new traffic).
  Status Ready() {
    MutexLock l(&mu_);
    if (!server_) return Status::Unavailable(std::string("not serving: ") + phase_);
    return store_->Health();
  }
  // Alive: starting (recovering) counts as healthy; serving asks the store.
  Status Health() {
    MutexLock l(&mu_);
    return store_ ? store_->Health() : Status::Ok();
  }
  std::string Metrics() {
    MutexLock l(&mu_);
    if (!store_ || !server_) return "# ec-store is " + phase_ + "\n";
    auto stats = store_->Stats();
    if (!stats.ok()) return "# stats unavailable: " + stats.status().ToString() + "\n";
    const auto n = server_->connection_counts();
    ops::ServerState st{server_->connections(),
                        server_->client_leases(),
                        n.waiting,
                        n.busy,
                        n.sending,
                        n.ungreeted,
                        n.workers,
                        n.workers_busy,
                        n.tick_lag_seconds,
                        server_->uptime_seconds(),
                        server_->prefetches(),
                        {},
                        0,
                        {}};
    if (events_) st.events = {true, events_->batches(), events_->events(), events_->replays()};
    if (member_) st.cluster = member_->Counts();
    if (auto tls = server_->gate().tls_context())
      st.tls_not_after = static_cast<double>(tls->not_after_unix());
    return ops::RenderPrometheus(*stats, server_->metrics().Snapshot(), st);
  }
  // One line every `every`: what moved since the last one.
  void Summaries(milliseconds every, const std::atomic<bool>& stop) {
    uint64_t last_requests = 0, last_errors = 0;
    auto last = std::chrono::steady_clock::now();
    UniqueLock l(&mu_);
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + every;
      while (!stop.load() && cv_.WaitUntil(l, until)) {
      }
      if (stop.load()) break;
      if (!store_ || !server_) continue;
      auto s = store_->Stats();
      if (!s.ok()) continue;
      auto m = server_->metrics().Snapshot();
      auto now = std::chrono::steady_clock::now();
      double secs = std::chrono::duration<double>(now - last).count();
      spdlog::info(
          "summary: {:.1f} req/s ({} errors), pool {} entries {}/{}, disk {} entries {}/{}, "
          "hits pool {} disk {}, misses {}, {} connections, {} leases",
          static_cast<double>(m.requests_total - last_requests) / secs,
          m.errors_total - last_errors, s->pool().entries, HumanBytes(s->pool().used),
          HumanBytes(s->pool().capacity), s->disk().entries, HumanBytes(s->disk().used),
          HumanBytes(s->disk().capacity), s->pool().hits, s->disk().hits, s->misses,
          server_->connections(), s->leases);
      last_requests = m.requests_total, last_errors = m.errors_total, last = now;
    }
  }
  void Wake() {
    { MutexLock l(&mu_); }  // a summary thread between its check and its wait
    cv_.NotifyAll();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::string phase_ GUARDED_BY(mu_) = "starting: recovering the store";
  Store* store_ GUARDED_BY(mu_) = nullptr;
  net::Server* server_ GUARDED_BY(mu_) = nullptr;
  const events::EventPublisher* events_ GUARDED_BY(mu_) = nullptr;
  const ClusterMembership* member_ GUARDED_BY(mu_) = nullptr;
};

// The bracketed choice of a /sys/kernel/mm/transparent_hugepage file ("never", "advise"...).
std::string ThpSetting(const char* file) {
  std::ifstream in(std::string("/sys/kernel/mm/transparent_hugepage/") + file);
  std::string line;
  std::getline(in, line);
  const size_t a = line.find('['), b = line.find(']');
  return a < b && b != std::string::npos ? line.substr(a + 1, b - a - 1) : "unknown";
}

void LogStartup(const Store& store, const StoreStats& s, double open_secs) {
  spdlog::info("pool {} ({}, {}, faulted in at open{}), disk quota {}, device tier {}",
               HumanBytes(s.pool().capacity), s.pool_locked ? "pinned" : "NOT pinned", PoolPages(s),
               s.pool_prefault_threads
                   ? fmt::format(" in {:.2f} s by {} thread(s)", s.pool_prefault_seconds,
                                 s.pool_prefault_threads)
                   : "",
               HumanBytes(s.disk().capacity),
               store.device_region().base ? HumanBytes(store.device_region().size) : "none");
  if (PoolPages(s) != "huge pages")  // the daemon's pool is a memfd: shared memory
    spdlog::info(
        "the pool's pages are not all huge ones (the kernel did not collapse them: Linux "
        "6.1+ does, unless shmem_enabled is 'deny'; or the pool is not a whole number of "
        "2 MiB pages), and disk reads into 4 KiB pages run slower: reserve huge pages for it "
        "(vm.nr_hugepages: the pool's size / 2 MiB), or let shared memory have transparent "
        "ones (/sys/kernel/mm/transparent_hugepage/shmem_enabled, '{}' here; 'advise' grants "
        "them to the pool, which asks for them)",
        ThpSetting("shmem_enabled"));
  spdlog::info(
      "recovered {} entries ({}) from {} segment(s) in {:.3f} s{}", s.disk().entries,
      HumanBytes(s.disk().bytes), s.segments, open_secs,
      s.corrupt_dropped ? fmt::format(", {} corrupt records dropped", s.corrupt_dropped) : "");
}

// The operator endpoint, up first: /healthz and /readyz answer during recovery. Its degraded
// line says when the node is not in its cluster's ring as itself.
std::unique_ptr<ops::HttpEndpoint> StartHttp(const Globals& g, const ServeArgs& a, Lifecycle& life,
                                             std::atomic<cluster::Registration*>& registered) {
  if (a.metrics_listen.empty()) return nullptr;
  ops::HttpSecurity security{g.tls_cert, g.tls_key, ""};
  if (!a.metrics_token_file.empty()) {
    Globals token_only;
    token_only.token_file = a.metrics_token_file;
    security.metrics_token = ClientToken(token_only);
  }
  auto http = Check(ops::HttpEndpoint::Start(
      a.metrics_listen,
      {[&] { return life.Metrics(); }, [&] { return life.Health(); }, [&] { return life.Ready(); },
       [&]() -> std::string {
         cluster::Registration* r = registered.load();
         return r && !r->registered()
                    ? "not registered in its cluster (etcd unreachable, or its id held by "
                      "another node): serving, registering again"
                    : "";
       }},
      security));
  spdlog::info("metrics on {}://{}:{}/metrics{} (and /healthz, /readyz)",
               http->https() ? "https" : "http",
               a.metrics_listen.substr(0, a.metrics_listen.rfind(':')), http->port(),
               security.metrics_token.empty() ? "" : " (bearer token required)");
  return http;
}

// Each connection holds its socket (a same-host one also its put arena's memfd, and those
// arenas are few: each is 64 MiB or more, within --max-arena-bytes); the store, the
// listeners and the arenas get 512 more. The soft limit is raised to what --max-connections
// needs (up to the hard limit), and where even that is short, said at start with the
// remedy -- not found out at the 10,000th client as a refusal.
void FitOpenFilesLimit(size_t max_connections) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const rlim_t need = static_cast<rlim_t>(max_connections) + 512;
  if (lim.rlim_cur >= need) return;
  const rlim_t was = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max == RLIM_INFINITY ? need : std::min(need, lim.rlim_max);
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) lim.rlim_cur = was;
  if (lim.rlim_cur >= need) {
    spdlog::info("open-files limit raised from {} to {} for --max-connections {}", was,
                 lim.rlim_cur, max_connections);
    return;
  }
  spdlog::warn(
      "the open-files limit is {} (hard {}): about {} clients can connect, not the "
      "--max-connections {}; raise it (LimitNOFILE={} in the unit, or `ulimit -n {}`)",
      lim.rlim_cur, lim.rlim_max, lim.rlim_cur > 512 ? lim.rlim_cur - 512 : 0, max_connections,
      need, need);
}

// The daemon's server options from the command line.
net::ServerOptions ServerOptionsOf(const Globals& g, const ServeArgs& a, const std::string& token) {
  net::ServerOptions so;
  so.listen = a.listen;
  so.token = token;
  so.group_access = g.group_access;
  so.rdma_listen = a.rdma_listen;
  so.lease_ttl = Millis(a.lease_ttl);
  so.idle_timeout = Millis(a.idle_timeout);
  so.io_timeout = Millis(a.io_timeout);
  so.slow_request = Millis(a.slow_request);
  so.max_connections = a.max_connections;
  so.workers = a.workers;
  so.max_arena_bytes = Check(ParseSize(a.arena_budget));
  so.copy_threads = a.copy_threads;
  so.check_put_pieces = a.check_put_pieces;
  so.acl_file = a.acl_file;
  if (!g.tls_cert.empty() || !g.tls_key.empty()) {
    so.tls.emplace();
    so.tls->cert = g.tls_cert;
    so.tls->key = g.tls_key;
    so.tls->ca = g.tls_ca;
    if (!a.tls_auth_clients.empty())
      so.tls->client_auth = Check(net::ParseClientAuth(a.tls_auth_clients));
  } else if (!a.tls_auth_clients.empty()) {
    throw CliError("InvalidArgument: --tls-auth-clients needs TLS: give --tls-cert and --tls-key");
  }
  // Same-host readers map the pool through this socket (its permissions gate them).
  so.shm_socket = fs::absolute(g.dir + "/serve.sock").string();
  return so;
}

// The stop signals blocked before any thread starts, so only sigwait sees them; the log's
// format and level.
sigset_t BlockStopSignalsAndSetUpLogs(const Globals& g, const ServeArgs& a) {
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGINT, SIGTERM, SIGQUIT, SIGHUP}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  if (a.log_format == "json")
    spdlog::set_formatter(JsonLogFormatter());
  else
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ec-store] [%l] %v");
  if (!g.log_level_given) spdlog::set_level(spdlog::level::info);
  return stop;
}

void AnnounceServing(const Globals& g, const ServeArgs& a, const net::Server& server,
                     const ops::HttpEndpoint* http) {
  Notify("READY=1\nSTATUS=serving " + g.dir);
  spdlog::info(
      "{} workers serve up to {} connections; same-host puts are copied out of their put "
      "arenas by {} thread(s) each; TCP puts' pieces are checksummed {}",
      server.workers(), a.max_connections, server.put_copy_threads(),
      server.checks_put_pieces_behind() ? "on a helper thread per worker" : "as they land");
  std::printf(
      "serving %s on %s (port %u, transport %s)%s; SIGINT/SIGTERM to stop, SIGHUP to "
      "persist the pool and reload the token, ACL, TLS pair, log level and slow-request "
      "threshold\n",
      g.dir.c_str(), a.listen.c_str(), server.port(), server.transport(),
      http ? (", metrics port " + std::to_string(http->port())).c_str() : "");
  std::fflush(stdout);
}

// Clients route elsewhere before the connections close; the guard stops before the store.
// A full disk at the stop costs the entries only the pool held (never acknowledged as
// durable: what was on disk stays, and the index catches up at the next open). That is a
// cache losing what it could not keep, not a failed stop: the restart must not be refused.
int StopServing(ClusterMembership* member, net::Server* server, Store* store,
                ops::HttpEndpoint* http) {
  member->Leave([server] { server->Stop(); });
  Status closed = store->Close();
  if (http) http->Stop();
  if (closed.IsNoSpace()) {
    spdlog::error("stopped; entries held only in the pool were not persisted: {}",
                  closed.ToString());
    return 0;
  }
  Check(closed);
  spdlog::info("stopped cleanly");
  return 0;
}

}  // namespace

void CheckServe(const Globals& g, const ServeArgs& a, bool has_token) {
  const net::ServerOptions so = ServerOptionsOf(g, a, "");
  Millis(a.log_summary);
  auto hp = Check(net::ParseHostPort(a.listen));
  const bool certs_required =
      so.tls && !so.tls->ca.empty() && so.tls->client_auth == net::ClientAuth::kRequired;
  if (!has_token && a.acl_file.empty() && !certs_required && !net::IsLoopback(hp.host))
    throw CliError("InvalidArgument: listening on " + hp.host +
                   " (not a loopback address) needs clients that prove who they are: give "
                   "--token-file FILE (or set EC_STORE_TOKEN), --acl-file FILE, or --tls-cert, "
                   "--tls-key and --tls-ca (client certificates required)");
  // The files the server loads at start, each refused with what is wrong in it.
  if (!a.acl_file.empty()) Check(net::Acl::Load(a.acl_file).status());
  if (so.tls) Check(net::TlsContext::ForServer(*so.tls).status());
  CheckEvents(g, a);
}

int ServeCommand(const Globals& g, const ServeArgs& a,
                 const std::function<Result<Settings>()>& reread) {
  const std::string token = ClientToken(g);
  // Refused before a long recovery, not after it (Server::Start decides again on the
  // address it binds).
  CheckServe(g, a, !token.empty());
  net::ServerOptions so = ServerOptionsOf(g, a, token);
  const milliseconds summary = Millis(a.log_summary);
  auto hp = Check(net::ParseHostPort(a.listen));
  sigset_t stop = BlockStopSignalsAndSetUpLogs(g, a);
  FitOpenFilesLimit(a.max_connections);
  Lifecycle life;
  // In a cluster: a member once it serves; it leaves first when it stops.
  ClusterMembership member;
  std::atomic<cluster::Registration*> registered{nullptr};  // for /healthz's thread
  std::unique_ptr<ops::HttpEndpoint> http = StartHttp(g, a, life, registered);
  spdlog::info("ec-store {} opening {}", EC_STORE_VERSION, g.dir);
  auto t0 = std::chrono::steady_clock::now();
  auto store = OpenStore(g, Use::kServe);
  LogStartup(*store, Check(store->Stats()),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  // Before it serves: a node back from outside the ring drops what may be out of date.
  std::optional<ClusterJoin> join;
  if (!g.cluster.empty()) {
    join = PrepareJoin(g, a, store.get());
    so.fence = [f = join->fence](int64_t view) { return f->Check(view); };
    so.unfenced_namespace = kAdvertiseCheckNs;
  }
  Events events;
  StartEvents(g, a, join, store.get(), &events);
  auto server = Check(net::Server::Start(store.get(), so));
  events.Serving(server.get());
  struct Unserve {  // before the server goes: a subscriber's check never reaches a dead one
    Events* e;
    ~Unserve() { e->Serving(nullptr); }
  } unserve{&events};
  life.Up(store.get(), server.get(), events.pub.get());
  if (join) {
    member = JoinCluster(g, a, *join, hp.host, server->port(), store.get());
    registered = member.registration.get();
    life.Joined(&member);
  }
  AnnounceServing(g, a, *server, http.get());
  std::atomic<bool> stopping{false};
  std::thread summaries;
  if (summary.count() > 0) summaries = std::thread([&] { life.Summaries(summary, stopping); });
  int sig = 0;
  // SIGHUP (`systemctl reload`, a closed terminal, an operator's "sync now") persists the
  // pool, takes what may change while serving, and keeps serving.
  Settings now{g, a};
  while (sigwait(&stop, &sig) == 0 && sig == SIGHUP) {
    Status st = store->Flush();
    if (st.ok())
      spdlog::info("SIGHUP: the pool is persisted; still serving");
    else
      spdlog::error("SIGHUP: persisting the pool failed: {}", st.ToString());
    Reload(reread, server.get(), &now);
  }
  spdlog::info("signal {}: stopping, persisting the pool", sig);
  Notify("STOPPING=1\nSTATUS=stopping: persisting the pool");
  life.Phase("stopping");
  stopping = true;
  life.Wake();
  if (summaries.joinable()) summaries.join();
  return StopServing(&member, server.get(), store.get(), http.get());
}

}  // namespace ecstore::cli
