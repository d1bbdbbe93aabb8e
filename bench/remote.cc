#include "bench/remote.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string_view>
#include <thread>
#include <tuple>

#include "base/copy_pool.h"
#include "bench/etcd_proc.h"
#include "bench/pinned_buffer.h"
#include "net/client.h"
#include "server/server.h"

namespace ecstore::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Timer {
  std::vector<double> us;
  Clock::time_point start = Clock::now();
  uint64_t bytes = 0;
  bool summed = false;  // time = the sum of the timed ops (for interleaved measurements)
  Sample Finish() {
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    if (summed) {
      secs = 0;
      for (double u : us) secs += u / 1e6;
    }
    std::sort(us.begin(), us.end());
    Sample s;
    s.gbps = bytes / secs / 1e9;
    s.ops_per_s = us.size() / secs;
    s.p50_us = us.empty() ? 0 : us[us.size() / 2];
    s.p99_us = us.empty() ? 0 : us[std::min(us.size() - 1, us.size() * 99 / 100)];
    return s;
  }
};

double UsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

constexpr uint32_t kUpload = 0x80000000u;

// The plain stream: the request is a u32 index, the answer that value's bytes, sent from
// memory with one send() each, like the server's sendmsg from pool memory. With kUpload set,
// the value's bytes follow the index instead, received into one reused buffer of the pool's
// kind of memory (pinned, huge pages where there are any: the server's puts land in its pool
// blocks), and a byte answers: the limit of a remote put.
void StreamServe(int listen_fd, const std::vector<std::span<const uint8_t>>* values) {
  for (;;) {
    int fd = accept(listen_fd, nullptr, nullptr);
    if (fd < 0) return;
    std::thread([fd, values] {
      size_t max_len = 0;
      for (auto v : *values) max_len = std::max(max_len, v.size());
      std::optional<PinnedBuffer> in;  // at the first upload (a warm-up), faulted in
      uint32_t i;
      while (recv(fd, &i, 4, MSG_WAITALL) == 4 && (i & ~kUpload) < values->size()) {
        auto v = (*values)[i & ~kUpload];
        if (i & kUpload) {
          char ack = 1;
          if (!in) in.emplace(max_len);
          if (!net::RecvAll(fd, in->data(), v.size(), "client").ok() ||
              send(fd, &ack, 1, MSG_NOSIGNAL) != 1)
            break;
          continue;
        }
        iovec iov{const_cast<uint8_t*>(v.data()), v.size()};
        if (!net::SendAll(fd, &iov, 1, "client").ok()) break;
      }
      close(fd);
    }).detach();
  }
}

// The server process: an ec-store server over a shared-memory pool holding the values (as
// r0, r1, ...), and the plain stream server; it writes their ports to `port_pipe` and runs
// until SIGTERM. Never returns.
[[noreturn]] void ServeInChild(const std::vector<std::span<const uint8_t>>& values, uint64_t total,
                               const std::string& dir, int port_pipe) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  Options o;
  o.pool_bytes = (total + total / 4 + (64 << 20)) / (2 << 20) * (2 << 20);
  o.memory_backend = NewSharedHostBackend;
  auto store = Store::Open(dir, o);
  if (!store.ok()) _exit(3);
  for (size_t i = 0; i < values.size(); ++i) {
    TensorMeta m{DType::kBF16, {static_cast<int64_t>(values[i].size() / 2)}};
    if (!(*store)->Put("bench", "r" + std::to_string(i), m, values[i]).ok()) _exit(4);
  }
  net::ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.shm_socket = dir + "/serve.sock";
  auto server = net::Server::Start(store->get(), so);
  if (!server.ok()) _exit(5);
  uint16_t stream_port = 0;
  auto lfd = net::Listen({"127.0.0.1", 0}, &stream_port);
  if (!lfd.ok()) _exit(6);
  std::thread(StreamServe, lfd->get(), &values).detach();
  uint16_t p[2] = {(*server)->port(), stream_port};
  if (write(port_pipe, p, sizeof(p)) != sizeof(p)) _exit(7);
  int sig;
  sigwait(&stop, &sig);
  _exit(0);
}

struct ServerProcess {
  pid_t pid = -1;
  uint16_t store_port = 0, stream_port = 0;
};

std::optional<ServerProcess> StartServer(const std::vector<std::span<const uint8_t>>& values,
                                         uint64_t total, const std::string& dir) {
  int ports[2];
  if (pipe(ports) != 0) return std::nullopt;
  ServerProcess sp;
  sp.pid = fork();
  if (sp.pid == 0) {
    close(ports[0]);
    ServeInChild(values, total, dir, ports[1]);
  }
  close(ports[1]);
  uint16_t p[2] = {0, 0};
  bool started = sp.pid > 0 && read(ports[0], p, sizeof(p)) == sizeof(p);
  close(ports[0]);
  if (!started) {
    if (sp.pid > 0) waitpid(sp.pid, nullptr, 0);
    return std::nullopt;
  }
  sp.store_port = p[0];
  sp.stream_port = p[1];
  return sp;
}

// Runs `op(i)` over every value, `rounds` times after an untimed warm-up round; `op` returns
// the bytes it moved, or nullopt to end the measurement early (a failure).
Sample TimeRounds(size_t n, int rounds, const std::function<std::optional<uint64_t>(size_t)>& op) {
  Timer t;
  for (int r = -1; r < rounds; ++r)
    for (size_t i = 0; i < n; ++i) {
      if (r == 0 && i == 0) t = Timer();
      auto s = Clock::now();
      auto moved = op(i);
      if (!moved) return t.Finish();
      t.us.push_back(UsSince(s));
      t.bytes += *moved;
    }
  return t.Finish();
}

// shm_get's limit, the same copies done the simplest way: the same values, in the same
// order, memcpy'd from pinned memory mapped as the pool is into the same destination, split
// over as many threads as a Client copies out of the mapped pool with (CopyPool's default
// for this machine: the caller and one helper on 2 cores, 4 threads on 16). A limit of one
// thread's memcpy would be slower than the gets it bounds wherever the client splits copies.
Sample TimeMemcpy(const std::vector<std::span<const uint8_t>>& values, int rounds,
                  std::vector<uint8_t>& buf) {
  CopyPool split(CopyPool::DefaultThreads(std::thread::hardware_concurrency()));
  uint64_t total = 0;
  for (auto v : values) total += v.size();
  PinnedBuffer src(total);
  std::vector<uint64_t> at;
  for (uint64_t off = 0; auto v : values) {
    std::memcpy(src.data() + off, v.data(), v.size());
    at.push_back(off);
    off += v.size();
  }
  return TimeRounds(values.size(), rounds, [&](size_t i) -> std::optional<uint64_t> {
    split.Copy({{buf.data(), src.data() + at[i], values[i].size()}});
    return values[i].size();
  });
}

// One pass of remote puts, each alternated with its limit -- the same bytes up the plain
// stream -- so that drift in a VM's loopback throughput hits both alike. new_keys: every
// round puts keys the server has not seen (an encoder's saves: each is a new image), so the
// pool fills within two rounds and makes room from entries write-back has already spilled; else
// the keys it holds with the bytes they hold (a second worker saving the same images), which
// the store compares and keeps instead of replacing. Which of the two goes first alternates
// value by value: the second reads a value the first has just brought into cache, so a fixed
// order would favour whichever runs second.
void TimePuts(const ServerProcess& sp, const std::vector<std::span<const uint8_t>>& values,
              int rounds, bool new_keys, Sample* put, Sample* upload) {
  net::ClientOptions tcp_only;
  tcp_only.transport = net::TransportKind::kTcp;
  auto c = net::Client::Connect("127.0.0.1:" + std::to_string(sp.store_port), tcp_only);
  auto fd = net::ConnectTcp({"127.0.0.1", sp.stream_port}, std::chrono::seconds(10));
  Timer t, up;
  for (int r = -1; r < rounds && c.ok() && fd.ok(); ++r)
    for (uint32_t i = 0; i < values.size(); ++i) {
      if (r == 0 && i == 0) t = Timer(), up = Timer(), t.summed = up.summed = true;
      auto upload = [&] {
        auto s = Clock::now();
        uint32_t req = i | kUpload;
        iovec iov[2] = {{&req, 4}, {const_cast<uint8_t*>(values[i].data()), values[i].size()}};
        char ack;
        if (!net::SendAll(fd->get(), iov, 2, "stream").ok() ||
            !net::RecvAll(fd->get(), &ack, 1, "stream").ok())
          return false;
        up.us.push_back(UsSince(s));
        up.bytes += values[i].size();
        return true;
      };
      auto put = [&] {
        TensorMeta m{DType::kBF16, {static_cast<int64_t>(values[i].size() / 2)}};
        const std::string key = new_keys ? "p" + std::to_string(r + 1) + "-" + std::to_string(i)
                                         : "r" + std::to_string(i);
        auto s = Clock::now();
        if (!(*c)->Put("bench", key, m, values[i]).ok()) return false;
        t.us.push_back(UsSince(s));
        t.bytes += values[i].size();
        return true;
      };
      const bool put_first = (r + i) % 2 != 0;
      if (!(put_first ? put() && upload() : upload() && put())) break;
    }
  *put = t.Finish();
  *upload = up.Finish();
}

// Same-host puts of new keys, value by value alternated between Client::Put as it is (through
// the connection's put arena: a memcpy into it, the server's copy out of it) and with
// ClientOptions::put_arena off (over the unix socket: a copy into the kernel, one out into
// the pool block), so that drift hits both alike. Both are checksummed by the server.
void TimeShmPuts(const std::string& dir, const std::vector<std::span<const uint8_t>>& values,
                 int rounds, Sample* arena, Sample* socket) {
  net::ClientOptions no_arena;
  no_arena.put_arena = false;
  auto a = net::Client::Connect("unix:" + dir + "/serve.sock");
  auto b = net::Client::Connect("unix:" + dir + "/serve.sock", no_arena);
  Timer ta, tb;
  for (int r = -1; r < rounds && a.ok() && b.ok(); ++r)
    for (uint32_t i = 0; i < values.size(); ++i) {
      if (r == 0 && i == 0) ta = Timer(), tb = Timer(), ta.summed = tb.summed = true;
      TensorMeta m{DType::kBF16, {static_cast<int64_t>(values[i].size() / 2)}};
      const std::string key = std::to_string(r + 1) + "-" + std::to_string(i);
      for (auto [c, t, prefix] : {std::tuple(a->get(), &ta, "a"), std::tuple(b->get(), &tb, "s")}) {
        auto s = Clock::now();
        if (!c->Put("bench", prefix + key, m, values[i]).ok()) return;
        t->us.push_back(UsSince(s));
        t->bytes += values[i].size();
      }
    }
  *arena = ta.Finish();
  *socket = tb.Finish();
}

// Starts Debian's redis-server on a free port, output to /dev/null (its banner would break
// the bench's table), and connects to it; nullptr (with *pid set) if it did not come up.
redisContext* StartRedis(pid_t* pid) {
  uint16_t rport = FreePort();
  *pid = fork();
  if (*pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    std::string port = std::to_string(rport);
    execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save",
           "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning",
           static_cast<char*>(nullptr));
    _exit(127);
  }
  redisContext* rc = nullptr;
  for (int i = 0; i < 100 && !rc; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rc = redisConnect("127.0.0.1", rport);
    if (rc && rc->err) {
      redisFree(rc);
      rc = nullptr;
    }
  }
  return rc;
}

redisReply* RedisCommand(redisContext* rc, std::vector<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return static_cast<redisReply*>(
      redisCommandArgv(rc, static_cast<int>(args.size()), argv.data(), lens.data()));
}

// Redis GETs of the same values, each copied into the caller's buffer, if Debian's
// redis-server is installed.
void TimeRedis(const std::vector<std::span<const uint8_t>>& values, int rounds,
               std::vector<uint8_t>& buf, RemoteResults* res) {
  if (system("command -v redis-server >/dev/null 2>&1") != 0) {
    res->redis_note = "redis-server not installed (make deps installs it)";
    return;
  }
  pid_t redis = -1;
  redisContext* rc = StartRedis(&redis);
  bool ok = rc != nullptr;
  for (size_t i = 0; i < values.size() && ok; ++i) {
    auto* reply =
        RedisCommand(rc, {"SET",
                          "r" + std::to_string(i),
                          {reinterpret_cast<const char*>(values[i].data()), values[i].size()}});
    ok = reply && reply->type == REDIS_REPLY_STATUS;
    if (reply) freeReplyObject(reply);
  }
  if (ok) {
    Sample s = TimeRounds(values.size(), rounds, [&](size_t i) -> std::optional<uint64_t> {
      auto* reply = RedisCommand(rc, {"GET", "r" + std::to_string(i)});
      ok = reply && reply->type == REDIS_REPLY_STRING && reply->len == values[i].size();
      if (ok) std::memcpy(buf.data(), reply->str, reply->len);  // into the caller's buffer
      if (reply) freeReplyObject(reply);
      return ok ? std::optional<uint64_t>(values[i].size()) : std::nullopt;
    });
    if (ok) res->redis = s;
  }
  if (!ok) res->redis_note = rc ? "redis GET failed" : "redis-server did not start";
  if (rc) redisFree(rc);
  kill(redis, SIGTERM);
  waitpid(redis, nullptr, 0);
}

// A small request's round trip through a same-host daemon (Client::Lookup: a 39-byte frame
// up, a 98-byte answer down), alternated block by block with its limit -- the same sizes
// over a unix socket pair to a forked process that reads each request whole and answers,
// one blocking recv and one send a side -- so that drift hits both alike.
void TimeSmallRoundTrips(net::Client& c, int blocks, Sample* lookup, Sample* ping_pong) {
  constexpr size_t kUp = 39, kDown = 98, kPerBlock = 500;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
  pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    uint8_t req[kUp], ans[kDown] = {};
    while (net::RecvAll(sv[1], req, kUp, "bench").ok())
      if (send(sv[1], ans, kDown, MSG_NOSIGNAL) != static_cast<ssize_t>(kDown)) break;
    _exit(0);
  }
  close(sv[1]);
  Timer ours, limit;
  ours.summed = limit.summed = true;
  uint8_t req[kUp] = {}, ans[kDown];
  for (int b = 0; b < blocks; ++b) {
    for (size_t i = 0; i < kPerBlock; ++i) {
      auto s = Clock::now();
      if (!c.Lookup("bench", "r0").ok()) break;
      ours.us.push_back(UsSince(s));
    }
    for (size_t i = 0; i < kPerBlock; ++i) {
      auto s = Clock::now();
      if (send(sv[0], req, kUp, MSG_NOSIGNAL) != static_cast<ssize_t>(kUp) ||
          !net::RecvAll(sv[0], ans, kDown, "bench").ok())
        break;
      limit.us.push_back(UsSince(s));
    }
  }
  close(sv[0]);
  waitpid(child, nullptr, 0);
  *lookup = ours.Finish();
  *ping_pong = limit.Finish();
}

}  // namespace

RemoteResults RunRemote(const std::vector<std::span<const uint8_t>>& values, int rounds,
                        const std::string& dir) {
  RemoteResults res;
  uint64_t total = 0;
  size_t max_len = 0;
  for (auto v : values) total += v.size(), max_len = std::max(max_len, v.size());
  std::filesystem::remove_all(dir);
  auto sp = StartServer(values, total, dir);
  if (!sp) {
    res.redis_note = "server process failed to start";
    return res;
  }
  std::vector<uint8_t> buf(max_len, 1);  // touched: no first-use page faults in a timing
  // The plain socket stream (a u32 index up, the value's bytes down), timed before and after
  // the TCP gets: loopback's speed drifts on a VM within a run, so the limit is the faster
  // run (one taken before everything else alone can read slower than the gets after it).
  auto stream = net::ConnectTcp({"127.0.0.1", sp->stream_port}, std::chrono::seconds(10));
  auto time_stream = [&] {
    if (!stream.ok()) return Sample{};
    return TimeRounds(values.size(), rounds, [&](size_t i) {
      uint32_t req = static_cast<uint32_t>(i);
      send(stream->get(), &req, 4, 0);
      return net::RecvAll(stream->get(), buf.data(), values[i].size(), "stream").ok()
                 ? std::optional<uint64_t>(values[i].size())
                 : std::nullopt;
    });
  };
  auto time_gets = [&](Result<std::unique_ptr<net::Client>> c) {
    if (!c.ok()) return Sample{};
    return TimeRounds(values.size(), rounds, [&](size_t i) -> std::optional<uint64_t> {
      auto got = (*c)->Get("bench", "r" + std::to_string(i), {buf.data(), buf.size()});
      return got.ok() ? std::optional<uint64_t>(got->bytes) : std::nullopt;
    });
  };
  net::ClientOptions tcp_only;
  tcp_only.transport = net::TransportKind::kTcp;
  const Sample stream_before = time_stream();
  res.ecstore_tcp =
      time_gets(net::Client::Connect("127.0.0.1:" + std::to_string(sp->store_port), tcp_only));
  const Sample stream_after = time_stream();
  res.socket_stream = stream_before.gbps >= stream_after.gbps ? stream_before : stream_after;
  res.socket_stream_runs = {stream_before.gbps, stream_after.gbps};
  res.memcpy_values = TimeMemcpy(values, rounds, buf);
  res.ecstore_shm = time_gets(net::Client::Connect("unix:" + dir + "/serve.sock"));
  if (auto c = net::Client::Connect("unix:" + dir + "/serve.sock"); c.ok())
    TimeSmallRoundTrips(**c, std::max(rounds, 2) * 2, &res.ecstore_shm_lookup, &res.unix_ping_pong);
  Sample upload_new, upload_same;
  TimePuts(*sp, values, rounds, true, &res.ecstore_tcp_put, &upload_new);
  TimePuts(*sp, values, rounds, false, &res.ecstore_tcp_reput, &upload_same);
  res.socket_upload = upload_new.gbps >= upload_same.gbps ? upload_new : upload_same;
  res.socket_upload_runs = {upload_new.gbps, upload_same.gbps};
  TimeShmPuts(dir, values, rounds, &res.ecstore_shm_put, &res.ecstore_socket_put);
  kill(sp->pid, SIGTERM);
  waitpid(sp->pid, nullptr, 0);
  std::filesystem::remove_all(dir);
  TimeRedis(values, rounds, buf, &res);
  return res;
}

}  // namespace ecstore::bench
