// Client and server in separate processes on loopback, over real TCP sockets.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "base/test_util.h"
#include "base/units.h"
#include "net/client.h"
#include "server/acl.h"
#include "server/server.h"
#include "tests/raw_hello.h"

namespace ecstore::net {
namespace {

using testing::Payload;
using testing::Span;

// A store + server in a child process. The child reports its port through a pipe and
// serves until SIGTERM (clean close) or SIGKILL.
class ServerProcess {
 public:
  using Tweak = std::function<void(ServerOptions*)>;  // runs in the child, before Start
  ServerProcess(std::string dir, std::string token = "", uint64_t pool = 64 * kMiB,
                uint16_t port = 0, bool shm = false, int lease_ttl_ms = 30000,
                int io_timeout_ms = 30000, Tweak tweak = {})
      : dir_(std::move(dir)),
        token_(std::move(token)),
        pool_(pool),
        shm_(shm),
        ttl_(lease_ttl_ms),
        io_timeout_(io_timeout_ms),
        tweak_(std::move(tweak)) {
    Start(port);
  }
  std::string shm_uri() const { return "unix:" + dir_ + "/serve.sock"; }
  ~ServerProcess() { Kill(SIGKILL); }
  void Start(uint16_t port) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      close(fds[0]);
      sigset_t stop;
      sigemptyset(&stop);
      sigaddset(&stop, SIGTERM);
      pthread_sigmask(SIG_BLOCK, &stop, nullptr);
      Options o;
      o.pool_bytes = pool_;
      o.eviction_policy = "lru";  // the pin and lease tests count on the least recent leaving
      if (shm_) o.memory_backend = NewSharedHostBackend;
      auto store = Store::Open(dir_, o);
      if (!store.ok()) _exit(3);
      ServerOptions so;
      so.listen = "127.0.0.1:" + std::to_string(port);
      so.token = token_;
      if (shm_) so.shm_socket = dir_ + "/serve.sock";
      so.lease_ttl = std::chrono::milliseconds(ttl_);
      so.io_timeout = std::chrono::milliseconds(io_timeout_);
      if (tweak_) tweak_(&so);
      auto server = Server::Start(store->get(), so);
      if (!server.ok()) _exit(4);
      uint16_t p = (*server)->port();
      if (write(fds[1], &p, 2) != 2) _exit(5);
      int sig;
      sigwait(&stop, &sig);
      (*server)->Stop();
      _exit((*store)->Close().ok() ? 0 : 6);
    }
    close(fds[1]);
    ASSERT_EQ(read(fds[0], &port_, 2), 2) << "server child failed to start";
    close(fds[0]);
  }
  void Stop() { Kill(SIGTERM); }
  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status;
    if (sig == SIGSTOP) {  // kill() only sends it: wait until the child has stopped (on 2
      waitpid(pid_, &status, WUNTRACED);  // cores it once served one more request first)
      return;
    }
    if (sig != SIGKILL) kill(pid_, SIGCONT);
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  void Continue() { kill(pid_, SIGCONT); }
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string uri() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

 private:
  std::string dir_, token_;
  uint64_t pool_;
  bool shm_;
  int ttl_;
  int io_timeout_;
  Tweak tweak_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

using testing::U8;

ClientOptions TcpOnly() {
  ClientOptions o;
  o.transport = TransportKind::kTcp;
  return o;
}

// The core tests run once per transport: the server offers both; the client forces TCP or
// lets automatic selection pick shared memory (same host).
class NetP : public ::testing::TestWithParam<std::string> {
 protected:
  ClientOptions Opts() const {
    ClientOptions o;
    o.transport = GetParam() == "shm" ? TransportKind::kAuto : TransportKind::kTcp;
    return o;
  }
};

std::unique_ptr<Client> ConnectOrDie(const std::string& uri, ClientOptions o = {}) {
  auto c = Client::Connect(uri, o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST_P(NetP, RemoteProducerAndConsumerAreByteExact) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 64 * kMiB, 0, /*shm=*/true);
  auto producer = ConnectOrDie(server.uri(), Opts());
  auto consumer = ConnectOrDie(server.uri(), Opts());
  ASSERT_EQ(consumer->transport(), GetParam());
  const size_t sizes[] = {1, 4095, 4096, kMiB + 3, 10616832, 57802752};
  for (size_t i = 0; i < 6; ++i)
    ASSERT_TRUE(
        producer->Put("ns", "k" + std::to_string(i), U8(sizes[i]), Span(Payload(i, sizes[i])))
            .ok());
  std::vector<uint8_t> buf(60 * kMiB);
  for (size_t i = 0; i < 6; ++i) {
    auto info = consumer->Get("ns", "k" + std::to_string(i), {buf.data(), buf.size()});
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    ASSERT_EQ(info->bytes, sizes[i]);
    ASSERT_EQ(0, std::memcmp(buf.data(), Payload(i, sizes[i]).data(), sizes[i])) << "k" << i;
  }
  // A buffer too small: the answer says the entry's size and layout (the stream kept in
  // step over TCP: the next get is whole).
  auto probe = consumer->Get("ns", "k3", {buf.data(), 10});
  ASSERT_TRUE(probe.status().IsBufferTooSmall()) << probe.status().ToString();
  EXPECT_EQ(probe.status().needed_bytes(), sizes[3]);
  ASSERT_NE(probe.status().needed_meta(), nullptr);
  EXPECT_EQ(probe.status().needed_meta()->shape, U8(sizes[3]).shape);
  ASSERT_TRUE(consumer->Get("ns", "k3", {buf.data(), sizes[3]}).ok());
  ASSERT_EQ(0, std::memcmp(buf.data(), Payload(3, sizes[3]).data(), sizes[3]));
  // Batches: lookups with a missing key, and a pipelined GetMany.
  auto found = consumer->ContainsMany("ns", {"k0", "missing", "k5"});
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, (std::vector<bool>{true, false, true}));
  std::vector<std::vector<uint8_t>> bufs(3, std::vector<uint8_t>(11 * kMiB));
  std::vector<std::span<uint8_t>> dsts;
  for (auto& b : bufs) dsts.emplace_back(b.data(), b.size());
  auto many = consumer->GetMany("ns", {"k3", "nope", "k4"}, dsts);
  ASSERT_EQ(many.size(), 3u);
  ASSERT_TRUE(many[0].ok() && many[2].ok());
  EXPECT_TRUE(many[1].status().IsNotFound());
  EXPECT_EQ(0, std::memcmp(bufs[2].data(), Payload(4, sizes[4]).data(), sizes[4]));
  // Too small a buffer is refused without breaking the stream.
  std::vector<uint8_t> small(10);
  EXPECT_TRUE(consumer->Get("ns", "k3", {small.data(), small.size()}).status().IsInvalidArgument());
  ASSERT_TRUE(consumer->Get("ns", "k0", {buf.data(), buf.size()}).ok());
  ASSERT_TRUE(consumer->Erase("ns", "k0").ok());
  EXPECT_TRUE(consumer->Get("ns", "k0", {buf.data(), buf.size()}).status().IsNotFound());
  auto stats = consumer->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->pool().capacity, 64 * kMiB);
  EXPECT_GE(stats->misses, 1u);
  // Acquire: the entry under a lease (in place over shm, in a buffer it owns over TCP).
  {
    auto lease = consumer->Acquire("ns", "k5");
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    ASSERT_EQ(lease->size(), sizes[5]);
    EXPECT_EQ(0, std::memcmp(lease->data(), Payload(5, sizes[5]).data(), sizes[5]));
    EXPECT_EQ(lease->info().key, "k5");
  }
  EXPECT_TRUE(consumer->Acquire("ns", "k0").status().IsNotFound());
  EXPECT_TRUE(consumer->Pin("ns", "k0").status().IsNotFound());
  EXPECT_TRUE(consumer->Lookup("ns", "k0").status().IsNotFound());
}

// TCP puts whose pieces a connection's helper checks (the default on 4 or more cores, forced
// here): new keys byte exact, the same bytes again keep the entry, other bytes replace it,
// and puts from several connections at once each get their own helper.
TEST(Net, TcpPutsCheckedOnAHelperAreByteExact) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 256 * kMiB, 0, false, 30000, 30000,
                       [](ServerOptions* so) { so->check_put_pieces = 1; });
  auto c = ConnectOrDie(server.uri(), TcpOnly());
  const size_t sizes[] = {kMiB - 1, 2 * kMiB + 3, 10616832, 57802752};
  for (size_t i = 0; i < 4; ++i)
    ASSERT_TRUE(
        c->Put("ns", "k" + std::to_string(i), U8(sizes[i]), Span(Payload(i, sizes[i]))).ok());
  auto held = c->Lookup("ns", "k3");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_TRUE(c->Put("ns", "k3", U8(sizes[3]), Span(Payload(3, sizes[3]))).ok());
  EXPECT_EQ(c->Lookup("ns", "k3")->created_us, held->created_us);  // the same bytes: kept
  auto other = Payload(3, sizes[3]);
  other.back() ^= 1;
  ASSERT_TRUE(c->Put("ns", "k3", U8(sizes[3]), Span(other)).ok());
  EXPECT_NE(c->Lookup("ns", "k3")->checksum, held->checksum);
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t)
    writers.emplace_back([&, t] {
      auto w = Client::Connect(server.uri(), TcpOnly());
      for (int i = 0; w.ok() && i < 4; ++i)
        if (!(*w)->Put("w", std::to_string(t * 4 + i), U8(sizes[2]), Span(Payload(t, sizes[2])))
                 .ok())
          ++failures;
      if (!w.ok()) ++failures;
    });
  for (auto& w : writers) w.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<uint8_t> buf(60 * kMiB);
  for (size_t i = 0; i < 4; ++i) {
    auto info = c->Get("ns", "k" + std::to_string(i), {buf.data(), buf.size()});
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    ASSERT_EQ(info->bytes, sizes[i]);
    const auto want = i == 3 ? other : Payload(i, sizes[i]);
    EXPECT_EQ(0, std::memcmp(buf.data(), want.data(), sizes[i])) << "k" << i;
  }
  for (int k = 0; k < 12; ++k) {
    ASSERT_TRUE(c->Get("w", std::to_string(k), {buf.data(), buf.size()}).ok());
    EXPECT_EQ(0, std::memcmp(buf.data(), Payload(k / 4, sizes[2]).data(), sizes[2])) << k;
  }
}

TEST_P(NetP, ConcurrentClients) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 64 * kMiB, 0, /*shm=*/true);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto c = Client::Connect(server.uri(), Opts());
      if (!c.ok()) return void(++failures);
      std::vector<uint8_t> buf(2 * kMiB);
      for (int i = 0; i < 15; ++i) {
        std::string key = "t" + std::to_string(t) + "-" + std::to_string(i);
        auto p = Payload(t * 100 + i, 2 * kMiB - i);
        if (!(*c)->Put("ns", key, U8(p.size()), Span(p)).ok()) ++failures;
        auto got = (*c)->Get("ns", key, {buf.data(), buf.size()});
        if (!got.ok() || std::memcmp(buf.data(), p.data(), p.size()) != 0) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
}

TEST_P(NetP, ClientReconnectsAfterServerRestart) {
  testing::TempDir dir;
  auto server = std::make_unique<ServerProcess>(dir.path(), "", 64 * kMiB, 0, true);
  uint16_t port = server->port();
  auto c = ConnectOrDie(server->uri(), Opts());
  ASSERT_TRUE(c->Put("ns", "k", U8(kMiB), Span(Payload(1, kMiB))).ok());
  server->Stop();  // clean shutdown persists the pool
  server = std::make_unique<ServerProcess>(dir.path(), "", 64 * kMiB, port, true);
  std::vector<uint8_t> buf(kMiB);
  auto got = c->Get("ns", "k", {buf.data(), buf.size()});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(buf == Payload(1, kMiB));
}

TEST_P(NetP, DeadOrHungServerIsUnavailableWithinTheTimeout) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 64 * kMiB, 0, true);
  ClientOptions o = Opts();
  o.timeout = std::chrono::milliseconds(400);
  o.retries = 1;
  auto c = ConnectOrDie(server.uri(), o);
  ASSERT_TRUE(c->Put("ns", "k", U8(8 * kMiB), Span(Payload(2, 8 * kMiB))).ok());
  server.Kill(SIGSTOP);  // hung: accepts nothing, answers nothing
  std::vector<uint8_t> buf(8 * kMiB);
  auto t0 = std::chrono::steady_clock::now();
  auto got = c->Get("ns", "k", {buf.data(), buf.size()});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(got.status().IsUnavailable()) << got.status().ToString();
  EXPECT_LT(secs, 3.0);
  server.Continue();
  server.Kill(SIGKILL);
  t0 = std::chrono::steady_clock::now();
  got = c->Get("ns", "k", {buf.data(), buf.size()});
  EXPECT_TRUE(got.status().IsUnavailable()) << got.status().ToString();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  EXPECT_TRUE(Client::Connect(server.uri(), o).status().IsUnavailable());
}

// A peer whose accept queue is full drops the SYNs: a connect to it waits as long as it is
// let. The connect timeout bounds that wait, not the (longer) call timeout.
TEST(Net, ConnectTimeoutBoundsAConnectThatIsNeverAnswered) {
  UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), len), 0);
  ASSERT_EQ(listen(listener.get(), 0), 0);
  ASSERT_EQ(getsockname(listener.get(), reinterpret_cast<sockaddr*>(&sa), &len), 0);
  std::vector<UniqueFd> queued;  // fill the accept queue (loopback handshakes end in connect)
  for (int i = 0; i < 4; ++i) {
    queued.emplace_back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    connect(queued.back().get(), reinterpret_cast<sockaddr*>(&sa), len);
  }
  ClientOptions o = TcpOnly();
  o.timeout = std::chrono::seconds(20);
  o.connect_timeout = std::chrono::milliseconds(300);
  o.retries = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto c = Client::Connect("tcp://127.0.0.1:" + std::to_string(ntohs(sa.sin_port)), o);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().IsUnavailable()) << c.status().ToString();
  EXPECT_LT(secs, 10.0) << c.status().ToString();  // bounded by 300 ms, not the 20 s timeout
}

TEST_P(NetP, EvictionRacingReadsNeverServesWrongBytes) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, true);
  auto reader = ConnectOrDie(server.uri(), Opts());
  auto writer = ConnectOrDie(server.uri(), Opts());
  ASSERT_TRUE(writer->Put("ns", "hot", U8(6 * kMiB), Span(Payload(7, 6 * kMiB))).ok());
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0}, reads{0};
  std::thread t([&] {
    std::vector<uint8_t> buf(6 * kMiB);
    auto want = Payload(7, 6 * kMiB);
    while (!done) {
      auto got = reader->Get("ns", "hot", {buf.data(), buf.size()});
      if (got.ok()) {
        ++reads;
        if (buf != want) ++wrong;
      } else if (!got.status().IsNotFound()) {
        ++wrong;
      }
    }
  });
  for (int i = 0; i < 25; ++i)
    ASSERT_TRUE(
        writer->Put("ns", "w" + std::to_string(i), U8(3 * kMiB), Span(Payload(i, 3 * kMiB))).ok());
  done = true;
  t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(reads, 0);
}

// Raw frames: what a broken or hostile client sends.
class RawConn {
 public:
  explicit RawConn(uint16_t port) {
    auto fd = ConnectTcp({"127.0.0.1", port}, std::chrono::milliseconds(2000));
    EXPECT_TRUE(fd.ok());
    fd_ = std::move(fd).value();
  }
  void Send(const std::string& bytes) {
    ASSERT_EQ(send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  void SendFrame(Op op, const std::string& body, uint64_t claimed_len = UINT64_MAX) {
    uint8_t h[kHeaderBytes];
    EncodeHeader({kVersion, op, 1, claimed_len == UINT64_MAX ? body.size() : claimed_len}, h);
    Send(std::string(reinterpret_cast<char*>(h), kHeaderBytes) + body);
  }
  // Reads one reply; returns its op and, for errors, the message.
  std::pair<Op, std::string> Reply() {
    uint8_t h[kHeaderBytes];
    if (!RecvAll(fd_.get(), h, kHeaderBytes, "server").ok()) return {Op::kOk, "closed"};
    auto d = DecodeHeader(h);
    std::string body(d->body_len, '\0');
    RecvAll(fd_.get(), body.data(), body.size(), "server");
    BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
    return {d->op, d->op == Op::kError ? ParseErrorBody(&r).message() : ""};
  }
  bool Closed() {
    char c;
    return recv(fd_.get(), &c, 1, 0) == 0;
  }
  int fd() const { return fd_.get(); }
  void Hello(const std::string& token = "") {
    BodyWriter w;
    w.Str(token);
    SendFrame(Op::kHello, w.data());
    ASSERT_EQ(Reply().first, Op::kHelloOk);
  }

 private:
  UniqueFd fd_;
};

TEST(Net, MalformedFramesGetAnErrorAndAClosedConnection) {
  testing::TempDir dir;
  ServerProcess server(dir.path());
  {
    RawConn c(server.port());
    c.Send(std::string(24, 'x'));
    auto [op, msg] = c.Reply();
    EXPECT_EQ(op, Op::kError);
    EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
    EXPECT_TRUE(c.Closed());
  }
  {
    RawConn c(server.port());
    c.Hello();
    uint8_t h[kHeaderBytes];
    EncodeHeader({kVersion, Op::kGet, 1, 0}, h);
    h[6] = 77;  // unknown opcode
    c.Send(std::string(reinterpret_cast<char*>(h), kHeaderBytes));
    auto [op, msg] = c.Reply();
    EXPECT_EQ(op, Op::kError);
    EXPECT_NE(msg.find("unknown opcode"), std::string::npos) << msg;
    EXPECT_TRUE(c.Closed());
  }
  {
    RawConn c(server.port());
    c.Hello();
    c.SendFrame(Op::kLookup, "", 1ull << 40);  // absurd body length
    auto [op, msg] = c.Reply();
    EXPECT_EQ(op, Op::kError);
    EXPECT_NE(msg.find("exceeds"), std::string::npos) << msg;
    EXPECT_TRUE(c.Closed());
  }
  {
    RawConn c(server.port());
    c.Hello();
    BodyWriter w;
    w.Str("ns");
    w.Str(std::string(300, 'k'));  // oversize key
    c.SendFrame(Op::kGet, w.data());
    auto [op, msg] = c.Reply();
    EXPECT_EQ(op, Op::kError);
    EXPECT_TRUE(c.Closed());
  }
  {
    RawConn c(server.port());
    BodyWriter w;
    w.Str("ns");
    w.Str("k");
    c.SendFrame(Op::kGet, w.data());  // no HELLO first
    auto [op, msg] = c.Reply();
    EXPECT_EQ(op, Op::kError);
    EXPECT_NE(msg.find("HELLO"), std::string::npos) << msg;
  }
  // The server is still healthy for well-behaved clients.
  auto ok = ConnectOrDie(server.uri());
  EXPECT_TRUE(ok->Put("ns", "after", U8(10), Span(Payload(1, 10))).ok());
}

uint64_t RssBytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// A client that announces a 1 GiB PUT gets nothing allocated: before HELLO it is refused
// outright (also on a token-protected server); after HELLO the body is streamed into the
// pool, so a PUT larger than the pool costs no memory while its bytes are read and dropped.
TEST(Net, NoMemoryIsCommittedToAnnouncedBodies) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "s3cret");
  ClientOptions o;
  o.token = "s3cret";
  auto ok = ConnectOrDie(server.uri(), o);
  // One put served: the server is up and its pool faulted in before the baseline is taken.
  ASSERT_TRUE(ok->Put("ns", "before", U8(10), Span(Payload(1, 10))).ok());
  const uint64_t before = RssBytes(server.pid());
  std::vector<std::unique_ptr<RawConn>> conns;
  for (int i = 0; i < 3; ++i) {  // no HELLO
    auto c = std::make_unique<RawConn>(server.port());
    c->SendFrame(Op::kPut, "", 1ull << 30);
    auto [op, msg] = c->Reply();
    EXPECT_EQ(op, Op::kError);
    EXPECT_NE(msg.find("HELLO"), std::string::npos) << msg;
    EXPECT_TRUE(c->Closed());
  }
  for (int i = 0; i < 3; ++i) {  // greeted, then a 1 GiB body that never comes
    auto c = std::make_unique<RawConn>(server.port());
    c->Hello("s3cret");
    BodyWriter w;
    w.Str("ns");
    w.Str("big" + std::to_string(i));
    w.Meta({DType::kU8, {1ll << 30}});
    c->SendFrame(Op::kPut, w.data(), w.data().size() + (1ull << 30));
    // A blocking send of more than loopback's socket buffers hold returns only once the
    // server has read most of it: it has taken the frame and is streaming the body.
    const std::string part(16 * kMiB, 'x');
    c->Send(part);
    conns.push_back(std::move(c));
  }
  const uint64_t after = RssBytes(server.pid());
  EXPECT_LT(after, before + 32 * kMiB) << "server RSS grew from " << before << " to " << after;
  EXPECT_TRUE(ok->Put("ns", "after", U8(10), Span(Payload(1, 10))).ok());  // still serving
}

// A frame is bounded as a whole: trickling a byte at a time does not hold a connection.
TEST(Net, TricklingClientIsCutOffAtTheFrameDeadline) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 64 * kMiB, 0, false, 30000, /*io_timeout_ms=*/300);
  RawConn c(server.port());
  c.Hello();
  BodyWriter w;
  w.Str("ns");
  w.Str("k");
  w.Meta({DType::kU8, {4096}});
  c.SendFrame(Op::kPut, w.data(), w.data().size() + 4096);
  auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {  // one byte every 100 ms: each within 300 ms
    if (send(c.fd(), "x", 1, MSG_NOSIGNAL) != 1) closed = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    char b;
    if (recv(c.fd(), &b, 1, MSG_DONTWAIT) == 0) closed = true;
  }
  EXPECT_TRUE(closed) << "a trickling client kept its frame open";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(Net, LoopbackIsDecidedOnTheResolvedAddress) {
  EXPECT_TRUE(IsLoopback("127.0.0.1"));
  EXPECT_TRUE(IsLoopback("127.1.2.3"));
  EXPECT_TRUE(IsLoopback("localhost"));
  EXPECT_TRUE(IsLoopback("::1"));
  EXPECT_FALSE(IsLoopback("0.0.0.0"));
  EXPECT_FALSE(IsLoopback("192.0.2.7"));
  EXPECT_FALSE(IsLoopback("127.no-such-host.invalid"));  // unresolvable is not loopback
  auto v6 = ParseHostPort("[::1]:7070");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 7070);
  // A token-less server on IPv6 loopback starts, and clients reach it there.
  uint16_t port = 0;
  bool loopback = false;
  auto fd = Listen({"::1", 0}, &port, &loopback);
  if (!fd.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << fd.status().ToString();
  EXPECT_TRUE(loopback);
  auto c = ConnectTcp({"::1", port}, std::chrono::milliseconds(1000));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(Net, WrongTokenIsRefused) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "s3cret");
  ClientOptions bad;
  bad.token = "nope";
  auto c = Client::Connect(server.uri(), bad);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("token"), std::string::npos) << c.status().ToString();
  ClientOptions good;
  good.token = "s3cret";
  auto g = Client::Connect(server.uri(), good);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE((*g)->Put("ns", "k", U8(10), Span(Payload(1, 10))).ok());
}

TEST(NetShm, SameHostReadsThroughSharedMemoryByteExact) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 64 * kMiB, 0, /*shm=*/true);
  auto producer = ConnectOrDie(server.uri(), TcpOnly());
  EXPECT_STREQ(producer->transport(), "tcp");
  const size_t sizes[] = {1, 4096, kMiB + 5, 10616832};
  for (size_t i = 0; i < 4; ++i)
    ASSERT_TRUE(
        producer->Put("ns", "k" + std::to_string(i), U8(sizes[i]), Span(Payload(i, sizes[i])))
            .ok());
  // Explicit unix socket, and automatic selection from a loopback TCP address.
  for (const std::string& uri : {server.shm_uri(), server.uri()}) {
    auto c = ConnectOrDie(uri);
    ASSERT_STREQ(c->transport(), "shm") << uri;
    std::vector<uint8_t> buf(11 * kMiB);
    for (size_t i = 0; i < 4; ++i) {
      auto info = c->Get("ns", "k" + std::to_string(i), {buf.data(), buf.size()});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      ASSERT_EQ(0, std::memcmp(buf.data(), Payload(i, sizes[i]).data(), sizes[i]));
    }
    {
      auto view = c->Acquire("ns", "k2");  // read in place under the lease
      ASSERT_TRUE(view.ok());
      EXPECT_EQ(view->size(), sizes[2]);
      EXPECT_EQ(0, std::memcmp(view->data(), Payload(2, sizes[2]).data(), sizes[2]));
    }  // released here
    EXPECT_TRUE(c->Get("ns", "nope", {buf.data(), buf.size()}).status().IsNotFound());
    ASSERT_TRUE(c->Stats().ok());
  }
}

// A shared-memory server over `dir` holding entries k0..k{n-1} (kMiB + i bytes, Payload i),
// restarted after they were put, so that its pool is empty and they are on disk only.
std::unique_ptr<ServerProcess> ServeFromDiskOnly(const std::string& dir, int n) {
  auto server = std::make_unique<ServerProcess>(dir, "", 64 * kMiB, 0, /*shm=*/true);
  const uint16_t port = server->port();
  {
    auto producer = ConnectOrDie(server->uri(), TcpOnly());
    for (int i = 0; i < n; ++i) {
      Status st =
          producer->Put("ns", "k" + std::to_string(i), U8(kMiB + i), Span(Payload(i, kMiB + i)));
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
  }
  server->Stop();  // a clean close; reopened with an empty pool
  return std::make_unique<ServerProcess>(dir, "", 64 * kMiB, port, true);
}

// GET_SHM_STREAM, spoken raw: the pool hit is told whole before anything else; each disk
// entry's pieces are told in order as they land (in as many frames as the disk's
// completions make), at the pool offset its lease then has,
// until every byte is told; the reply marks those leases kLeaseStreamed, and the bytes told
// are the entry's. An absent key answers for itself.
TEST(NetShm, GetShmStreamTellsOfEachPieceAsItLandsThenLeasesIt) {
  testing::TempDir dir;
  const uint64_t sizes[] = {12 * kMiB + 5, kMiB, 5 * kMiB + 3};
  auto first = std::make_unique<ServerProcess>(dir.path(), "", 64 * kMiB, 0, /*shm=*/true);
  const uint16_t port = first->port();
  {
    auto producer = ConnectOrDie(first->uri(), TcpOnly());
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(
          producer->Put("ns", "k" + std::to_string(i), U8(sizes[i]), Span(Payload(i, sizes[i])))
              .ok());
  }
  first->Stop();  // reopened with an empty pool: every entry on disk only
  ServerProcess server(dir.path(), "", 64 * kMiB, port, true);
  FrameStream s;
  HelloInfo info;
  UniqueFd pool_fd;
  Status hello = testing::RawHello(server.shm_uri().substr(5), &s, &info, &pool_fd);
  ASSERT_TRUE(hello.ok()) << hello.ToString();
  ASSERT_EQ(info.features & kFeatureStreamedLeases, kFeatureStreamedLeases);
  void* map = mmap(nullptr, info.pool_bytes, PROT_READ, MAP_SHARED, pool_fd.get(), 0);
  pool_fd.reset();
  ASSERT_NE(map, MAP_FAILED);
  const auto* pool = static_cast<const uint8_t*>(map);
  ASSERT_TRUE(s.Send(Op::kGetShm, KeyBody("ns", "k1")).ok());  // k1 back in the pool
  ASSERT_TRUE(s.ReadReply(Op::kGetShmOk).ok());
  ASSERT_TRUE(s.Send(Op::kGetShmStream, KeysBody("ns", {"k0", "k1", "absent", "k2"})).ok());
  struct Told {
    uint64_t offset = UINT64_MAX, landed = 0;
    int frames = 0;
  };
  std::vector<Told> told(4);
  std::vector<uint32_t> order;
  for (;;) {
    bool landed = false;
    auto body = s.ReadReplyOrNote(Op::kGetShmManyOk, Op::kGetShmLanded, &landed);
    ASSERT_TRUE(body.ok()) << body.status().ToString();
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    if (!landed) {
      uint32_t n;
      ASSERT_TRUE(r.U32(&n));
      ASSERT_EQ(n, 4u);
      for (uint32_t i = 0; i < n; ++i) {
        uint8_t ok;
        ASSERT_TRUE(r.U8(&ok));
        if (i == 2) {
          EXPECT_EQ(ok, 0);
          EXPECT_TRUE(ParseErrorBody(&r).IsNotFound());
          EXPECT_EQ(told[i].frames, 0);
          continue;
        }
        uint64_t id, offset;
        EntryInfo e;
        ASSERT_TRUE(r.U64(&id) && r.U64(&offset) && ReadInfo(&r, &e));
        const int k = i == 3 ? 2 : static_cast<int>(i);
        EXPECT_EQ(ok, kLeaseStreamed) << i;
        EXPECT_EQ(offset, told[i].offset) << i;
        EXPECT_EQ(e.bytes, sizes[k]);
        EXPECT_EQ(told[i].landed, sizes[k]) << i;
        EXPECT_EQ(0, std::memcmp(pool + offset, Payload(k, sizes[k]).data(), sizes[k])) << i;
      }
      break;
    }
    uint32_t key;
    uint64_t offset, n;
    ASSERT_TRUE(r.U32(&key) && r.U64(&offset) && r.U64(&n));
    ASSERT_LT(key, 4u);
    Told& t = told[key];
    if (t.frames++ > 0) {
      EXPECT_EQ(offset, t.offset) << key;
    }
    EXPECT_GT(n, t.landed) << key << ": told in order, each frame more";
    t = {offset, n, t.frames};
    order.push_back(key);
  }
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(order[0], 1u) << "the pool hit is told first";
  EXPECT_EQ(told[1].frames, 1);
  munmap(map, info.pool_bytes);
}

// AcquireMany over shared memory: one GET_SHM_MANY leases a pool hit and the entries the
// server read back from disk in one batch; an absent key and a bad one answer for themselves.
TEST(NetShm, AcquireManyLeasesAStepInOneRequest) {
  testing::TempDir dir;
  auto server = ServeFromDiskOnly(dir.path(), 3);
  auto c = ConnectOrDie(server->shm_uri());
  ASSERT_STREQ(c->transport(), "shm");
  ASSERT_TRUE(c->Acquire("ns", "k1").ok());  // k1 back in the pool
  auto got = c->AcquireMany("ns", {"k0", "k1", "absent", "", "k2"});
  ASSERT_EQ(got.size(), 5u);
  for (int i : {0, 1, 4}) {
    const int k = i == 4 ? 2 : i;
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    ASSERT_EQ(got[i]->size(), kMiB + k);
    EXPECT_EQ(0, std::memcmp(got[i]->data(), Payload(k, kMiB + k).data(), kMiB + k)) << i;
  }
  EXPECT_TRUE(got[2].status().IsNotFound()) << got[2].status().ToString();
  EXPECT_TRUE(got[3].status().IsInvalidArgument()) << got[3].status().ToString();
  auto st = c->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->pool().promotions, 3u);  // k1's Acquire, then k0 and k2 in one batch
  EXPECT_EQ(st->client_leases, 3u);
  got.clear();  // RELEASE has no reply: the next request's answer comes after them
  EXPECT_EQ(c->Stats()->client_leases, 0u);
}

// A lease over shared memory outlives a reconnect: the server restarts while the reader holds
// a lease, the reader's next request reconnects, and the lease's bytes are still readable
// (its pool mapping stays until the last lease from it is gone) and still the entry's. Its
// release then never goes out on the new connection: its own lease, which may have the same id,
// stays held (net/lease_generation.h).
TEST(NetShm, ALeaseOutlivesAReconnectToARestartedServer) {
  testing::TempDir dir;
  auto server = std::make_unique<ServerProcess>(dir.path(), "", 64 * kMiB, 0, true);
  auto c = ConnectOrDie(server->shm_uri());
  ASSERT_STREQ(c->transport(), "shm");
  const auto p = Payload(9, 3 * kMiB);
  ASSERT_TRUE(c->Put("ns", "k", U8(p.size()), Span(p)).ok());
  auto lease = c->Acquire("ns", "k");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const uint16_t port = server->port();
  server->Stop();
  server = std::make_unique<ServerProcess>(dir.path(), "", 64 * kMiB, port, true);
  // Another entry first, so that it takes the new pool's first block: were the lease's
  // mapping given back, the new one could lie at its address and show these bytes.
  const auto q = Payload(10, 3 * kMiB);
  ASSERT_TRUE(c->Put("ns", "other", U8(q.size()), Span(q)).ok());  // reconnects
  auto fresh = c->Acquire("ns", "other");  // the new connection's first lease
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  ASSERT_EQ(lease->size(), p.size());
  EXPECT_EQ(0, std::memcmp(lease->data(), p.data(), p.size()));
  lease = Status::NotFound("released");  // its RELEASE goes to the dead server only
  EXPECT_EQ(c->Stats()->client_leases, 1u) << "the new connection's lease was released";
  EXPECT_EQ(0, std::memcmp(fresh->data(), q.data(), q.size()));
  std::vector<uint8_t> buf(p.size());
  auto got = c->Get("ns", "k", {buf.data(), buf.size()});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(buf == p);
}

// A lease held across a reconnect to the same, still-running server (a request timed out
// while the server was stalled) keeps its entry: the old control socket stays open while the
// lease is held, so the server keeps the lease. Erasing the entry and filling the pool over
// the new connection then cannot reuse its block (before, the server released the lease when
// the client closed the old connection, and the block went to the next put). Releasing it
// goes out on the old socket, and the server's lease count comes back to zero.
TEST(NetShm, ALeaseOutlivesAReconnectToTheSameRunningServer) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 64 * kMiB, 0, true);
  ClientOptions opt;
  opt.timeout = std::chrono::milliseconds(300);
  auto c = ConnectOrDie(server.shm_uri(), opt);
  ASSERT_STREQ(c->transport(), "shm");
  const auto p = Payload(9, 3 * kMiB);
  ASSERT_TRUE(c->Put("ns", "k", U8(p.size()), Span(p)).ok());
  auto lease = c->Acquire("ns", "k");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  server.Kill(SIGSTOP);
  auto stalled = c->Stats();  // times out, and so does its one retry's HELLO
  server.Continue();
  ASSERT_FALSE(stalled.ok());
  EXPECT_TRUE(stalled.status().IsUnavailable()) << stalled.status().ToString();
  ASSERT_TRUE(c->Erase("ns", "k").ok());  // reconnects
  for (int i = 0; i < 30; ++i) {          // 90 MiB through a 64 MiB pool
    const auto q = Payload(100 + i, 3 * kMiB);
    ASSERT_TRUE(c->Put("ns", "fill" + std::to_string(i), U8(q.size()), Span(q)).ok()) << i;
  }
  ASSERT_EQ(lease->size(), p.size());
  EXPECT_EQ(0, std::memcmp(lease->data(), p.data(), p.size())) << "the leased block was reused";
  lease = Status::NotFound("released");  // RELEASE on the old socket
  uint64_t held = 1;
  for (int i = 0; i < 200 && held > 0; ++i) {  // the old connection is not ordered with this one
    auto st = c->Stats();
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    held = st->client_leases;
    if (held > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(held, 0u);
}

// A unix-socket proxy in front of a real server that relays every frame, and the pool's
// descriptor HELLO_OK carries, and counts the GET_SHM_MANY and ERASE_MANY requests. With
// `older`, it is a server from before both, as a new client meets one during a rolling
// upgrade: it answers those opcodes as an older server answers one it does not know, with an
// error, then a closed connection. One connection at a time.
// What a FrameProxy makes of the server behind it: itself, one of the release before
// GET_SHM_STREAM and PREFETCH (its HELLO_OK offers neither), or an older one still, which
// answers GET_SHM_MANY, GET_SHM_STREAM and ERASE_MANY "unknown opcode" and hangs up.
enum class ProxyAs { kCurrent, kWithoutStreams, kOlder };

class FrameProxy {
 public:
  FrameProxy(std::string server_sock, const std::string& path, ProxyAs as)
      : server_sock_(std::move(server_sock)),
        older_(as == ProxyAs::kOlder),
        no_streams_(as != ProxyAs::kCurrent) {
    auto l = ListenUnix(path);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (l.ok()) listen_ = std::move(l).value();
    thread_ = std::thread([this] { Serve(); });
  }
  ~FrameProxy() {
    shutdown(listen_.get(), SHUT_RDWR);  // wakes accept
    thread_.join();
  }
  int lease_batches() const { return lease_batches_; }  // GET_SHM_MANY requests seen
  int streams() const { return streams_; }              // GET_SHM_STREAM requests seen
  int erase_batches() const { return erase_batches_; }  // ERASE_MANY requests seen

 private:
  void Serve() {
    for (;;) {
      UniqueFd client(accept(listen_.get(), nullptr, nullptr));
      if (!client.valid()) return;
      auto server = ConnectUnix(server_sock_, std::chrono::milliseconds(2000));
      if (!server.ok()) return;
      std::thread down([&] { Down(server->get(), client.get(), no_streams_); });
      Up(client.get(), server->get());
      shutdown(client.get(), SHUT_RDWR);
      shutdown(server->get(), SHUT_RDWR);
      down.join();
    }
  }
  // Client to server, frame by frame, until the client leaves or asks GET_SHM_MANY.
  void Up(int from, int to) {
    for (;;) {
      uint8_t h[kHeaderBytes];
      if (!RecvAll(from, h, kHeaderBytes, "client").ok()) return;
      auto d = DecodeHeader(h);
      if (!d.ok()) return;
      std::string body(d->body_len, '\0');
      if (!RecvAll(from, body.data(), body.size(), "client").ok()) return;
      if (d->op == Op::kGetShmMany) ++lease_batches_;
      if (d->op == Op::kGetShmStream) ++streams_;
      if (d->op == Op::kEraseMany) ++erase_batches_;
      const bool batch =
          d->op == Op::kGetShmMany || d->op == Op::kGetShmStream || d->op == Op::kEraseMany;
      if (batch && older_) {  // no reply is pending: the client waits for it
        const std::string err = ErrorBody(
            Status::InvalidArgument("unknown opcode " + std::to_string(static_cast<int>(d->op))));
        EncodeHeader({kVersion, Op::kError, d->request_id, err.size()}, h);
        iovec reply[2] = {{h, kHeaderBytes}, {const_cast<char*>(err.data()), err.size()}};
        (void)SendAll(from, reply, 2, "client");
        return;
      }
      iovec iov[2] = {{h, kHeaderBytes}, {body.data(), body.size()}};
      if (!SendAll(to, iov, 2, "server").ok()) return;
    }
  }
  // Server to client, bytes as they come, with a passed descriptor passed on; without
  // streams, HELLO_OK (the first frame, which comes whole with the pool's descriptor) offers
  // no kFeatureStreamedLeases.
  static void Down(int from, int to, bool no_streams) {
    std::vector<uint8_t> buf(1 << 16);
    for (bool first = true;; first = false) {
      iovec iov{buf.data(), buf.size()};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = recvmsg(from, &msg, 0);
      if (n <= 0) return;
      int fd = -1;
      if (cmsghdr* c = CMSG_FIRSTHDR(&msg); c && c->cmsg_type == SCM_RIGHTS)
        std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      iov.iov_len = static_cast<size_t>(n);
      if (first && no_streams) {
        auto h = DecodeHeader(buf.data());
        HelloInfo hello;
        BodyReader r(buf.data() + kHeaderBytes, static_cast<size_t>(n) - kHeaderBytes);
        ASSERT_TRUE(h.ok() && h->op == Op::kHelloOk && ParseHelloBody(&r, &hello));
        hello.features &= ~(kFeatureStreamedLeases | kFeaturePrefetch);
        const std::string body = HelloBody(hello);
        ASSERT_EQ(body.size(), h->body_len);
        std::memcpy(buf.data() + kHeaderBytes, body.data(), body.size());
      }
      Status st = fd >= 0 ? SendWithFd(to, &iov, 1, fd, "client") : SendAll(to, &iov, 1, "client");
      if (fd >= 0) close(fd);
      if (!st.ok()) return;
    }
  }

  std::string server_sock_;
  const bool older_, no_streams_;
  UniqueFd listen_;
  std::atomic<int> lease_batches_{0};
  std::atomic<int> streams_{0};
  std::atomic<int> erase_batches_{0};
  std::thread thread_;
};

// Three entries on disk only (ServeFromDiskOnly) behind a FrameProxy speaking as `as`, and a
// same-host client through it. The client goes first, before the proxy and the server.
struct ProxiedDiskOnly {
  explicit ProxiedDiskOnly(ProxyAs as)
      : server(ServeFromDiskOnly(dir.path(), 3)),
        proxy(std::make_unique<FrameProxy>(server->shm_uri().substr(5), dir.path() + "/proxy.sock",
                                           as)),
        c(ConnectOrDie("unix:" + dir.path() + "/proxy.sock")) {}
  testing::TempDir dir;
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<FrameProxy> proxy;
  std::unique_ptr<Client> c;
};

// GetMany over shared memory copies out of leases: the entries on disk only are read back in
// one batch, each copied into its buffer, and every lease is released. Against this server,
// in one GET_SHM_STREAM (the pool hit and each disk read's pieces copied out as the server
// tells of them); against one without it, as a GET_SHM_MANY of the pool's entries and one of
// the rest, both in flight.
void GetManyCopiesAStepOutOfLeases(ProxyAs as) {
  ProxiedDiskOnly p(as);
  FrameProxy& proxy = *p.proxy;
  auto& c = p.c;
  ASSERT_STREQ(c->transport(), "shm");
  std::vector<std::vector<uint8_t>> bufs(4, std::vector<uint8_t>(2 * kMiB));
  bufs[3].resize(kMiB);                                                    // too small for k2
  ASSERT_TRUE(c->Get("ns", "k1", {bufs[2].data(), bufs[2].size()}).ok());  // k1 in the pool
  std::vector<std::span<uint8_t>> dsts;
  for (auto& b : bufs) {
    std::fill(b.begin(), b.end(), 0xEE);
    dsts.push_back({b.data(), b.size()});
  }
  auto got = c->GetMany("ns", {"k0", "absent", "k1", "k2"}, dsts);
  ASSERT_EQ(got.size(), 4u);
  for (int i : {0, 2}) {
    const int k = i / 2;
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    ASSERT_EQ(got[i]->bytes, kMiB + k);
    EXPECT_EQ(0, std::memcmp(bufs[i].data(), Payload(k, kMiB + k).data(), kMiB + k)) << i;
    EXPECT_EQ(bufs[i][kMiB + k], 0xEE) << i << ": nothing written past the entry";
  }
  EXPECT_TRUE(got[1].status().IsNotFound()) << got[1].status().ToString();
  EXPECT_TRUE(got[3].status().IsInvalidArgument()) << got[3].status().ToString();
  EXPECT_NE(got[3].status().message().find("destination buffer"), std::string::npos);
  auto st = c->Stats();
  ASSERT_TRUE(st.ok());
  // k1 by its Get (itself one GET_SHM_STREAM); then k0 and k2 read back in one batch.
  EXPECT_EQ(st->pool().promotions, 3u);
  EXPECT_EQ(proxy.streams(), as == ProxyAs::kCurrent ? 2 : 0);
  EXPECT_EQ(proxy.lease_batches(), as == ProxyAs::kCurrent ? 0 : 2);
  EXPECT_EQ(st->client_leases, 0u);  // each released once copied
  c.reset();                         // before the proxy: its connection ends first
}

TEST(NetShm, GetManyCopiesAStepOutOfOneStreamOfLeases) {
  GetManyCopiesAStepOutOfLeases(ProxyAs::kCurrent);
}

TEST(NetShm, GetManyCopiesAStepOutOfTwoBatchesOfLeasesFromAServerWithoutStreams) {
  GetManyCopiesAStepOutOfLeases(ProxyAs::kWithoutStreams);
}

// A same-host Get is one GET_SHM_STREAM: a disk entry's pieces are copied out as they land,
// byte for byte and nothing past the entry; a buffer too small and an absent key answer as
// before, and nothing stays leased. From a server without streams, one GET_SHM each.
void GetsOfDiskEntries(ProxyAs as) {
  ProxiedDiskOnly p(as);
  auto& c = p.c;
  std::vector<uint8_t> buf(2 * kMiB, 0xEE);
  auto got = c->Get("ns", "k0", {buf.data(), buf.size()});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->bytes, kMiB);
  EXPECT_EQ(0, std::memcmp(buf.data(), Payload(0, kMiB).data(), kMiB));
  EXPECT_EQ(buf[kMiB], 0xEE) << "nothing written past the entry";
  auto small = c->Get("ns", "k2", {buf.data(), kMiB});  // k2 is kMiB + 2
  EXPECT_TRUE(small.status().IsInvalidArgument()) << small.status().ToString();
  EXPECT_TRUE(c->Get("ns", "absent", {buf.data(), buf.size()}).status().IsNotFound());
  got = c->Get("ns", "k2", {buf.data(), buf.size()});  // again, now from the pool
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(0, std::memcmp(buf.data(), Payload(2, kMiB + 2).data(), kMiB + 2));
  EXPECT_EQ(p.proxy->streams(), as == ProxyAs::kCurrent ? 4 : 0);
  EXPECT_EQ(c->Stats()->client_leases, 0u);
}

TEST(NetShm, AGetOfADiskEntryIsOneStreamCopiedOutAsItLands) {
  GetsOfDiskEntries(ProxyAs::kCurrent);
}

TEST(NetShm, AGetFromAServerWithoutStreamsLeasesAndCopies) {
  GetsOfDiskEntries(ProxyAs::kWithoutStreams);
}

// A same-host client's AcquireMany with a watch (Cache::LandingWatch, what GetManyToDevice
// copies to the GPU from): the server's GET_SHM_LANDED frames are told as they come, in the
// caller's key numbers (a bad key is answered here, shifting nothing), pieces in order at the
// place the lease then has, until the leases marked streamed are told whole; batch_end comes
// before each wait, so nothing told is left after the last one. A server without streams tells
// nothing: every lease is to be read whole.
void WatchedAcquireMany(ProxyAs as) {
  ProxiedDiskOnly p(as);
  FrameProxy& proxy = *p.proxy;
  auto& c = p.c;
  ASSERT_STREQ(c->transport(), "shm");
  ASSERT_TRUE(c->Acquire("ns", "k1").ok());  // k1 back in the pool
  const std::vector<std::string> keys{"k0", "", "k1", "absent", "k2"};
  std::vector<std::vector<uint8_t>> seen(keys.size());
  std::vector<const uint8_t*> where(keys.size(), nullptr);
  int batch_ends = 0, out_of_order = 0, told_since_batch_end = 0;
  Cache::LandingWatch watch;
  watch.landed = [&](size_t k, const uint8_t* at, uint64_t landed) {
    ASSERT_LT(k, keys.size());
    if (where[k] != at) seen[k].clear();  // read again elsewhere: from the start
    where[k] = at;
    if (landed < seen[k].size()) ++out_of_order;
    ++told_since_batch_end;
    seen[k].insert(seen[k].end(), at + seen[k].size(),
                   at + std::max<uint64_t>(landed, seen[k].size()));
  };
  watch.batch_end = [&] {
    ++batch_ends;
    told_since_batch_end = 0;
  };
  auto got = c->AcquireMany("ns", keys, &watch);
  ASSERT_EQ(got.size(), keys.size());
  ASSERT_EQ(watch.streamed.size(), keys.size());
  for (size_t i : {0, 2, 4}) {
    const int k = static_cast<int>(i / 2);
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    EXPECT_EQ(0, std::memcmp(got[i]->data(), Payload(k, kMiB + k).data(), kMiB + k)) << i;
    if (as != ProxyAs::kCurrent) continue;
    EXPECT_TRUE(watch.streamed[i]) << i;
    EXPECT_EQ(where[i], got[i]->data()) << i << ": told where its lease lies";
    EXPECT_TRUE(seen[i] == Payload(k, kMiB + k)) << i << ": the bytes told are the entry's";
  }
  EXPECT_TRUE(got[1].status().IsInvalidArgument()) << got[1].status().ToString();
  EXPECT_TRUE(got[3].status().IsNotFound()) << got[3].status().ToString();
  EXPECT_FALSE(watch.streamed[1] || watch.streamed[3]);
  EXPECT_TRUE(seen[1].empty() && seen[3].empty());
  EXPECT_EQ(out_of_order, 0);
  if (as == ProxyAs::kCurrent) {
    EXPECT_GE(batch_ends, 1);
    EXPECT_EQ(told_since_batch_end, 0) << "told after the last batch_end";
  } else {
    EXPECT_EQ(std::count(watch.streamed.begin(), watch.streamed.end(), true), 0);
    EXPECT_TRUE(seen[0].empty() && seen[2].empty() && seen[4].empty());
  }
  EXPECT_EQ(proxy.streams(), as == ProxyAs::kCurrent ? 1 : 0);
  got.clear();
  EXPECT_EQ(c->Stats()->client_leases, 0u);
  c.reset();  // before the proxy: its connection ends first
}

TEST(NetShm, AWatchedAcquireManyTellsEachPieceTheServerReadsAndWhichLeasesHoldThem) {
  WatchedAcquireMany(ProxyAs::kCurrent);
}

TEST(NetShm, AWatchedAcquireManyFromAServerWithoutStreamsTellsNothing) {
  WatchedAcquireMany(ProxyAs::kWithoutStreams);
}

// PREFETCH, over TCP and the same host: queued and answered at once, and the server's
// prefetcher reads the disk-only entries into its pool (an absent key is skipped). A bad key
// is refused before anything is sent. A server of the release before it offers no PREFETCH:
// the hint is not sent, and the answer says so.
TEST(NetShm, APrefetchIsQueuedAndTheServerReadsTheEntriesIntoItsPool) {
  testing::TempDir dir;
  auto server = ServeFromDiskOnly(dir.path(), 5);
  auto in_pool = [](Client* c, const char* key) {
    auto e = c->Lookup("ns", key);
    return e.ok() && e->tiers.has(Tier::kPool);
  };
  int k = 0;
  for (const std::string& uri : {server->uri(), server->shm_uri()}) {
    auto c = ConnectOrDie(uri);
    const std::string a = "k" + std::to_string(k++), b = "k" + std::to_string(k++);
    auto queued = c->Prefetch("ns", {a, "absent", b});
    ASSERT_TRUE(queued.ok()) << queued.status().ToString();
    EXPECT_TRUE(*queued);
    for (int i = 0; i < 500 && !(in_pool(c.get(), a.c_str()) && in_pool(c.get(), b.c_str())); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(in_pool(c.get(), a.c_str())) << uri;
    EXPECT_TRUE(in_pool(c.get(), b.c_str())) << uri;
    EXPECT_TRUE(c->Prefetch("ns", {"k4", ""}).status().IsInvalidArgument());
  }
  FrameProxy before(server->shm_uri().substr(5), dir.path() + "/before.sock",
                    ProxyAs::kWithoutStreams);
  {
    auto c = ConnectOrDie("unix:" + dir.path() + "/before.sock");
    auto queued = c->Prefetch("ns", {"k4"});
    ASSERT_TRUE(queued.ok()) << queued.status().ToString();
    EXPECT_FALSE(*queued);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(in_pool(c.get(), "k4"));
  }
}

// A batch that would pass the reader's leased-bytes share is not refused as a whole: the
// keys the share refused (Busy) are asked again alone once the batch's leases are released.
TEST(NetShm, GetManyWithinTheLeaseShareAsksRefusedKeysAgainAlone) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 32 * kMiB, 0, /*shm=*/true);  // a 16 MiB share
  auto writer = ConnectOrDie(server.uri(), TcpOnly());
  const size_t sizes[] = {6 * kMiB, 6 * kMiB, 3 * kMiB, 3 * kMiB};
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(
        writer->Put("ns", "k" + std::to_string(i), U8(sizes[i]), Span(Payload(i, sizes[i]))).ok());
  auto c = ConnectOrDie(server.shm_uri());
  auto a = c->Acquire("ns", "k0");
  auto b = c->Acquire("ns", "k1");  // 12 MiB held
  ASSERT_TRUE(a.ok() && b.ok());
  {
    auto direct = c->AcquireMany("ns", {"k2", "k3"});  // 18 MiB: k3 is refused
    ASSERT_TRUE(direct[0].ok()) << direct[0].status().ToString();
    EXPECT_TRUE(direct[1].status().IsBusy()) << direct[1].status().ToString();
  }
  std::vector<uint8_t> b2(3 * kMiB), b3(3 * kMiB);  // one batch: 6 MiB, within a quarter
  auto got = c->GetMany("ns", {"k2", "k3"}, {{b2.data(), b2.size()}, {b3.data(), b3.size()}});
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
  EXPECT_EQ(0, std::memcmp(b2.data(), Payload(2, sizes[2]).data(), sizes[2]));
  EXPECT_EQ(0, std::memcmp(b3.data(), Payload(3, sizes[3]).data(), sizes[3]));
  EXPECT_EQ(c->Stats()->client_leases, 2u);  // a and b only
}

// A new client and an older server: the first GET_SHM_MANY is refused as an unknown opcode,
// and from then on the client leases key by key (reconnected), so GetMany -- refused with a
// second request already in flight -- and AcquireMany still answer every key.
TEST(NetShm, AnOlderServerWithoutLeaseBatchesIsReadKeyByKey) {
  testing::TempDir dir;
  auto server = ServeFromDiskOnly(dir.path(), 2);
  FrameProxy older(server->shm_uri().substr(5), dir.path() + "/older.sock", ProxyAs::kOlder);
  auto c = ConnectOrDie("unix:" + dir.path() + "/older.sock");
  ASSERT_STREQ(c->transport(), "shm");
  std::vector<uint8_t> b0(2 * kMiB), b1(2 * kMiB), b2(2 * kMiB);
  ASSERT_TRUE(c->Get("ns", "k0", {b0.data(), b0.size()}).ok());  // GET_SHM: k0 in the pool
  auto got = c->GetMany("ns", {"k0", "k1", "absent"},
                        {{b0.data(), b0.size()}, {b1.data(), b1.size()}, {b2.data(), b2.size()}});
  EXPECT_EQ(older.lease_batches(), 1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
  EXPECT_EQ(0, std::memcmp(b0.data(), Payload(0, kMiB).data(), kMiB));
  EXPECT_EQ(0, std::memcmp(b1.data(), Payload(1, kMiB + 1).data(), kMiB + 1));
  EXPECT_TRUE(got[2].status().IsNotFound()) << got[2].status().ToString();
  {
    auto leases = c->AcquireMany("ns", {"k0", "k1", "absent"});
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(leases[i].ok()) << i << ": " << leases[i].status().ToString();
      EXPECT_EQ(0, std::memcmp(leases[i]->data(), Payload(i, kMiB + i).data(), kMiB + i));
    }
    EXPECT_TRUE(leases[2].status().IsNotFound()) << leases[2].status().ToString();
  }
  EXPECT_EQ(older.lease_batches(), 1);  // not asked again
  c.reset();                            // before the proxy: its connection ends first
}

using NsKeys = std::vector<std::pair<std::string, std::string>>;

// Entries of the pool, the disk, two namespaces, absent and listed twice, erased in one
// ERASE_MANY (one durable tombstone write on the server): each answered, the rest kept, and
// still erased after the server restarts. A bad key erases nothing and sends nothing; more
// than kMaxBatch keys go as several requests.
TEST(NetShm, EraseManyErasesABatchInOneRequestDurably) {
  testing::TempDir dir;
  auto server = ServeFromDiskOnly(dir.path(), 3);  // k0..k2 on disk only
  const uint16_t port = server->port();
  {
    FrameProxy proxy(server->shm_uri().substr(5), dir.path() + "/proxy.sock", ProxyAs::kCurrent);
    auto c = ConnectOrDie("unix:" + dir.path() + "/proxy.sock");
    ASSERT_TRUE(c->Put("ns", "k3", U8(kMiB), Span(Payload(3, kMiB))).ok());  // in the pool
    ASSERT_TRUE(c->Put("other", "k1", U8(kMiB), Span(Payload(9, kMiB))).ok());
    std::vector<bool> erased;
    ASSERT_TRUE(
        c->EraseMany(
             NsKeys{{"ns", "k0"}, {"ns", "absent"}, {"ns", "k3"}, {"other", "k1"}, {"ns", "k0"}},
             &erased)
            .ok());
    EXPECT_EQ(erased, (std::vector<bool>{true, false, true, true, false}));
    EXPECT_EQ(proxy.erase_batches(), 1);
    Status bad = c->EraseMany(NsKeys{{"ns", "k1"}, {"ns", ""}}, &erased);
    EXPECT_TRUE(bad.IsInvalidArgument()) << bad.ToString();
    EXPECT_EQ(proxy.erase_batches(), 1);  // refused before anything was sent
    NsKeys many;
    for (int i = 0; i < 1500; ++i) many.emplace_back("ns", "absent" + std::to_string(i));
    many.emplace_back("ns", "k2");
    ASSERT_TRUE(c->EraseMany(many, &erased).ok());
    EXPECT_EQ(proxy.erase_batches(), 3);  // 1024 + 477 keys
    EXPECT_EQ(std::count(erased.begin(), erased.end(), true), 1);
    EXPECT_TRUE(erased.back());
    c.reset();  // before the proxy
  }
  server->Stop();
  ServerProcess again(dir.path(), "", 64 * kMiB, port, true);
  auto c = ConnectOrDie(again.uri(), TcpOnly());
  for (const char* k : {"k0", "k2", "k3"})
    EXPECT_TRUE(c->Lookup("ns", k).status().IsNotFound()) << k;
  EXPECT_TRUE(c->Lookup("other", "k1").status().IsNotFound());
  ASSERT_TRUE(c->Lookup("ns", "k1").ok());  // the bad batch's good key
  std::vector<uint8_t> b(kMiB + 1);
  ASSERT_TRUE(c->Get("ns", "k1", {b.data(), b.size()}).ok());
  EXPECT_EQ(0, std::memcmp(b.data(), Payload(1, kMiB + 1).data(), kMiB + 1));
}

// A server without a device tier says so, and the connection stays: the leases held over it
// stay held (the client took the old answer, Unavailable, for a broken connection and
// reconnected, which released them all: a reader's pins vanished at its first device get).
TEST(NetShm, AskingAServerWithoutADeviceTierForItKeepsTheLeasesHeld) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 64 * kMiB, 0, /*shm=*/true);
  auto c = ConnectOrDie(server.shm_uri());
  ASSERT_TRUE(c->Put("ns", "k", U8(kMiB), Span(Payload(5, kMiB))).ok());
  auto lease = c->Acquire("ns", "k");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  auto dev = c->AcquireOnDevice("ns", "k");
  ASSERT_FALSE(dev.ok());
  EXPECT_TRUE(dev.status().IsInvalidArgument()) << dev.status().ToString();
  EXPECT_NE(dev.status().message().find("no device pool to share"), std::string::npos);
  EXPECT_FALSE(c->capabilities().device_leases) << "told once, the client asks no more";
  auto stats = c->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->client_leases, 1u);
  EXPECT_EQ(0, std::memcmp(lease->data(), Payload(5, kMiB).data(), kMiB));
}

// An older server refuses ERASE_MANY as an unknown opcode: that batch and every later one go
// key by key (ERASE), with the same answers.
TEST(NetShm, AnOlderServerWithoutEraseBatchesIsErasedKeyByKey) {
  testing::TempDir dir;
  auto server = ServeFromDiskOnly(dir.path(), 3);
  FrameProxy older(server->shm_uri().substr(5), dir.path() + "/older.sock", ProxyAs::kOlder);
  auto c = ConnectOrDie("unix:" + dir.path() + "/older.sock");
  std::vector<bool> erased;
  ASSERT_TRUE(c->EraseMany(NsKeys{{"ns", "k0"}, {"ns", "absent"}}, &erased).ok());
  EXPECT_EQ(erased, (std::vector<bool>{true, false}));
  ASSERT_TRUE(c->EraseMany(NsKeys{{"ns", "k1"}}, &erased).ok());
  EXPECT_EQ(erased, (std::vector<bool>{true}));
  EXPECT_EQ(older.erase_batches(), 1);  // not asked again
  EXPECT_TRUE(c->Lookup("ns", "k0").status().IsNotFound());
  EXPECT_TRUE(c->Lookup("ns", "k1").status().IsNotFound());
  EXPECT_TRUE(c->Lookup("ns", "k2").ok());
  c.reset();
}

// A mapping shows the whole pool, so only a principal whose read grant covers every
// namespace gets the pool's memfd (and in-place reads); one granted write alone, or one
// namespace, is served by copy over the same socket, and a raw in-place read is refused.
TEST(NetShm, OnlyAPrincipalThatMayReadEveryNamespaceMapsThePool) {
  testing::TempDir dir, etc;
  const std::string acl = etc.path() + "/acl";
  std::ofstream(acl) << "all secret=" << SecretHash("all-secret") << " ns=* rights=read,write\n"
                     << "writer secret=" << SecretHash("w-secret") << " ns=loc* rights=write\n"
                     << "one secret=" << SecretHash("one-secret") << " ns=loc* rights=all\n";
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, /*shm=*/true, 30000, 30000,
                       [acl](ServerOptions* so) { so->acl_file = acl; });
  auto as = [&](const std::string& secret, TransportKind t = TransportKind::kAuto) {
    ClientOptions o;
    o.token = secret;
    o.transport = t;
    o.retries = 0;
    return Client::Connect(server.shm_uri(), o);
  };
  auto all = as("all-secret");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_STREQ((*all)->transport(), "shm");
  ASSERT_TRUE((*all)->Put("other", "secret-entry", U8(kMiB), Span(Payload(9, kMiB))).ok());
  for (const char* secret : {"w-secret", "one-secret"}) {
    SCOPED_TRACE(secret);
    auto c = as(secret);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_STREQ((*c)->transport(), "tcp");
    EXPECT_TRUE((*c)->shared_pool().empty());
    auto v = Payload(secret[0], 64 * 1024);
    ASSERT_TRUE((*c)->Put("local", secret, U8(v.size()), Span(v)).ok());
    std::vector<uint8_t> out(v.size());
    auto got = (*c)->Get("local", secret, {out.data(), out.size()});
    EXPECT_EQ(got.ok(), std::string(secret) == "one-secret") << got.status().ToString();
    if (got.ok()) {
      EXPECT_EQ(out, v);
    }
    auto forced = as(secret, TransportKind::kShm);
    ASSERT_FALSE(forced.ok());
    EXPECT_TRUE(forced.status().IsPermissionDenied()) << forced.status().ToString();
    // Raw: HELLO passes no memfd, and GET_SHM and DEVICE_POOL are refused.
    FrameStream s;
    HelloInfo info;
    UniqueFd pool;
    ASSERT_TRUE(testing::RawHello(dir.path() + "/serve.sock", &s, &info, &pool, secret).ok());
    EXPECT_FALSE(pool.valid());
    for (Op op : {Op::kGetShm, Op::kDevicePool}) {
      BodyWriter key;
      if (op == Op::kGetShm) key.Str("local"), key.Str(secret);
      ASSERT_TRUE(s.Send(op, key.data()).ok());
      auto r = s.ReadReply(op == Op::kGetShm ? Op::kGetShmOk : Op::kDevicePoolOk, nullptr);
      ASSERT_FALSE(r.ok());
      EXPECT_TRUE(r.status().IsPermissionDenied()) << r.status().ToString();
    }
  }
}

// A hostile same-host reader: it takes the pool descriptor from HELLO and tries to write or
// resize the pool. Every attempt fails and other clients keep getting the stored bytes.
TEST(NetShm, SameHostReaderCannotWriteOrResizeThePool) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, /*shm=*/true);
  auto writer = ConnectOrDie(server.uri(), TcpOnly());
  ASSERT_TRUE(writer->Put("ns", "k", U8(kMiB), Span(Payload(7, kMiB))).ok());
  auto fd = ConnectUnix(dir.path() + "/serve.sock", std::chrono::milliseconds(2000));
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  BodyWriter w;
  w.Str("");
  uint8_t h[kHeaderBytes];
  EncodeHeader({kVersion, Op::kHello, 1, w.data().size()}, h);
  std::string frame = std::string(reinterpret_cast<char*>(h), kHeaderBytes) + w.data();
  ASSERT_EQ(send(fd->get(), frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  int pool_fd = -1;
  ASSERT_TRUE(RecvAllWithFd(fd->get(), h, kHeaderBytes, &pool_fd, "server").ok());
  UniqueFd pool(pool_fd);
  ASSERT_TRUE(pool.valid());
  const size_t n = 16 * kMiB;
  EXPECT_EQ(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, pool.get(), 0), MAP_FAILED);
  EXPECT_NE(ftruncate(pool.get(), 4096), 0) << "a reader shrank the pool";
  EXPECT_NE(ftruncate(pool.get(), 2 * n), 0) << "a reader grew the pool";
  char junk[4096] = {1};
  EXPECT_LT(pwrite(pool.get(), junk, sizeof(junk), 0), 0);
  // Reopening the descriptor read-write through /proc does not get around the seal.
  std::string self = "/proc/self/fd/" + std::to_string(pool.get());
  UniqueFd rw(open(self.c_str(), O_RDWR));
  if (rw.valid()) {
    EXPECT_EQ(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, rw.get(), 0), MAP_FAILED);
    EXPECT_LT(pwrite(rw.get(), junk, sizeof(junk), 0), 0);
  }
  void* ro = mmap(nullptr, n, PROT_READ, MAP_SHARED, pool.get(), 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_NE(mprotect(ro, n, PROT_READ | PROT_WRITE), 0) << "a read-only map became writable";
  munmap(ro, n);
  // The server is alive, puts still land, and the stored bytes are unchanged.
  ASSERT_TRUE(writer->Put("ns", "k2", U8(kMiB), Span(Payload(8, kMiB))).ok());
  std::vector<uint8_t> buf(kMiB);
  ASSERT_TRUE(writer->Get("ns", "k", {buf.data(), buf.size()}).ok());
  EXPECT_EQ(buf, Payload(7, kMiB));
}

TEST(NetShm, LeasedBytesSurviveEvictionAndExpiredLeasesAreReleased) {
  testing::TempDir dir;
  // The TTL must outlast the churn below even on a slow (sanitizer, loaded CI) machine.
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, /*shm=*/true, /*lease_ttl_ms=*/3000);
  auto c = ConnectOrDie(server.shm_uri());
  auto writer = ConnectOrDie(server.uri(), TcpOnly());
  ASSERT_TRUE(writer->Put("ns", "held", U8(4 * kMiB), Span(Payload(9, 4 * kMiB))).ok());
  auto view = c->Acquire("ns", "held");
  ASSERT_TRUE(view.ok());
  // Churn the pool while the lease is held: the leased bytes never change.
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(
        writer->Put("ns", "w" + std::to_string(i), U8(3 * kMiB), Span(Payload(i, 3 * kMiB))).ok());
  EXPECT_EQ(0, std::memcmp(view->data(), Payload(9, 4 * kMiB).data(), 4 * kMiB));
  auto held = writer->Lookup("ns", "held");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->tier(), Tier::kPool);
  // Never released: after the TTL the server lets go, and eviction may take it.
  std::this_thread::sleep_for(std::chrono::milliseconds(3600));
  for (int i = 8; i < 16; ++i)
    ASSERT_TRUE(
        writer->Put("ns", "w" + std::to_string(i), U8(3 * kMiB), Span(Payload(i, 3 * kMiB))).ok());
  held = writer->Lookup("ns", "held");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->tier(), Tier::kDisk) << "an expired lease still pinned the entry";
}

// A pin moves no bytes and keeps an entry resident, over TCP too, until it is dropped.
TEST(Net, PinKeepsAnEntryResidentUntilDropped) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, /*shm=*/false);
  auto c = ConnectOrDie(server.uri(), TcpOnly());
  ASSERT_TRUE(c->Put("ns", "held", U8(4 * kMiB), Span(Payload(9, 4 * kMiB))).ok());
  auto pin = c->Pin("ns", "held");
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_EQ(pin->data(), nullptr);
  EXPECT_EQ(pin->size(), 4 * kMiB);
  for (int i = 0; i < 8; ++i)  // 24 MiB through a 16 MiB pool
    ASSERT_TRUE(
        c->Put("ns", "w" + std::to_string(i), U8(3 * kMiB), Span(Payload(i, 3 * kMiB))).ok());
  EXPECT_EQ(c->Lookup("ns", "held")->tier(), Tier::kPool) << "a pinned entry was evicted";
  pin = ReadLease();  // unpinned: the next churn may evict it
  for (int i = 8; i < 16; ++i)
    ASSERT_TRUE(
        c->Put("ns", "w" + std::to_string(i), U8(3 * kMiB), Span(Payload(i, 3 * kMiB))).ok());
  EXPECT_EQ(c->Lookup("ns", "held")->tier(), Tier::kDisk);
}

// One reader cannot pin the whole pool: leases per connection are capped (half the pool
// by default), and releasing one makes room again.
TEST(NetShm, LeasesPerConnectionAreCapped) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, /*shm=*/true);
  auto writer = ConnectOrDie(server.uri(), TcpOnly());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(
        writer->Put("ns", "k" + std::to_string(i), U8(3 * kMiB), Span(Payload(i, 3 * kMiB))).ok());
  auto c = ConnectOrDie(server.shm_uri());
  auto a = c->Acquire("ns", "k0");
  auto b = c->Acquire("ns", "k1");
  ASSERT_TRUE(a.ok() && b.ok());
  auto third = c->Acquire("ns", "k2");  // 9 MiB > 8 MiB
  ASSERT_TRUE(third.status().IsBusy()) << third.status().ToString();
  EXPECT_NE(third.status().message().find("release"), std::string::npos);
  a = ReadLease();  // releases the server's lease
  auto again = c->Acquire("ns", "k2");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  // Puts still find room while this reader holds its share.
  EXPECT_TRUE(writer->Put("ns", "k3", U8(3 * kMiB), Span(Payload(3, 3 * kMiB))).ok());
}

double CpuSeconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(s.substr(s.rfind(')') + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Opens n connections that each send HELLO and keep the connection; returns how many were
// refused, with the last refusal's message in *why.
int HelloMany(uint16_t port, int n, std::vector<std::unique_ptr<RawConn>>* conns,
              std::string* why) {
  int refused = 0;
  for (int i = 0; i < n; ++i) {
    auto c = std::make_unique<RawConn>(port);
    BodyWriter w;
    w.Str("");
    c->SendFrame(Op::kHello, w.data());
    auto [op, msg] = c->Reply();
    if (op == Op::kError) ++refused, *why = msg;
    conns->push_back(std::move(c));
  }
  return refused;
}

// At the fd limit the server refuses new clients with a clear error instead of spinning,
// and serves again as soon as clients leave.
// A reply is bounded as a whole too: a reader that takes a GET's bytes a trickle at a time
// is cut off at the deadline, and its lease goes with it -- a put that needs the space that
// lease pinned succeeds while the reader is still trickling.
TEST(Net, SlowReaderLosesItsLeaseAtTheReplyDeadline) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 32 * kMiB, 0, false, 30000, /*io_timeout_ms=*/300);
  auto writer = ConnectOrDie(server.uri(), TcpOnly());
  ASSERT_TRUE(writer->Put("ns", "big", U8(24 * kMiB), Span(Payload(1, 24 * kMiB))).ok());
  RawConn c(server.port());
  c.Hello();
  BodyWriter w;
  w.Str("ns");
  w.Str("big");
  c.SendFrame(Op::kGet, w.data());
  std::atomic<bool> stop{false};
  // ~2.5 MB/s: every send call makes progress (so no per-call timeout fires), yet the whole
  // 24 MiB reply would take ~10 s.
  std::thread trickle([&] {
    std::vector<char> buf(256 << 10);
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (recv(c.fd(), buf.data(), buf.size(), MSG_DONTWAIT) == 0) break;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // 24 MiB more fits a 32 MiB pool only once "big" can be evicted, i.e. its lease is gone.
  Status st = writer->Put("ns", "other", U8(24 * kMiB), Span(Payload(2, 24 * kMiB)));
  stop = true;
  trickle.join();
  EXPECT_TRUE(st.ok()) << "a slow reader still pins its GET lease: " << st.ToString();
}

TEST(Net, FdExhaustionRefusesClearlyAndRecovers) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, false, 30000, 30000, [](ServerOptions*) {
    rlimit lim{48, 48};
    setrlimit(RLIMIT_NOFILE, &lim);
  });
  std::vector<std::unique_ptr<RawConn>> conns;
  std::string why;
  int refused = HelloMany(server.port(), 60, &conns, &why);
  EXPECT_GT(refused, 0);
  EXPECT_NE(why.find("file descriptors"), std::string::npos) << why;
  double cpu0 = CpuSeconds(server.pid());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(CpuSeconds(server.pid()) - cpu0, 0.5) << "the accept loop spins at the fd limit";
  conns.clear();  // everyone leaves: fds come back without a new accept succeeding first
  ClientOptions o;
  o.retries = 0;
  std::unique_ptr<Client> c;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto r = Client::Connect(server.uri(), o);
        if (r.ok()) c = std::move(r).value();
        return c != nullptr;
      },
      std::chrono::seconds(5)))
      << "the server never took a client again";
  EXPECT_TRUE(c->Put("ns", "k", U8(100), Span(Payload(1, 100))).ok());
}

uint64_t ThreadCount(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoull(line.substr(8));
  return 0;
}

// Connections cost no thread: hundreds of greeted clients leave the server's thread count
// where it was, and clients that trickle a header or a PUT's key, or never finish a frame,
// hold no worker: with two workers and more tricklers than that, others are still served.
TEST(Net, ConnectionsTakeNoThreadAndTricklersHoldNoWorker) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, false, 30000, 30000,
                       [](ServerOptions* so) { so->workers = 2; });
  ClientOptions o = TcpOnly();
  o.timeout = std::chrono::milliseconds(2000);
  auto first = ConnectOrDie(server.uri(), o);
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->Put("ns", "k", U8(100), Span(Payload(1, 100))).ok());
  std::vector<std::unique_ptr<RawConn>> conns;
  std::string why;
  EXPECT_EQ(HelloMany(server.port(), 10, &conns, &why), 0) << why;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // helpers started lazily
  const uint64_t threads = ThreadCount(server.pid());
  EXPECT_EQ(HelloMany(server.port(), 300, &conns, &why), 0) << why;
  EXPECT_EQ(ThreadCount(server.pid()), threads);
  for (int i = 0; i < 4; ++i) {  // half a header; a PUT's header and half its key
    auto c = std::make_unique<RawConn>(server.port());
    c->Hello();
    c->Send(std::string(kHeaderBytes / 2, '\0'));
    conns.push_back(std::move(c));
    auto p = std::make_unique<RawConn>(server.port());
    p->Hello();
    uint8_t hdr[kHeaderBytes];
    EncodeHeader({kVersion, Op::kPut, 7, 4096}, hdr);
    p->Send(std::string(reinterpret_cast<char*>(hdr), kHeaderBytes) + std::string(3, '\0'));
    conns.push_back(std::move(p));
  }
  auto later = ConnectOrDie(server.uri(), o);
  ASSERT_TRUE(later);
  std::vector<uint8_t> got(100);
  auto info = later->Get("ns", "k", std::span<uint8_t>(got));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(got, Payload(1, 100));
  EXPECT_TRUE(first->Put("ns", "k2", U8(100), Span(Payload(2, 100))).ok());
  EXPECT_EQ(ThreadCount(server.pid()), threads);
}

// A fleet's engines each hold a connection to every node: the default daemon holds 10,000
// of them, each greeted and served a byte-exact entry, on the threads it had with ten.
TEST(Net, TenThousandConnectionsAreEachServedOnTheSameThreads) {
  constexpr int kConns = 10000;
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  const rlim_t need = kConns + 512;  // each process holds one end of every connection
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < need)
    GTEST_SKIP() << "the hard open-files limit here is " << lim.rlim_max << "; " << need
                 << " are needed for " << kConns << " connections (raise it: ulimit -Hn)";
  lim.rlim_cur = std::max(lim.rlim_cur, need);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);  // the server's child inherits it
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, false, 30000, 30000,
                       [](ServerOptions* so) { so->workers = 8; });
  auto writer = ConnectOrDie(server.uri(), TcpOnly());
  ASSERT_TRUE(writer);
  const std::vector<uint8_t> value = Payload(7, 4096);
  ASSERT_TRUE(writer->Put("ns", "k", U8(value.size()), Span(value)).ok());
  BodyWriter get;
  get.Str("ns");
  get.Str("k");
  std::vector<std::unique_ptr<RawConn>> conns;
  auto open_and_get = [&](int n) {
    for (int i = 0; i < n; ++i) {
      auto c = std::make_unique<RawConn>(server.port());
      c->Hello();
      c->SendFrame(Op::kGet, get.data());
      uint8_t h[kHeaderBytes];
      ASSERT_TRUE(RecvAll(c->fd(), h, kHeaderBytes, "server").ok()) << "connection " << i;
      auto d = DecodeHeader(h);
      ASSERT_TRUE(d.ok() && d->op == Op::kGetOk) << "connection " << conns.size();
      std::vector<uint8_t> body(d->body_len);
      ASSERT_TRUE(RecvAll(c->fd(), body.data(), body.size(), "server").ok());
      ASSERT_GE(body.size(), value.size());
      ASSERT_TRUE(std::equal(value.begin(), value.end(), body.end() - value.size()))
          << "connection " << conns.size() << " got other bytes";
      conns.push_back(std::move(c));
    }
  };
  open_and_get(10);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // helpers started lazily
  const uint64_t threads = ThreadCount(server.pid());
  open_and_get(kConns - 10);
  ASSERT_EQ(conns.size(), static_cast<size_t>(kConns));
  EXPECT_EQ(ThreadCount(server.pid()), threads);
  // Every connection is still open and served: the first one asks again.
  std::vector<uint8_t> got(value.size());
  ASSERT_TRUE(writer->Get("ns", "k", std::span<uint8_t>(got)).ok());
  conns.front()->SendFrame(Op::kGet, get.data());
  EXPECT_EQ(conns.front()->Reply().first, Op::kGetOk);
}

TEST(Net, ConnectionLimitRefusesClearly) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, false, 30000, 30000,
                       [](ServerOptions* so) { so->max_connections = 3; });
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(ConnectOrDie(server.uri(), TcpOnly()));
  ClientOptions o = TcpOnly();
  o.retries = 0;
  auto extra = Client::Connect(server.uri(), o);
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("limit"), std::string::npos) << extra.status().ToString();
  clients.pop_back();  // once the server has reaped it, a new client is taken
  EXPECT_TRUE(testing::WaitFor([&] { return Client::Connect(server.uri(), o).ok(); },
                               std::chrono::seconds(5)));
}

// Sockets that connect and never say HELLO are closed after the HELLO deadline and, past a
// small budget, refused at once: they can neither fill the connection limit nor hold it
// for the idle timeout (1,024 of them once locked every client out for ten minutes).
TEST(Net, ConnectionsThatNeverSayHelloCannotLockClientsOut) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, false, 30000, 30000, [](ServerOptions* so) {
    so->max_connections = 8;
    so->max_ungreeted = 4;
    so->hello_timeout = std::chrono::milliseconds(300);
  });
  std::vector<std::unique_ptr<RawConn>> silent;
  for (int i = 0; i < 12; ++i) silent.push_back(std::make_unique<RawConn>(server.port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // past the HELLO deadline
  for (auto& s : silent) {  // an error frame (refused at once) or nothing, then EOF
    timeval tv{5, 0};
    setsockopt(s->fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[256];
    ssize_t n;
    while ((n = recv(s->fd(), buf, sizeof(buf), 0)) > 0) {
    }
    EXPECT_EQ(n, 0) << "still open";
  }
  ClientOptions o = TcpOnly();
  o.retries = 0;
  auto c = Client::Connect(server.uri(), o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Put("ns", "k", U8(100), Span(Payload(1, 100))).ok());
}

// Silent sockets get a quarter of --max-connections whatever max_ungreeted says: with 32
// slots, 32 silent sockets once took every one of them.
TEST(Net, SilentSocketsLeaveMostConnectionSlotsToClients) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, false, 30000, 30000, [](ServerOptions* so) {
    so->max_connections = 8;  // max_ungreeted stays at its default, 64
    so->hello_timeout = std::chrono::seconds(30);
  });
  std::vector<std::unique_ptr<RawConn>> silent;
  for (int i = 0; i < 8; ++i) silent.push_back(std::make_unique<RawConn>(server.port()));
  int refused = 0;  // an error frame at once, then EOF
  for (auto& s : silent) {
    timeval tv{0, 500000};
    setsockopt(s->fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[256];
    refused += recv(s->fd(), buf, sizeof(buf), 0) > 0;
  }
  EXPECT_EQ(refused, 6);  // 2 of 8 slots for sockets that have not said HELLO
  silent.clear();         // the two held ones go; clients take the remaining slots
  ClientOptions o = TcpOnly();
  o.retries = 0;
  std::vector<std::unique_ptr<Client>> clients;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto c = Client::Connect(server.uri(), o);
        if (c.ok()) clients.push_back(std::move(c).value());
        return clients.size() == 8;
      },
      std::chrono::seconds(10)));
  EXPECT_TRUE(clients.back()->Put("ns", "k", U8(100), Span(Payload(1, 100))).ok());
}

TEST(Net, IdleConnectionsAreClosedAfterTheIdleTimeout) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 16 * kMiB, 0, false, 30000, 30000, [](ServerOptions* so) {
    so->idle_timeout = std::chrono::milliseconds(300);
  });
  RawConn idle(server.port());
  idle.Hello();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_TRUE(idle.Closed());
}

TEST(Net, IdleConnectionsStayOpenPastTheIoTimeout) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 64 * kMiB, 0, false, 30000, /*io_timeout_ms=*/300);
  ClientOptions o;
  o.retries = 0;  // a dropped connection would surface as Unavailable, not be papered over
  auto c = ConnectOrDie(server.uri(), o);
  ASSERT_TRUE(c->Put("ns", "k", U8(100), Span(Payload(1, 100))).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // 4x the server's io timeout
  std::vector<uint8_t> buf(100);
  auto got = c->Get("ns", "k", {buf.data(), buf.size()});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
}

// Forwards to a real store and counts List calls (the server in this process).
class CountingStore : public Store {
 public:
  explicit CountingStore(Store* s) : s_(s) {}
  std::atomic<int> lists{0};
  Status Put(std::string_view ns, std::string_view key, const TensorMeta& m,
             std::span<const uint8_t> b) override {
    return s_->Put(ns, key, m, b);
  }
  Result<PutReservation> Reserve(std::string_view ns, std::string_view key, const TensorMeta& m,
                                 uint64_t n) override {
    return s_->Reserve(ns, key, m, n);
  }
  Status Commit(PutReservation r) override { return s_->Commit(std::move(r)); }
  using Store::Get;
  Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst,
                        const ReadOptions& ro) override {
    return s_->Get(ns, key, dst, ro);
  }
  Result<ReadLease> Acquire(std::string_view ns, std::string_view key) override {
    return s_->Acquire(ns, key);
  }
  using Store::Lookup;
  Result<EntryInfo> Lookup(std::string_view ns, std::string_view key,
                           const ReadOptions& ro) override {
    return s_->Lookup(ns, key, ro);
  }
  std::vector<Result<EntryInfo>> GetMany(std::string_view ns, const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts) override {
    return s_->GetMany(ns, keys, dsts);
  }
  Result<std::vector<std::optional<EntryInfo>>> LookupMany(
      std::string_view ns, const std::vector<std::string>& keys) override {
    return s_->LookupMany(ns, keys);
  }
  Status Erase(std::string_view ns, std::string_view key) override { return s_->Erase(ns, key); }
  Status EraseMany(const std::vector<std::pair<std::string, std::string>>& k,
                   std::vector<bool>* erased) override {
    return s_->EraseMany(k, erased);
  }
  Status ListPages(size_t page_size,
                   const std::function<bool(std::vector<EntryInfo>&&)>& on_page) override {
    ++lists;
    return s_->ListPages(page_size, on_page);
  }
  Result<StoreStats> Stats() override { return s_->Stats(); }
  Status Flush() override { return s_->Flush(); }
  Result<VerifyReport> Verify(const std::function<void(uint64_t, uint64_t)>& p) override {
    return s_->Verify(p);
  }
  Result<CompactReport> Compact(double t) override { return s_->Compact(t); }
  Status Close() override { return s_->Close(); }
  Status Health() override { return s_->Health(); }
  void SetAdmission(Admission a) override { s_->SetAdmission(std::move(a)); }
  void SetEvents(EntryEvents* e) override { s_->SetEvents(e); }
  MemoryRegion pool_region() const override { return s_->pool_region(); }
  Status PutFromDevice(std::string_view ns, std::string_view key, const TensorMeta& m,
                       const void* src, uint64_t n, bool checksum_when_spilled) override {
    return s_->PutFromDevice(ns, key, m, src, n, checksum_when_spilled);
  }
  Result<EntryInfo> GetToDevice(std::string_view ns, std::string_view key, void* dst,
                                uint64_t n) override {
    return s_->GetToDevice(ns, key, dst, n);
  }
  Result<ReadLease> AcquireOnDevice(std::string_view ns, std::string_view key) override {
    return s_->AcquireOnDevice(ns, key);
  }
  MemoryRegion device_region() const override { return s_->device_region(); }
  int device_ordinal() const override { return s_->device_ordinal(); }
  Result<bool> Prefetch(std::string_view ns, const std::vector<std::string>& keys) override {
    return s_->Prefetch(ns, keys);
  }
  Status AddRegistrar(MemoryRegistrar* r) override { return s_->AddRegistrar(r); }
  void RemoveRegistrar(MemoryRegistrar* r) override { s_->RemoveRegistrar(r); }

 private:
  Store* s_;
};

// A listing of several pages takes one snapshot of the keydir, not one per page.
TEST(Net, RemoteListTakesOneSnapshotPerListing) {
  testing::TempDir dir;
  Options o;
  o.pool_bytes = 16 * kMiB;
  auto real = Store::Open(dir.path(), o);
  ASSERT_TRUE(real.ok());
  CountingStore counting(real->get());
  ServerOptions so;
  so.listen = "127.0.0.1:0";
  auto server = Server::Start(&counting, so);
  ASSERT_TRUE(server.ok());
  auto c = ConnectOrDie("127.0.0.1:" + std::to_string((*server)->port()), TcpOnly());
  const int n = 3 * kListPage + 5;  // four pages
  for (int i = 0; i < n; ++i)
    ASSERT_TRUE(c->Put("ns", "e" + std::to_string(100000 + i), U8(16), Span(Payload(i, 16))).ok());
  auto all = c->List();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(n));
  EXPECT_EQ(counting.lists.load(), 1);
  ASSERT_TRUE(c->List().ok());  // a new listing: a new snapshot
  EXPECT_EQ(counting.lists.load(), 2);
  (*server)->Stop();
}

// What the kernel granted the pool (huge pages are only asked for) reaches a remote `stats`.
TEST(Net, RemoteStatsSayHowMuchOfThePoolIsInHugePages) {
  testing::TempDir dir;
  Options o;
  o.pool_bytes = 64 * kMiB;
  auto store = Store::Open(dir.path(), o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ServerOptions so;
  so.listen = "127.0.0.1:0";
  auto server = Server::Start(store->get(), so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto c = ConnectOrDie("127.0.0.1:" + std::to_string((*server)->port()), TcpOnly());
  auto local = (*store)->Stats();
  auto remote = c->Stats();
  ASSERT_TRUE(local.ok() && remote.ok());
  EXPECT_EQ(remote->pool_huge_page_bytes, local->pool_huge_page_bytes);
  EXPECT_EQ(remote->pool_huge_pages, local->pool_huge_pages);
  EXPECT_LE(local->pool_huge_page_bytes, 64 * kMiB);
  (*server)->Stop();
}

TEST(Net, ListPagesThroughEveryEntry) {
  testing::TempDir dir;
  ServerProcess server(dir.path());
  auto c = ConnectOrDie(server.uri());
  const int n = 2 * kListPage + 17;  // three pages
  for (int i = 0; i < n; ++i)
    ASSERT_TRUE(c->Put("ns", "e" + std::to_string(100000 + i), U8(16), Span(Payload(i, 16))).ok());
  auto all = c->List();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ((*all)[i].key, "e" + std::to_string(100000 + i));  // ordered by key
    EXPECT_EQ((*all)[i].bytes, 16u);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, NetP, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

TEST(Protocol, HeaderRoundTripAndLimits) {
  uint8_t h[kHeaderBytes];
  EncodeHeader({kVersion, Op::kGet, 42, 100}, h);
  auto d = DecodeHeader(h);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->request_id, 42u);
  EXPECT_EQ(d->op, Op::kGet);
  EncodeHeader({kVersion + 1, Op::kGet, 1, 0}, h);
  EXPECT_NE(DecodeHeader(h).status().message().find("version"), std::string::npos);
  EncodeHeader({kVersion, Op::kGet, 1, kMaxMetaBody + 1}, h);
  EXPECT_TRUE(DecodeHeader(h).status().IsInvalidArgument());
  EncodeHeader({kVersion, Op::kPut, 1, kMaxMetaBody + 1}, h);  // tensors may be large
  EXPECT_TRUE(DecodeHeader(h).ok());
}

// ERASE_MANY_OK carries the flags and, where the tombstones failed, why; a reply for another
// count of keys or with a cut body is refused.
TEST(Protocol, EraseManyReplyRoundTrips) {
  const std::vector<bool> flags{true, false, true};
  for (const Status& durable : {Status::Ok(), Status::NoSpace("erased, but not durably yet")}) {
    const std::string body = EraseManyReplyBody(flags, durable);
    auto p = reinterpret_cast<const uint8_t*>(body.data());
    BodyReader r(p, body.size());
    std::vector<bool> erased;
    Status got = Status::Busy("unset");
    ASSERT_TRUE(ParseEraseManyReply(&r, 3, &erased, &got).ok());
    EXPECT_EQ(erased, flags);
    EXPECT_EQ(got.ok(), durable.ok());
    EXPECT_EQ(got.IsNoSpace(), durable.IsNoSpace());
    EXPECT_EQ(got.message(), durable.message());
    BodyReader other(p, body.size());
    EXPECT_TRUE(ParseEraseManyReply(&other, 2, &erased, &got).IsUnavailable());
    BodyReader cut(p, 6);
    EXPECT_TRUE(ParseEraseManyReply(&cut, 3, &erased, &got).IsUnavailable());
  }
}

// Each Cache says what it does itself (CacheCapabilities): flags, and the facets it hands out.
// A same-host client reads in place and reserves put-arena blocks; a TCP one does neither;
// both have the server queue prefetches and decide claims, and both administer it.
TEST(NetShm, ClientsSayWhatTheyDoThemselvesAndRefuseTheRestWithWhatToDo) {
  testing::TempDir dir;
  ServerProcess server(dir.path(), "", 64 * kMiB, 0, true);
  auto shm = ConnectOrDie(server.shm_uri());
  auto tcp = ConnectOrDie(server.uri(), TcpOnly());
  CacheCapabilities s = shm->capabilities(), t = tcp->capabilities();
  EXPECT_TRUE(s.in_place_reads && s.reserve);
  EXPECT_FALSE(t.in_place_reads || t.reserve || t.device_puts || t.device_leases);
  EXPECT_TRUE(s.reservations && !t.reservations);
  for (const CacheCapabilities& c : {s, t}) {
    EXPECT_TRUE(c.prefetch && c.prefetch_queued && c.claims && c.memory && c.admin);
    EXPECT_FALSE(c.device_tier);
  }
  EXPECT_FALSE(t.device_io) << "a TCP client copies no device memory itself";
  EXPECT_EQ(s.memory->host_pool().bytes.size(), shm->shared_pool().size());
  EXPECT_TRUE(s.memory->host_pool().read_only);
  auto got = tcp->GetToDevice("ns", "k", nullptr, 0);
  EXPECT_TRUE(got.status().IsInvalidArgument());
  EXPECT_NE(got.status().message().find("load through host leases"), std::string::npos)
      << got.status().ToString();
  Cache& as_cache = *tcp;  // through the interface, as the bindings call it
  ASSERT_TRUE(as_cache.Put("ns", "k", U8(10), Span(Payload(1, 10))).ok());
  Result<ClaimAnswer> claim = ClaimOrGrant(t, "ns", "absent", std::chrono::milliseconds(500));
  ASSERT_TRUE(claim.ok()) << claim.status().ToString();
  EXPECT_EQ(claim->outcome, ClaimOutcome::kGranted);
  claim = s.claims->Claim("ns", "absent", std::chrono::milliseconds(500));
  ASSERT_TRUE(claim.ok());
  EXPECT_EQ(claim->outcome, ClaimOutcome::kHeld) << "the server saw the first claim";
  claim = t.claims->Claim("ns", "k", std::chrono::milliseconds(500));
  EXPECT_EQ(claim->outcome, ClaimOutcome::kPresent);
}

}  // namespace
}  // namespace ecstore::net
