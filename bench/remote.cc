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
#include <string_view>
#include <thread>

#include "net/client.h"
#include "net/server.h"

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
// the value's bytes follow the index instead, received into one reused buffer, and a byte
// answers: the limit of a remote put.
void StreamServe(int listen_fd, const std::vector<std::span<const uint8_t>>* values) {
  for (;;) {
    int fd = accept(listen_fd, nullptr, nullptr);
    if (fd < 0) return;
    std::thread([fd, values] {
      size_t max_len = 0;
      for (auto v : *values) max_len = std::max(max_len, v.size());
      std::vector<uint8_t> in(max_len, 1);  // touched: no page faults while timed
      uint32_t i;
      while (recv(fd, &i, 4, MSG_WAITALL) == 4 && (i & ~kUpload) < values->size()) {
        auto v = (*values)[i & ~kUpload];
        if (i & kUpload) {
          char ack = 1;
          if (!net::RecvAll(fd, in.data(), v.size(), "client").ok() ||
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

uint16_t FreePort() {
  uint16_t port = 0;
  auto fd = net::Listen({"127.0.0.1", 0}, &port);
  return port;  // closed on return; redis-server binds it next
}

}  // namespace

RemoteResults RunRemote(const std::vector<std::span<const uint8_t>>& values, int rounds,
                        const std::string& dir) {
  RemoteResults res;
  uint64_t total = 0;
  for (auto v : values) total += v.size();
  std::filesystem::remove_all(dir);
  int ports[2];
  if (pipe(ports) != 0) return res;
  pid_t child = fork();
  if (child == 0) {  // the server process: ec-store server + plain stream server
    close(ports[0]);
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
    if (write(ports[1], p, sizeof(p)) != sizeof(p)) _exit(7);
    int sig;
    sigwait(&stop, &sig);
    _exit(0);
  }
  close(ports[1]);
  uint16_t p[2] = {0, 0};
  bool started = read(ports[0], p, sizeof(p)) == sizeof(p);
  close(ports[0]);
  if (!started) {
    waitpid(child, nullptr, 0);
    res.redis_note = "server process failed to start";
    return res;
  }
  size_t max_len = 0;
  for (auto v : values) max_len = std::max(max_len, v.size());
  std::vector<uint8_t> buf(max_len, 1);  // touched: no first-use page faults in a timing

  {  // plain socket stream
    auto fd = net::ConnectTcp({"127.0.0.1", p[1]}, std::chrono::seconds(10));
    Timer t;
    for (int r = -1; r < rounds && fd.ok(); ++r)
      for (uint32_t i = 0; i < values.size(); ++i) {
        if (r == 0 && i == 0) t = Timer();  // round -1 warms up, untimed
        auto s = Clock::now();
        send(fd->get(), &i, 4, 0);
        if (!net::RecvAll(fd->get(), buf.data(), values[i].size(), "stream").ok()) break;
        t.us.push_back(UsSince(s));
        t.bytes += values[i].size();
      }
    res.socket_stream = t.Finish();
  }
  // Round -1 warms up, untimed; a failed get ends the measurement early.
  auto time_gets = [&](Result<std::unique_ptr<net::Client>> c) {
    Timer t;
    for (int r = -1; r < rounds && c.ok(); ++r)
      for (size_t i = 0; i < values.size(); ++i) {
        if (r == 0 && i == 0) t = Timer();
        auto s = Clock::now();
        auto got = (*c)->Get("bench", "r" + std::to_string(i), {buf.data(), buf.size()});
        if (!got.ok()) break;
        t.us.push_back(UsSince(s));
        t.bytes += got->bytes;
      }
    return t.Finish();
  };
  res.ecstore_shm = time_gets(net::Client::Connect("unix:" + dir + "/serve.sock"));
  net::ClientOptions tcp_only;
  tcp_only.transport = "tcp";
  res.ecstore_tcp = time_gets(net::Client::Connect("127.0.0.1:" + std::to_string(p[0]), tcp_only));
  {  // remote puts (replacing the same keys, so the pool never spills while timed), each
     // alternated with its limit -- the same bytes up the plain stream -- so that drift in
     // this VM's loopback throughput hits both alike
    auto c = net::Client::Connect("127.0.0.1:" + std::to_string(p[0]), tcp_only);
    auto fd = net::ConnectTcp({"127.0.0.1", p[1]}, std::chrono::seconds(10));
    Timer t, up;
    for (int r = -1; r < rounds && c.ok() && fd.ok(); ++r)
      for (uint32_t i = 0; i < values.size(); ++i) {
        if (r == 0 && i == 0) t = Timer(), up = Timer(), t.summed = up.summed = true;
        auto s = Clock::now();
        uint32_t req = i | kUpload;
        iovec iov[2] = {{&req, 4}, {const_cast<uint8_t*>(values[i].data()), values[i].size()}};
        char ack;
        if (!net::SendAll(fd->get(), iov, 2, "stream").ok() ||
            !net::RecvAll(fd->get(), &ack, 1, "stream").ok())
          break;
        up.us.push_back(UsSince(s));
        up.bytes += values[i].size();
        TensorMeta m{DType::kBF16, {static_cast<int64_t>(values[i].size() / 2)}};
        s = Clock::now();
        if (!(*c)->Put("bench", "r" + std::to_string(i), m, values[i]).ok()) break;
        t.us.push_back(UsSince(s));
        t.bytes += values[i].size();
      }
    res.ecstore_tcp_put = t.Finish();
    res.socket_upload = up.Finish();
  }
  kill(child, SIGTERM);
  waitpid(child, nullptr, 0);
  std::filesystem::remove_all(dir);

  // Redis on the same values, if Debian's redis-server is installed.
  if (system("command -v redis-server >/dev/null 2>&1") != 0) {
    res.redis_note = "redis-server not installed (make deps installs it)";
    return res;
  }
  uint16_t rport = FreePort();
  pid_t redis = fork();
  if (redis == 0) {
    int devnull = open("/dev/null", O_WRONLY);  // its banner would break the bench's table
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
  if (!rc) {
    res.redis_note = "redis-server did not start";
  } else {
    bool ok = true;
    auto command = [&](std::vector<std::string_view> args) {
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (auto a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      return static_cast<redisReply*>(
          redisCommandArgv(rc, static_cast<int>(args.size()), argv.data(), lens.data()));
    };
    for (size_t i = 0; i < values.size() && ok; ++i) {
      std::string key = "r" + std::to_string(i);
      auto* reply = command(
          {"SET", key, {reinterpret_cast<const char*>(values[i].data()), values[i].size()}});
      ok = reply && reply->type == REDIS_REPLY_STATUS;
      if (reply) freeReplyObject(reply);
    }
    Timer t;
    for (int r = -1; r < rounds && ok; ++r) {  // round -1 warms up, untimed
      if (r == 0) t = Timer();
      for (size_t i = 0; i < values.size() && ok; ++i) {
        std::string key = "r" + std::to_string(i);
        auto s = Clock::now();
        auto* reply = command({"GET", key});
        ok = reply && reply->type == REDIS_REPLY_STRING && reply->len == values[i].size();
        if (ok) std::memcpy(buf.data(), reply->str, reply->len);  // into the caller's buffer
        if (reply) freeReplyObject(reply);
        t.us.push_back(UsSince(s));
        t.bytes += values[i].size();
      }
    }
    if (ok)
      res.redis = t.Finish();
    else
      res.redis_note = "redis GET failed";
    redisFree(rc);
  }
  kill(redis, SIGTERM);
  waitpid(redis, nullptr, 0);
  return res;
}

}  // namespace ecstore::bench
