// The `conns` workload: one client's gets from a daemon that holds 10, 1,000 and 10,000 idle
// connections (as a fleet's engines each hold one to every node), the daemon's memory and
// threads at each. Its limit: the same gets from the same daemon with 10 idle connections.
// The daemon runs in a child process, so that each side's descriptors count against its
// own open-files limit.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "bench/results.h"
#include "bench/workloads.h"
#include "net/client.h"
#include "server/server.h"

namespace ecstore::bench {
namespace {

uint64_t ProcField(pid_t pid, const std::string& field) {  // VmRSS in KiB, Threads
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  return 0;
}

// The daemon: a store and a server in a child; its port comes back on a pipe, and it stops
// when the parent closes the other.
struct ChildDaemon {
  pid_t pid = -1;
  uint16_t port = 0;
  int stop_fd = -1;
  explicit ChildDaemon(const std::string& dir) {
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) Die(Status::FromErrno(errno, "pipe"), "conns");
    pid = fork();
    if (pid == 0) {
      close(up[0]);
      close(down[1]);
      Options o;
      o.pool_bytes = 256ull << 20;
      auto store = Store::Open(dir, o);
      if (!store.ok()) _exit(3);
      net::ServerOptions so;
      so.listen = "127.0.0.1:0";
      auto server = net::Server::Start(store->get(), so);
      if (!server.ok()) _exit(4);
      uint16_t p = (*server)->port();
      if (write(up[1], &p, sizeof p) != sizeof p) _exit(5);
      char c;
      while (read(down[0], &c, 1) > 0) {
      }
      (*server)->Stop();
      _exit(0);
    }
    close(up[1]);
    close(down[0]);
    stop_fd = down[1];
    if (read(up[0], &port, sizeof port) != sizeof port) Die(Status::IOError("no port"), "conns");
    close(up[0]);
  }
  ~ChildDaemon() {
    close(stop_fd);
    int st;
    waitpid(pid, &st, 0);
  }
};

// A connection that says HELLO and then waits, as an engine's between its requests.
UniqueFd IdleConnection(uint16_t port) {
  auto fd = net::ConnectTcp({"127.0.0.1", port}, std::chrono::milliseconds(5000));
  if (!fd.ok()) Die(fd.status(), "conns connect");
  net::BodyWriter w;
  w.Str("");
  uint8_t h[net::kHeaderBytes];
  net::EncodeHeader({net::kVersion, net::Op::kHello, 1, w.data().size()}, h);
  iovec iov[2] = {{h, sizeof h}, {const_cast<char*>(w.data().data()), w.data().size()}};
  if (Status st = net::SendAll(fd->get(), iov, 2, "server"); !st.ok()) Die(st, "conns hello");
  if (Status st = net::RecvAll(fd->get(), h, sizeof h, "server"); !st.ok()) Die(st, "conns hello");
  auto d = net::DecodeHeader(h);
  if (!d.ok() || d->op != net::Op::kHelloOk) Die(Status::IOError("HELLO refused"), "conns");
  std::string body(d->body_len, '\0');
  (void)net::RecvAll(fd->get(), body.data(), body.size(), "server");
  return std::move(fd).value();
}

}  // namespace

void ConnsWorkload(const Config& cfg, Payloads& pl) {
  Progress("conns: gets with 10, 1,000 and 10,000 idle connections open on the daemon");
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);  // the child inherits it
  const size_t most =
      lim.rlim_cur == RLIM_INFINITY ? 10000 : std::min<size_t>(10000, lim.rlim_cur - 600);
  ChildDaemon server(cfg.dir + "/conns");
  net::ClientOptions co;
  co.transport = net::TransportKind::kTcp;
  auto c = net::Client::Connect("tcp://127.0.0.1:" + std::to_string(server.port), co);
  if (!c.ok()) Die(c.status(), "conns client");
  auto big = pl.Get(0, 5);
  const std::vector<uint8_t> small(4096, 7);
  if (!(*c)->Put("bench", "small", {DType::kU8, {4096}}, {small.data(), small.size()}).ok() ||
      !(*c)->Put("bench", "big", Payloads::Meta(0), big).ok())
    Die(Status::IOError("put failed"), "conns");
  std::vector<uint8_t> dst(big.size());
  std::vector<UniqueFd> idle;
  uint64_t rss10 = 0;
  // The limit is measured first and again once the idle connections are closed: drift
  // between the runs shows as the two limit figures, and the faster is kept.
  for (size_t target : {size_t{10}, size_t{1000}, size_t{10000}, size_t{10}}) {
    const size_t n = std::min(target, most);
    if (n < target)
      std::fprintf(stderr, "conns: the open-files limit allows %zu, not %zu\n", n, target);
    while (idle.size() < n) idle.push_back(IdleConnection(server.port));
    idle.resize(n);
    usleep(200000);
    const uint64_t rss = ProcField(server.pid, "VmRSS");
    if (rss10 == 0) rss10 = rss;
    char note[256];
    std::snprintf(note, sizeof note, "%zu idle: daemon RSS %.0f MiB, %.1f KiB/conn, %llu threads",
                  n, rss / 1024.0,
                  n > 10 ? double(rss - std::min(rss, rss10)) / double(n - 10) : 0.0,
                  static_cast<unsigned long long>(ProcField(server.pid, "Threads")));
    const std::string sys = target == 10 ? "limit" : "ec-store-" + std::to_string(n);
    for (int size = 0; size < 2; ++size) {
      TimedReads t;
      const int rounds = cfg.quick ? 200 : (size == 0 ? 5000 : 500);
      std::span<uint8_t> to =
          size == 0 ? std::span<uint8_t>(dst.data(), small.size()) : std::span<uint8_t>(dst);
      for (int r = -200; r < rounds; ++r) {
        auto s = Clock::now();
        if (!(*c)->Get("bench", size == 0 ? "small" : "big", to).ok())
          Die(Status::IOError("get failed"), "conns");
        if (r >= 0) t.Add(s, to.size());
      }
      t.Report(size == 0 ? "conns_get_4KB" : "conns_get_2.9MB", sys.c_str(),
               std::string(note) + (target == 10 ? " (same gets, same daemon)" : ""));
    }
  }
  idle.clear();
}

}  // namespace ecstore::bench
