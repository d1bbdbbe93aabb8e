// Put arenas: same-host puts written into a shared arena and copied once by the server.
// A store and its server in this process; clients over the real unix socket.
#include "net/put_arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/test_util.h"
#include "base/units.h"
#include "disk/record.h"
#include "net/client.h"
#include "net/frame_stream.h"
#include "server/server.h"
#include "tests/raw_hello.h"

namespace ecstore::net {
namespace {

using testing::Payload;

using testing::U8;

class PutArenaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Options o;
    o.pool_bytes = 256 * kMiB;
    o.memory_backend = NewSharedHostBackend;
    o.write_back = false;  // nothing spills (and hashes) an entry before Flush
    auto s = Store::Open(dir_.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    StartServer();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  void StartServer(int copy_threads = -1,
                   std::chrono::milliseconds io_timeout = std::chrono::seconds(30),
                   uint64_t max_arena_bytes = 0) {
    ServerOptions so;
    so.max_arena_bytes = max_arena_bytes;
    so.listen = "127.0.0.1:0";
    so.copy_threads = copy_threads;
    so.io_timeout = io_timeout;
    so.shm_socket = dir_.sub("serve.sock");
    auto srv = Server::Start(store_.get(), so);
    ASSERT_TRUE(srv.ok()) << srv.status().ToString();
    server_ = std::move(srv).value();
  }
  std::unique_ptr<Client> Connect(const std::string& transport = "auto", bool put_arena = true) {
    ClientOptions o;
    o.transport = *ParseTransportKind(transport);
    o.put_arena = put_arena;
    auto c = Client::Connect(transport == "tcp" ? "127.0.0.1:" + std::to_string(server_->port())
                                                : "unix:" + dir_.sub("serve.sock"),
                             o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // Reserves, fills with Payload(seed, n) and returns the reservation.
  static ArenaReservation Filled(Client* c, const std::string& key, uint64_t seed, uint64_t n) {
    auto r = c->ReservePut("ns", key, U8(n), n);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    auto p = Payload(seed, n);
    std::memcpy(r->bytes().data(), p.data(), n);
    return std::move(r).value();
  }
  // Lands Payload(seed, n) in a landing block from another thread, `piece` bytes at a time
  // `pause` apart, each written only just before the counter passes it (until then the
  // block holds 0xEE: what the server would store if it copied too early).
  static std::thread Land(const ArenaReservation& r, uint64_t seed, uint64_t piece,
                          std::chrono::milliseconds pause) {
    std::memset(r.bytes().data(), 0xEE, r.bytes().size());
    return std::thread([bytes = r.bytes(), landing = r.Landing(), seed, piece, pause] {
      auto p = Payload(seed, bytes.size());
      for (uint64_t at = 0; at < bytes.size(); at += piece) {
        std::this_thread::sleep_for(pause);
        const uint64_t end = std::min<uint64_t>(bytes.size(), at + piece);
        std::memcpy(bytes.data() + at, p.data() + at, end - at);
        landing.Landed(end);
      }
    });
  }
  // PUT_ARENA requests the server answered. It counts a request once its reply has gone out,
  // so a count read straight after the reply can lag (seen under a parallel ctest): wait up to
  // 2 s for it to reach `want`, then return it.
  uint64_t ArenasAskedFor(uint64_t want) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (;;) {
      uint64_t arenas = 0;
      for (const auto& q : server_->metrics().Snapshot().requests)
        if (q.op == "put_arena") arenas += q.count;
      if (arenas >= want || std::chrono::steady_clock::now() > deadline) return arenas;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void ExpectStored(const std::string& key, uint64_t seed, uint64_t n) {
    std::vector<uint8_t> got(n);
    auto info = store_->Get("ns", key, {got.data(), got.size()});
    ASSERT_TRUE(info.ok()) << key << ": " << info.status().ToString();
    EXPECT_EQ(info->bytes, n);
    EXPECT_EQ(got, Payload(seed, n)) << key;
  }

  testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Server> server_;
};

// A server whose copies are split across helpers (as on a 16-core host, whatever this
// machine's cores) stores every byte, with pieces of 1 MiB and a shorter tail, and from
// several connections committing at once (one copy uses the helpers, the others copy alone).
TEST_F(PutArenaTest, CopiesSplitAcrossTheServersHelpersStoreEveryByte) {
  server_->Stop();
  StartServer(3);
  EXPECT_EQ(server_->put_copy_threads(), 4u);
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t)
    clients.emplace_back([this, t] {
      auto c = Connect();
      ASSERT_TRUE(c);
      for (int i = 0; i < 4; ++i) {
        const uint64_t n = (i + 1) * 3 * kMiB + 4095 * t, seed = 10 * t + i;
        const std::string key = "split-" + std::to_string(t) + "-" + std::to_string(i);
        ASSERT_TRUE(c->CommitPut(Filled(c.get(), key, seed, n)).ok());
      }
    });
  for (auto& th : clients) th.join();
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 4; ++i)
      ExpectStored("split-" + std::to_string(t) + "-" + std::to_string(i), 10 * t + i,
                   (i + 1) * 3 * kMiB + 4095 * t);
}

// A reservation filled in place and committed is stored byte for byte. Committed with
// checksum_when_spilled it is readable at once with checksum 0 (only PUT_SHM can ask for
// that: a PUT is always hashed), and hashed by the spill that gives it a disk copy.
TEST_F(PutArenaTest, AReservationFilledInPlaceIsStoredByteForByte) {
  auto c = Connect();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->CommitPut(Filled(c.get(), "hashed", 1, 3 * kMiB + 5)).ok());
  ExpectStored("hashed", 1, 3 * kMiB + 5);
  EXPECT_NE(store_->Lookup("ns", "hashed")->checksum, 0u);
  ASSERT_TRUE(c->CommitPut(Filled(c.get(), "later", 2, 2 * kMiB), true).ok());
  ExpectStored("later", 2, 2 * kMiB);
  EXPECT_EQ(store_->Lookup("ns", "later")->checksum, 0u);
  ASSERT_TRUE(store_->Flush().ok());
  auto info = store_->Lookup("ns", "later");
  ASSERT_TRUE(info.ok());
  EXPECT_NE(info->checksum, 0u);
  EXPECT_EQ(info->checksum, PayloadChecksum(Payload(2, 2 * kMiB).data(), 2 * kMiB));
  // A reservation dropped uncommitted puts nothing, and its block is reused.
  { auto dropped = Filled(c.get(), "dropped", 3, kMiB); }
  EXPECT_TRUE(store_->Lookup("ns", "dropped").status().IsNotFound());
  ASSERT_TRUE(c->CommitPut(Filled(c.get(), "after", 4, kMiB)).ok());
  ExpectStored("after", 4, kMiB);
}

// Several blocks held at once get distinct parts of the arena; one that does not fit beside
// them gets a larger arena, and those carved from the old one still commit (as plain PUTs)
// with their own bytes.
TEST_F(PutArenaTest, BlocksHeldTogetherAndAGrownArenaKeepTheirBytes) {
  auto c = Connect();
  ASSERT_TRUE(c);
  ArenaReservation a = Filled(c.get(), "a", 10, 20 * kMiB);
  ArenaReservation b = Filled(c.get(), "b", 11, 20 * kMiB);
  ASSERT_EQ(a.arena(), b.arena());
  EXPECT_GE(b.offset(), a.offset() + 20 * kMiB);
  const SharedArena* first = a.arena();
  ArenaReservation big = Filled(c.get(), "big", 12, 40 * kMiB);  // beside a and b: no room
  EXPECT_NE(big.arena(), first);
  EXPECT_GE(big.arena()->bytes().size(), 80 * kMiB);
  ASSERT_TRUE(c->CommitPut(std::move(b)).ok());
  ASSERT_TRUE(c->CommitPut(std::move(big), true).ok());
  ASSERT_TRUE(c->CommitPut(std::move(a)).ok());
  ExpectStored("a", 10, 20 * kMiB);
  ExpectStored("b", 11, 20 * kMiB);
  ExpectStored("big", 12, 40 * kMiB);
  EXPECT_EQ(store_->Lookup("ns", "big")->checksum, 0u);  // PUT_SHM from the new arena
  EXPECT_NE(store_->Lookup("ns", "a")->checksum, 0u);
}

// A reservation outlives its connection: after the server restarts, the commit reconnects
// and sends the bytes as a PUT. Nothing is lost.
TEST_F(PutArenaTest, AReservationCommitsAcrossAServerRestart) {
  auto c = Connect();
  ASSERT_TRUE(c);
  ArenaReservation r = Filled(c.get(), "across", 20, 5 * kMiB);
  server_->Stop();
  StartServer();
  ASSERT_TRUE(c->CommitPut(std::move(r), true).ok());
  ExpectStored("across", 20, 5 * kMiB);
  ASSERT_TRUE(c->CommitPut(Filled(c.get(), "next", 21, kMiB)).ok());  // a new arena
  ExpectStored("next", 21, kMiB);
}

// Counts registrations, and checks that each region is still mapped when deregistered.
class CountingRegistrar : public MemoryRegistrar {
 public:
  const char* Name() const override { return "counting"; }
  Status Register(const MemoryRegion& r) override {
    registered.push_back(r.base);
    return Status::Ok();
  }
  void Deregister(const MemoryRegion& r) override {
    std::vector<unsigned char> pages((r.size + 4095) / 4096);
    mapped_at_deregister &= mincore(r.base, r.size, pages.data()) == 0;  // ENOMEM: unmapped
    deregistered.push_back(r.base);
  }
  std::vector<uint8_t*> registered, deregistered;
  bool mapped_at_deregister = true;
};

// Every arena a client maps is registered (CUDA, for pinned-speed device->host copies), the
// one mapped already when asked too, and deregistered while still mapped: a registration
// that outlived its mapping would send later copies to pages no one reads.
TEST_F(PutArenaTest, ArenasAreRegisteredAndDeregisteredBeforeTheyAreUnmapped) {
  auto reg = std::make_shared<CountingRegistrar>();
  {
    auto c = Connect();
    ASSERT_TRUE(c);
    ArenaReservation a = Filled(c.get(), "a", 40, kMiB);  // an arena before registering
    ASSERT_TRUE(c->RegisterArenasWith(reg).ok());
    ASSERT_EQ(reg->registered.size(), 1u);
    EXPECT_EQ(reg->registered[0], a.arena()->bytes().data());
    ASSERT_TRUE(c->CommitPut(std::move(a)).ok());
    ArenaReservation big = Filled(c.get(), "big", 41, 100 * kMiB);  // a larger arena
    ASSERT_EQ(reg->registered.size(), 2u);
    EXPECT_EQ(reg->registered[1], big.arena()->bytes().data());
    EXPECT_EQ(reg->deregistered.size(), 1u);  // the first, no block of it held
    ASSERT_TRUE(c->CommitPut(std::move(big)).ok());
    server_->Stop();
    StartServer();
    // Reserved in the old arena (the client cannot know yet), committed as a PUT after the
    // reconnect; the next reservation maps the new connection's arena, registered too.
    ASSERT_TRUE(c->CommitPut(Filled(c.get(), "again", 42, kMiB)).ok());
    ASSERT_TRUE(c->CommitPut(Filled(c.get(), "third", 43, kMiB)).ok());
    EXPECT_EQ(reg->registered.size(), 3u);
    ExpectStored("third", 43, kMiB);
    ExpectStored("big", 41, 100 * kMiB);
    ExpectStored("again", 42, kMiB);
  }
  EXPECT_EQ(reg->deregistered.size(), 3u);  // each once, the last with the client
  EXPECT_TRUE(reg->mapped_at_deregister);
}

// Over TCP there is no arena: a clear error that says to use Put. Bad puts are refused
// before anything is reserved.
TEST_F(PutArenaTest, ReservingNeedsTheSameHostAndAGoodPut) {
  auto tcp = Connect("tcp");
  ASSERT_TRUE(tcp);
  auto r = tcp->ReservePut("ns", "k", U8(kMiB), kMiB);
  ASSERT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  EXPECT_NE(r.status().message().find("use Put"), std::string::npos);
  auto c = Connect();
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->ReservePut("ns", "", U8(kMiB), kMiB).status().IsInvalidArgument());
  EXPECT_TRUE(c->ReservePut("ns", "k", U8(kMiB), kMiB + 1).status().IsInvalidArgument());
  EXPECT_TRUE(c->CommitPut(ArenaReservation()).IsInvalidArgument());
  auto off = Connect("auto", /*put_arena=*/false);  // puts over the socket, no arena
  ASSERT_TRUE(off);
  EXPECT_TRUE(off->ReservePut("ns", "k", U8(kMiB), kMiB).status().IsInvalidArgument());
  auto p = Payload(50, 3 * kMiB);
  ASSERT_TRUE(off->Put("ns", "socket", U8(p.size()), {p.data(), p.size()}).ok());
  ExpectStored("socket", 50, 3 * kMiB);
}

// Client::Put of host bytes goes through the arena on its own (measured faster than the
// socket's two copies), and stays correct for many puts, large and small, in turn.
TEST_F(PutArenaTest, PutGoesThroughTheArenaByItself) {
  auto c = Connect();
  ASSERT_TRUE(c);
  for (uint64_t i = 0; i < 12; ++i) {
    const uint64_t n = (i % 3 == 0 ? 30 : 1) * kMiB + i * 4097;
    auto p = Payload(60 + i, n);
    ASSERT_TRUE(c->Put("ns", "p" + std::to_string(i), U8(n), {p.data(), n}).ok());
  }
  for (uint64_t i = 0; i < 12; ++i)
    ExpectStored("p" + std::to_string(i), 60 + i, (i % 3 == 0 ? 30 : 1) * kMiB + i * 4097);
  // One arena asked for (PUT_ARENA), then every put a block of it.
  EXPECT_EQ(ArenasAskedFor(1), 1u);
}

// PreparePutArena maps the connection's arena before any put (once: again, it does nothing),
// and the puts then use it; over TCP it does nothing.
TEST_F(PutArenaTest, PreparePutArenaMapsTheArenaBeforeTheFirstPut) {
  auto c = Connect();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->PreparePutArena().ok());
  EXPECT_EQ(ArenasAskedFor(1), 1u);
  ASSERT_TRUE(c->PreparePutArena().ok());
  auto p = Payload(70, 5 * kMiB);
  ASSERT_TRUE(c->Put("ns", "prepared", U8(5 * kMiB), {p.data(), p.size()}).ok());
  ExpectStored("prepared", 70, 5 * kMiB);
  EXPECT_EQ(ArenasAskedFor(1), 1u);
  auto tcp = Connect("tcp");
  ASSERT_TRUE(tcp);
  EXPECT_TRUE(tcp->PreparePutArena().ok());
  EXPECT_EQ(ArenasAskedFor(1), 1u);
}

// A landing block's commit goes out before its bytes have landed, and the server copies each
// piece only once the counter passes it: what is stored is every byte as it landed, never
// the block's earlier contents. A plain reservation has no counter.
TEST_F(PutArenaTest, ALandingBlockIsCopiedOnlyAsItsBytesLand) {
  auto c = Connect();
  ASSERT_TRUE(c);
  for (bool cws : {true, false}) {
    const uint64_t n = 9 * kMiB + 77;
    const std::string key = cws ? "landing-cws" : "landing";
    auto r = c->ReservePut("ns", key, U8(n), n, true);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->Landing());
    EXPECT_EQ(r->Landing().Load(), 0u);
    std::thread writer = Land(*r, 5, 2 * kMiB, std::chrono::milliseconds(5));
    Status st = c->CommitPut(std::move(r).value(), cws);
    writer.join();
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectStored(key, 5, n);
    EXPECT_EQ(store_->Lookup("ns", key)->checksum == 0, cws);
  }
  auto plain = c->ReservePut("ns", "plain", U8(kMiB), kMiB);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->Landing());
}

// A landing block its writer gives up on (LandingCounter::Fail), or one whose bytes do not
// land within the server's io_timeout, stores nothing and says why; the connection stays
// usable.
TEST_F(PutArenaTest, ALandingBlockGivenUpOrLateStoresNothing) {
  server_->Stop();
  StartServer(-1, std::chrono::milliseconds(300));
  auto c = Connect();
  ASSERT_TRUE(c);
  auto r = c->ReservePut("ns", "given-up", U8(4 * kMiB), 4 * kMiB, true);
  ASSERT_TRUE(r.ok() && r->Landing());
  std::thread writer([landing = r->Landing()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    landing.Landed(kMiB);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    landing.Fail();
  });
  Status st = c->CommitPut(std::move(r).value());
  writer.join();
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_NE(st.message().find("given up"), std::string::npos) << st.ToString();
  EXPECT_TRUE(store_->Lookup("ns", "given-up").status().IsNotFound());
  auto late = c->ReservePut("ns", "late", U8(kMiB), kMiB, true);
  ASSERT_TRUE(late.ok());
  st = c->CommitPut(std::move(late).value());  // nothing ever lands
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_NE(st.message().find("did not land"), std::string::npos) << st.ToString();
  EXPECT_TRUE(store_->Lookup("ns", "late").status().IsNotFound());
  ASSERT_TRUE(c->CommitPut(Filled(c.get(), "after", 6, kMiB)).ok());
  ExpectStored("after", 6, kMiB);
}

// A landing put whose bytes never land holds only its own connection: other clients' puts
// (same-host and TCP) go through while the server waits for it.
TEST_F(PutArenaTest, ALandingPutThatNeverLandsHoldsUpNoOtherPut) {
  server_->Stop();
  StartServer(-1, std::chrono::milliseconds(3000));
  auto stuck = Connect();
  ASSERT_TRUE(stuck);
  auto r = stuck->ReservePut("ns", "never", U8(4 * kMiB), 4 * kMiB, true);
  ASSERT_TRUE(r.ok() && r->Landing());
  std::atomic<bool> stuck_done{false};
  std::thread committer([&] {
    Status st = stuck->CommitPut(std::move(r).value());  // nothing ever lands
    EXPECT_FALSE(st.ok());
    stuck_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server is waiting now
  for (const char* transport : {"auto", "tcp"}) {
    auto other = Connect(transport);
    ASSERT_TRUE(other);
    auto p = Payload(7, kMiB);
    const std::string key = std::string("meanwhile-") + transport;
    ASSERT_TRUE(other->Put("ns", key, U8(kMiB), {p.data(), kMiB}).ok());
    EXPECT_FALSE(stuck_done) << transport << ": the put waited for the landing one to fail";
    ExpectStored(key, 7, kMiB);
  }
  committer.join();
  EXPECT_TRUE(store_->Lookup("ns", "never").status().IsNotFound());
}

// A landing block holds no pool space before its first piece lands: one as large as most of
// the pool, never landing, leaves room for another client's put (which once waited for
// space, then failed "pool is full (0 entries, 0 leased)").
TEST_F(PutArenaTest, ALandingBlockThatNeverLandsHoldsNoPoolSpace) {
  server_->Stop();
  StartServer(-1, std::chrono::milliseconds(10000), 1024 * kMiB);
  auto stuck = Connect();
  ASSERT_TRUE(stuck);
  auto r = stuck->ReservePut("ns", "never", U8(200 * kMiB), 200 * kMiB, true);
  ASSERT_TRUE(r.ok() && r->Landing()) << r.status().ToString();
  LandingCounter landing = r->Landing();
  std::thread committer([&] { EXPECT_FALSE(stuck->CommitPut(std::move(r).value()).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server is waiting now
  auto other = Connect("tcp");
  ASSERT_TRUE(other);
  auto p = Payload(8, 100 * kMiB);
  EXPECT_TRUE(other->Put("ns", "room", U8(100 * kMiB), {p.data(), p.size()}).ok());
  landing.Fail();
  committer.join();
  ExpectStored("room", 8, 100 * kMiB);
}

// Put arenas have a daemon-wide budget: a client whose arena would pass it puts through the
// socket instead (Put), or is told so (ReservePut); the budget comes back as clients go.
TEST_F(PutArenaTest, PutArenasTogetherStayWithinTheServersBudget) {
  server_->Stop();
  StartServer(-1, std::chrono::seconds(30), 128 * kMiB);
  auto big = Connect();
  ASSERT_TRUE(big);
  auto held = big->ReservePut("ns", "big", U8(60 * kMiB), 60 * kMiB);  // a 128 MiB arena
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto other = Connect();
  ASSERT_TRUE(other);
  auto refused = other->ReservePut("ns", "r", U8(kMiB), kMiB);
  ASSERT_TRUE(refused.status().IsBusy()) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("budget"), std::string::npos);
  auto p = Payload(40, 3 * kMiB);
  ASSERT_TRUE(other->Put("ns", "via-socket", U8(p.size()), {p.data(), p.size()}).ok());
  ExpectStored("via-socket", 40, 3 * kMiB);
  held = Status::NotFound("released");
  big.reset();  // its arena goes with its connection
  for (int i = 0; i < 100 && !other->ReservePut("ns", "r", U8(kMiB), kMiB).ok(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the server reaps it
  EXPECT_TRUE(other->ReservePut("ns", "r2", U8(kMiB), kMiB).ok());
}

// A landing block whose arena was replaced (a larger put asked for a new one) is committed as
// a plain PUT once its bytes have landed.
TEST_F(PutArenaTest, ALandingBlockOfAReplacedArenaIsPutOnceItLands) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto r = c->ReservePut("ns", "old-arena", U8(5 * kMiB), 5 * kMiB, true);
  ASSERT_TRUE(r.ok() && r->Landing());
  ArenaReservation big = Filled(c.get(), "big", 7, 100 * kMiB);  // a new, larger arena
  ASSERT_NE(big.arena(), r->arena());
  std::thread writer = Land(*r, 8, kMiB, std::chrono::milliseconds(5));
  Status st = c->CommitPut(std::move(r).value());
  writer.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectStored("old-arena", 8, 5 * kMiB);
  ASSERT_TRUE(c->CommitPut(std::move(big)).ok());
  ExpectStored("big", 7, 100 * kMiB);
}

// The server's side, spoken raw: PUT_SHM before any arena, or of a block outside it, is
// refused with a reason and the connection stays usable; the arena passed cannot be shrunk
// or grown by the client (its reads would fault the server), but it can be written.
TEST_F(PutArenaTest, TheServerRefusesBlocksOutsideTheArenaAndSealsItsSize) {
  FrameStream s;
  HelloInfo info;
  UniqueFd pool_fd;
  Status hello = testing::RawHello(dir_.sub("serve.sock"), &s, &info, &pool_fd);
  ASSERT_TRUE(hello.ok()) << hello.ToString();
  EXPECT_EQ(info.features & kFeaturePutArena, kFeaturePutArena);
  EXPECT_EQ(info.features & kFeaturePutLanding, kFeaturePutLanding);
  const std::string head = *PutHeadBody("ns", "raw", U8(kMiB), kMiB);
  ASSERT_TRUE(s.Send(Op::kPutShm, PutShmBody(head, 0, kMiB, 0)).ok());
  auto no_arena = s.ReadReply(Op::kOk);
  EXPECT_NE(no_arena.status().message().find("before PUT_ARENA"), std::string::npos)
      << no_arena.status().ToString();
  BodyWriter want;
  want.U64(8 * kMiB);
  ASSERT_TRUE(s.Send(Op::kPutArena, want.data()).ok());
  int arena_fd = -1;
  ASSERT_TRUE(s.ReadReply(Op::kPutArenaOk, &arena_fd).ok());
  ASSERT_GE(arena_fd, 0);
  EXPECT_NE(ftruncate(arena_fd, 0), 0);          // sealed: no shrinking ...
  EXPECT_NE(ftruncate(arena_fd, 16 * kMiB), 0);  // ... nor growing
  auto arena = SharedArena::Map(arena_fd, 8 * kMiB);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  auto p = Payload(30, kMiB);
  std::memcpy((*arena)->bytes().data() + 7 * kMiB, p.data(), kMiB);
  ASSERT_TRUE(s.Send(Op::kPutShm, PutShmBody(head, 7 * kMiB + 1, kMiB, 0)).ok());
  auto outside = s.ReadReply(Op::kOk);
  EXPECT_TRUE(outside.status().IsInvalidArgument()) << outside.status().ToString();
  EXPECT_NE(outside.status().message().find("outside"), std::string::npos);
  ASSERT_TRUE(s.Send(Op::kPutShm, PutShmBody(head, ~0ull - 4, 8, 0)).ok());  // wraps around
  EXPECT_TRUE(s.ReadReply(Op::kOk).status().IsInvalidArgument());
  // A landing counter inside the block, unaligned, or past the arena's end.
  for (uint64_t counter : {7 * kMiB + 64, 2 * kMiB + 4, 8 * kMiB - 4, 8 * kMiB, ~uint64_t{0} - 3}) {
    ASSERT_TRUE(s.Send(Op::kPutShm, PutShmBody(head, 7 * kMiB, kMiB, kPutLanding, counter)).ok());
    auto bad = s.ReadReply(Op::kOk);
    EXPECT_NE(bad.status().message().find("landing counter"), std::string::npos)
        << counter << ": " << bad.status().ToString();
  }
  EXPECT_TRUE(store_->Lookup("ns", "raw").status().IsNotFound());
  ASSERT_TRUE(s.Send(Op::kPutShm, PutShmBody(head, 7 * kMiB, kMiB, 0)).ok());
  ASSERT_TRUE(s.ReadReply(Op::kOk).ok());
  ExpectStored("raw", 30, kMiB);
  // An arena smaller than a counter has room for none.
  BodyWriter tiny;
  tiny.U64(4);
  ASSERT_TRUE(s.Send(Op::kPutArena, tiny.data()).ok());
  int tiny_fd = -1;
  ASSERT_TRUE(s.ReadReply(Op::kPutArenaOk, &tiny_fd).ok());
  close(tiny_fd);
  const std::string one = *PutHeadBody("ns", "tiny", U8(1), 1);
  ASSERT_TRUE(s.Send(Op::kPutShm, PutShmBody(one, 0, 1, kPutLanding, 8)).ok());
  auto no_room = s.ReadReply(Op::kOk);
  EXPECT_NE(no_room.status().message().find("landing counter"), std::string::npos)
      << no_room.status().ToString();
}

}  // namespace
}  // namespace ecstore::net
