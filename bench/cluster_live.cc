// `cluster` on a live cluster: three `serve`-like node processes (forked here, each a Store
// and a Server registered in an etcd started here), and
// - routed gets: ClusterCache::Get of 2.87 and 16.5 MB entries against their limit, the same
//   get from a plain client connected to the entry's owner, interleaved in one run;
// - routed puts: ClusterCache::Put (the owner's put and the key's other places cleared)
//   against the same put from a plain client of the owner;
// - failover: from a node's SIGKILL to the client's ring without it (its lease's TTL plus
//   the watch), and the first get that a SIGSTOPped owner costs (the call's deadline).
// Skipped, saying so, where etcd is not installed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/etcd_proc.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "cluster/cluster_cache.h"
#include "net/client.h"
#include "server/server.h"
#include "store/store.h"

namespace ecstore::bench {
namespace {

namespace fs = std::filesystem;
constexpr int kTtlSeconds = 2;  // etcd's least: failover is measured at its fastest

// A node: a Store and a Server in a child process, registered as `id` until killed.
[[noreturn]] void NodeMain(const std::string& uri, const std::string& id, const std::string& dir,
                           int port_pipe) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  Options o;
  o.pool_bytes = 512ull << 20;
  o.memory_backend = NewSharedHostBackend;
  auto store = Store::Open(dir, o);
  if (!store.ok()) _exit(3);
  net::ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.shm_socket = dir + "/serve.sock";
  auto server = net::Server::Start(store->get(), so);
  if (!server.ok()) _exit(4);
  std::string name;
  auto etcd = cluster::EtcdClient::Parse(uri, &name);
  if (!etcd.ok()) _exit(5);
  cluster::NodeInfo self;
  self.id = id;
  self.tcp = "127.0.0.1:" + std::to_string((*server)->port());
  self.capacity = o.pool_bytes;
  self.version = "bench";
  self.incarnation = 1;
  auto reg = cluster::Registration::Start(std::move(etcd).value(), name, self,
                                          std::chrono::seconds(kTtlSeconds));
  if (!reg.ok()) _exit(6);
  uint16_t port = (*server)->port();
  if (write(port_pipe, &port, sizeof(port)) != sizeof(port)) _exit(7);
  int sig;
  sigwait(&stop, &sig);
  _exit(0);
}

pid_t StartNode(const std::string& uri, const std::string& id, const std::string& dir) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    NodeMain(uri, id, dir, p[1]);
  }
  close(p[1]);
  uint16_t port = 0;
  const bool up = pid > 0 && read(p[0], &port, sizeof(port)) == sizeof(port);
  close(p[0]);
  if (!up && pid > 0) waitpid(pid, nullptr, 0);
  return up ? pid : -1;
}

template <typename Pred>
bool WaitFor(Pred pred, double seconds) {
  const auto start = Clock::now();
  while (Since(start) < seconds) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

void Stop(pid_t pid) { StopProcess(pid); }

// A plain client of the key's owner: the limit's way to it.
std::unique_ptr<net::Client> OwnerClient(cluster::ClusterCache& c, const std::string& key) {
  const std::string owner = c.Owners("bench", key, 1)[0];
  for (const auto& n : c.Nodes())
    if (n.id == owner) return Must(net::Client::Connect("tcp://" + n.tcp), "connect");
  Die(Status::NotFound(owner), "the owner among the nodes");
  return nullptr;
}

// 12 entries of `value` put through the cluster, with a plain client of each one's owner.
struct Entries {
  std::vector<std::string> names;
  std::vector<std::unique_ptr<net::Client>> direct;
};
Entries PutEntries(cluster::ClusterCache& c, const std::string& prefix, const TensorMeta& meta,
                   const std::vector<uint8_t>& value) {
  Entries e;
  for (size_t i = 0; i < 12; ++i) {
    e.names.push_back(prefix + "-" + std::to_string(i));
    Die(c.Put("bench", e.names.back(), meta, value), "put through the cluster");
    e.direct.push_back(OwnerClient(c, e.names.back()));
  }
  return e;
}

// call(i, routed) for each entry, routed and plain in turn, after a round of warm-up.
// Interleaved, each first in every other round: the second call on an entry finds some of
// it in the CPU's cache, and neither may have that edge alone.
void Interleave(size_t entries, int rounds, uint64_t bytes,
                const std::function<Status(size_t, bool, int)>& call, TimedReads* routed,
                TimedReads* plain) {
  for (int r = -1; r < rounds; ++r)
    for (size_t i = 0; i < entries; ++i)
      for (int k = 0; k < 2; ++k) {
        const bool route = (k == 0) == ((r + static_cast<int>(i)) % 2 == 0);
        auto t = Clock::now();
        Die(call(i, route, r * 2 + k), route ? "routed call" : "plain call");
        if (r >= 0) (route ? routed : plain)->Add(t, bytes);
      }
}

// Routed gets of `bytes`-sized entries against the same gets from the owner's own client.
void RoutedGets(const Config& cfg, cluster::ClusterCache& c, uint64_t bytes, const char* label) {
  std::vector<uint8_t> value(bytes, 0x5a), dst(bytes);
  const TensorMeta meta{DType::kBF16, {static_cast<int64_t>(bytes / 2)}};
  Entries e = PutEntries(c, label, meta, value);
  TimedReads routed, plain;
  Interleave(
      e.names.size(), cfg.quick ? 5 : 100, bytes,
      [&](size_t i, bool route, int) {
        return (route ? c.Get("bench", e.names[i], dst)
                      : e.direct[i]->Get("bench", e.names[i], dst))
            .status();
      },
      &routed, &plain);
  const std::string w = std::string("cluster_get_") + label;
  plain.Report(w.c_str(), "limit", "the same get from a client of the entry's owner");
  routed.Report(w.c_str(), "ec-store", "ClusterCache::Get: owner computed here, no lookup RPC");
}

// Routed puts against the same put from the owner's own client: what clearing the key's other
// places (its older copies, where a read looks) adds to a put.
void RoutedPuts(const Config& cfg, cluster::ClusterCache& c, uint64_t bytes, const char* label) {
  std::vector<uint8_t> value(bytes, 0x3c);
  const TensorMeta meta{DType::kBF16, {static_cast<int64_t>(bytes / 2)}};
  Entries e = PutEntries(c, std::string("put-") + label, meta, value);
  TimedReads routed, plain;
  Interleave(
      e.names.size(), cfg.quick ? 5 : 50, bytes,
      [&](size_t i, bool route, int n) {
        value[0] = static_cast<uint8_t>(n);  // a replacing put: new bytes each time
        return route ? c.Put("bench", e.names[i], meta, value)
                     : e.direct[i]->Put("bench", e.names[i], meta, value);
      },
      &routed, &plain);
  const std::string w = std::string("cluster_put_") + label;
  plain.Report(w.c_str(), "limit", "the same put from a client of the entry's owner");
  routed.Report(w.c_str(), "ec-store",
                "ClusterCache::Put: to the owner, and the key's 2 other places cleared");
}

}  // namespace

void ClusterLiveWorkload(const Config& cfg) {
  if (system("command -v etcd >/dev/null 2>&1") != 0) {
    std::printf("cluster (live): skipped, etcd is not installed (scripts/install-deps.sh)\n");
    return;
  }
  const std::string dir = cfg.dir + "-cluster";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const EtcdProcs etcd_procs = StartEtcdCluster(dir + "/etcd", 1);
  const pid_t etcd = etcd_procs.pids.empty() ? -1 : etcd_procs.pids[0];
  const std::string uri = etcd_procs.uri("bench");
  if (etcd < 0) Die(Status::Unavailable("etcd"), "start etcd");
  std::vector<pid_t> nodes;
  for (int i = 0; i < 3; ++i)
    nodes.push_back(StartNode(uri, "node-" + std::to_string(i), dir + "/n" + std::to_string(i)));
  cluster::ClusterOptions o;
  o.client.timeout = std::chrono::milliseconds(1000);
  o.client.retries = 0;
  auto c = Must(cluster::ClusterCache::Open(uri, o), "open the cluster");
  WaitFor([&] { return c->Nodes().size() == 3; }, 10);
  RoutedGets(cfg, *c, 350ull * 4096 * 2, "2.87MB");
  RoutedGets(cfg, *c, 2016ull * 4096 * 2, "16.5MB");
  RoutedPuts(cfg, *c, 350ull * 4096 * 2, "2.87MB");

  // Failover: a SIGSTOPped owner's first get (the deadline), then SIGKILL to the ring without it.
  Latencies hung, reroute;
  const int reps = cfg.quick ? 2 : 5;
  std::vector<uint8_t> dst(1 << 20);
  for (int r = 0; r < reps; ++r) {
    const std::string id = "node-" + std::to_string(r % 3);
    std::string key;
    for (int k = 0; key.empty(); ++k)
      if (c->Owners("bench", "f" + std::to_string(k), 1)[0] == id) key = "f" + std::to_string(k);
    const pid_t victim = nodes[r % 3];
    kill(victim, SIGSTOP);
    auto t = Clock::now();
    (void)c->Get("bench", key, dst);
    hung.Add(t);
    kill(victim, SIGCONT);  // back in the ring before it is killed: failover from a member
    WaitFor([&] { return c->Nodes().size() == 3; }, kTtlSeconds + 10);
    std::this_thread::sleep_for(std::chrono::milliseconds(o.down_for));
    Stop(victim);
    t = Clock::now();
    WaitFor([&] { return c->Nodes().size() == 2; }, kTtlSeconds + 10);
    reroute.Add(t);
    nodes[r % 3] = StartNode(uri, id, dir + "/n" + std::to_string(r % 3));
    WaitFor([&] { return c->Nodes().size() == 3; }, 10);
  }
  char note[200];
  std::snprintf(note, sizeof(note),
                "a SIGKILLed node out of the client's ring: lease TTL %d s + the watch (target "
                "<= TTL + 1 s)",
                kTtlSeconds);
  Add({"cluster_failover", "reroute after SIGKILL", 0, 0, reroute.P(0.5), reroute.P(0.99), -1,
       note});
  Add({"cluster_failover", "get from a SIGSTOPped owner", 0, 0, hung.P(0.5), hung.P(0.99), -1,
       "the call's deadline is 1 s (target <= 1.1 s); then the node is skipped"});
  c.reset();
  for (pid_t p : nodes) Stop(p);
  Stop(etcd);
  fs::remove_all(dir);
}

}  // namespace ecstore::bench
