// The entry events: what a store tells (EntryEvents) for each change of where an entry is
// held, in order, and the publisher's wire format, replay and snapshot over real ZMQ
// sockets.
#include "events/publisher.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <msgpack.hpp>
#include <set>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "base/mutex.h"
#include "base/test_util.h"
#include "base/units.h"
#include "store/store.h"

namespace ecstore::events {
namespace {

using testing::Bf16;
using testing::Payload;
using testing::TempDir;

// Every event a store tells, in order, as "Stored key medium" / "Removed key medium".
class Recorder : public EntryEvents {
 public:
  void Stored(std::string_view, std::string_view key, Tier medium, uint64_t) override {
    MutexLock l(&mu_);
    log_.push_back("Stored " + std::string(key) + " " + std::string(TierName(medium)));
  }
  void Removed(std::string_view, std::string_view key, Tier medium) override {
    MutexLock l(&mu_);
    log_.push_back("Removed " + std::string(key) + " " + std::string(TierName(medium)));
  }
  std::vector<std::string> Take() {
    MutexLock l(&mu_);
    return std::exchange(log_, {});
  }
  // key -> media, replaying `events` onto `held`.
  static void Apply(const std::vector<std::string>& events,
                    std::map<std::string, std::set<std::string>>* held) {
    for (const std::string& e : events) {
      const size_t a = e.find(' '), b = e.rfind(' ');
      const std::string key = e.substr(a + 1, b - a - 1), medium = e.substr(b + 1);
      if (e.starts_with("Stored")) {
        (*held)[key].insert(medium);
      } else {
        (*held)[key].erase(medium);
        if ((*held)[key].empty()) held->erase(key);
      }
    }
  }

 private:
  Mutex mu_;
  std::vector<std::string> log_;
};

std::unique_ptr<Store> Open(const std::string& dir, uint64_t pool, uint64_t quota = 1ull << 30) {
  Options o;
  o.pool_bytes = pool;
  o.disk_quota_bytes = quota;
  o.segment_bytes = 8 * kMiB;
  o.write_back = false;  // spills only at eviction and Flush: each one an event we caused
  o.put_wait = std::chrono::milliseconds(3000);
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

Status Put(Store* s, const std::string& key, size_t bytes, uint64_t seed = 1) {
  auto v = Payload(seed, bytes);
  return s->Put("ns", key, Bf16(bytes), {v.data(), v.size()});
}

// What the store holds, by its own listing: key -> media.
std::map<std::string, std::set<std::string>> Held(Store* s) {
  std::map<std::string, std::set<std::string>> out;
  EXPECT_TRUE(s->ListPages(1024, [&](std::vector<EntryInfo>&& page) {
                 for (const EntryInfo& e : page)
                   for (Tier t : {Tier::kDevice, Tier::kPool, Tier::kDisk})
                     if (e.tiers.has(t)) out[e.key].insert(std::string(TierName(t)));
                 return true;
               }).ok());
  return out;
}

TEST(EntryEvents, PutReplaceSpillEraseTellExactlyWhatChangedInOrder) {
  TempDir dir;
  auto s = Open(dir.path(), 32 * kMiB);
  Recorder r;
  s->SetEvents(&r);
  ASSERT_TRUE(Put(s.get(), "a", 1 << 20).ok());
  EXPECT_EQ(r.Take(), (std::vector<std::string>{"Stored a pool"}));
  ASSERT_TRUE(Put(s.get(), "a", 1 << 20, 2).ok());  // replaced: the old copy goes first
  EXPECT_EQ(r.Take(), (std::vector<std::string>{"Removed a pool", "Stored a pool"}));
  ASSERT_TRUE(s->Flush().ok());
  EXPECT_EQ(r.Take(), (std::vector<std::string>{"Stored a disk"}));
  ASSERT_TRUE(s->Erase("ns", "a").ok());
  auto erased = r.Take();
  std::sort(erased.begin(), erased.end());
  EXPECT_EQ(erased, (std::vector<std::string>{"Removed a disk", "Removed a pool"}));
  ASSERT_TRUE(Put(s.get(), "b", 1 << 20).ok());
  s->SetEvents(nullptr);  // off: nothing more is told
  ASSERT_TRUE(Put(s.get(), "c", 1 << 20).ok());
  EXPECT_EQ(r.Take(), (std::vector<std::string>{"Stored b pool"}));
}

TEST(EntryEvents, EvictionsQuotaDemotionsAndPromotionsKeepAFollowerEqualToTheStore) {
  TempDir dir;
  auto s = Open(dir.path(), 16 * kMiB, 40 * kMiB);  // the disk quota gives up copies too
  Recorder r;
  std::map<std::string, std::set<std::string>> follower;
  s->SetEvents(&r);
  for (int i = 0; i < 40; ++i) {  // 120 MiB through a 16 MiB pool and a 40 MiB disk
    ASSERT_TRUE(Put(s.get(), "k" + std::to_string(i), 3 << 20, i).ok());
    if (i % 5 == 4) {
      ASSERT_TRUE(s->Erase("ns", "k" + std::to_string(i - 2)).ok());
    }
  }
  std::vector<uint8_t> out(3 << 20);
  int promoted = 0;
  for (const auto& [key, media] : Held(s.get())) {  // disk-only ones, read back into the pool
    if (media != std::set<std::string>{"disk"} || promoted == 3) continue;
    auto got = s->Get("ns", key, {out.data(), out.size()});
    if (got.status().IsNotFound()) continue;  // the quota gave it up meanwhile (eviction runs on)
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    ++promoted;
  }
  EXPECT_GT(promoted, 0);
  ASSERT_TRUE(s->Flush().ok());
  // The evictor may still be moving entries: the follower catches up with what it tells.
  std::map<std::string, std::set<std::string>> held;
  for (int i = 0; i < 100; ++i) {
    Recorder::Apply(r.Take(), &follower);
    held = Held(s.get());
    if (follower == held) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(follower, held);
  s->SetEvents(nullptr);
}

// Reads one message, (topic or a DEALER's empty delimiter, seq, payload): (seq, payload).
std::pair<int64_t, std::string> Recv(zmq::socket_t& sock) {
  std::vector<zmq::message_t> f;
  EXPECT_TRUE(zmq::recv_multipart(sock, std::back_inserter(f)));
  EXPECT_EQ(f.size(), 3u);
  int64_t seq = 0;
  for (size_t i = 0; i < 8 && f.size() == 3; ++i)
    seq = (seq << 8) | static_cast<const uint8_t*>(f[1].data())[i];
  return {seq, f.size() == 3 ? f[2].to_string() : std::string()};
}

// A payload's events as strings: "EcStored ns key node medium bytes", ...
std::vector<std::string> Decode(const std::string& payload, std::string* node) {
  msgpack::object_handle h = msgpack::unpack(payload.data(), payload.size());
  auto batch = h.get().as<std::vector<msgpack::object>>();
  EXPECT_EQ(batch.size(), 3u);
  *node = batch[2].as<std::string>();
  std::vector<std::string> out;
  for (const auto& e : batch[1].as<std::vector<msgpack::object>>()) {
    auto f = e.as<std::vector<msgpack::object>>();
    const std::string kind = f[0].as<std::string>();
    if (kind == "EcCleared") {
      out.push_back(kind + " " + f[1].as<std::string>() + " " +
                    std::to_string(f[2].as<uint64_t>()));
      continue;
    }
    std::string s = kind + " " + f[1].as<std::string>();
    for (const auto& k : f[2].as<std::vector<std::string>>()) s += " " + k;
    s += " " + f[3].as<std::string>() + " " + f[4].as<std::string>();
    if (kind == "EcStored") s += " " + std::to_string(f[5].as<uint64_t>());
    out.push_back(s);
  }
  return out;
}

std::vector<std::pair<int64_t, std::string>> Ask(zmq::context_t& ctx, const std::string& at,
                                                 const std::string& body) {
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::rcvtimeo, 5000);
  d.set(zmq::sockopt::linger, 0);
  d.connect(at);
  d.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  d.send(zmq::buffer(body));
  std::vector<std::pair<int64_t, std::string>> out;
  for (;;) {
    auto m = Recv(d);
    if (m.first == -1) return out;
    out.push_back(m);
    if (m.first == -2) return out;
  }
}

std::string BigEndian(int64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return s;
}

// A publisher's options with both sockets on unix paths in `dir`.
EventOptions InDir(const TempDir& dir) {
  EventOptions o;
  o.publish = "ipc://" + dir.sub("pub.sock");
  o.replay = "ipc://" + dir.sub("replay.sock");
  return o;
}

TEST(EventPublisher, PublishesTheFramingReplaysFromASequenceAndSnapshots) {
  TempDir dir;
  auto s = Open(dir.sub("store"), 32 * kMiB);
  EventOptions o = InDir(dir);
  o.node = "node-a";
  o.incarnation = 7;
  o.keep_batches = 4;
  o.first_seq = 1;
  auto pub = EventPublisher::Start(o, s.get());
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  s->SetEvents(pub->get());
  zmq::context_t ctx(1);
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "ec");
  sub.set(zmq::sockopt::rcvtimeo, 5000);
  sub.connect(o.publish);
  ASSERT_TRUE(Put(s.get(), "a", 4096).ok());
  std::string node;
  auto from1 = Ask(ctx, o.replay, BigEndian(1));  // what is queued is published first
  ASSERT_EQ(from1.size(), 2u);
  EXPECT_EQ(from1[0].first, 1);
  EXPECT_EQ(Decode(from1[0].second, &node), (std::vector<std::string>{"EcCleared node-a 7"}));
  EXPECT_EQ(node, "node-a");
  EXPECT_EQ(from1[1].first, 2);
  EXPECT_EQ(Decode(from1[1].second, &node),
            (std::vector<std::string>{"EcStored ns a node-a pool 4096"}));
  // Live: a SUB socket misses what is sent before it has connected, so puts go on until
  // one arrives; each batch is the put's, numbered one past the last.
  bool seen = false;
  int b_puts = 0;
  for (int i = 0; i < 6 || !seen; ++i, ++b_puts) {  // past the 4 batches kept
    ASSERT_LT(i, 100) << "nothing published reached the subscriber";
    ASSERT_TRUE(Put(s.get(), "b" + std::to_string(i), 4096).ok());
    zmq::pollitem_t item[] = {{sub.handle(), 0, ZMQ_POLLIN, 0}};
    while (zmq::poll(item, 1, std::chrono::milliseconds(seen ? 5000 : 100)) > 0) {
      auto [seq, payload] = Recv(sub);
      if (seq < 3) continue;  // "a"'s batch, where the subscriber connected in time for it
      EXPECT_EQ(Decode(payload, &node),
                (std::vector<std::string>{"EcStored ns b" + std::to_string(seq - 3) +
                                          " node-a pool 4096"}));
      seen = true;
      if (seq == 3 + i) break;
    }
  }
  auto old = Ask(ctx, o.replay, BigEndian(1));
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].first, -2);  // too old: take a snapshot
  auto snap = Ask(ctx, o.replay, "snapshot");
  ASSERT_FALSE(snap.empty());
  std::multiset<std::string> listed;
  for (const auto& [at, p] : snap) {
    EXPECT_EQ(at, 2 + b_puts);  // as of the last batch published
    for (const auto& e : Decode(p, &node)) listed.insert(e);
  }
  std::multiset<std::string> want;  // every copy the store lists
  for (const auto& [key, media] : Held(s.get()))
    for (const auto& m : media) want.insert("EcStored ns " + key + " node-a " + m + " 4096");
  EXPECT_EQ(listed, want);
  s->SetEvents(nullptr);
}

TEST(EventPublisher, ARestartsNumbersFollowTheLastStartsSoSubscribersSeeAGap) {
  TempDir dir;
  auto s = Open(dir.sub("store"), 8 * kMiB);
  const EventOptions o = InDir(dir);
  uint64_t last = 0;
  for (int start = 0; start < 2; ++start) {
    auto pub = EventPublisher::Start(o, s.get());
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    s->SetEvents(pub->get());
    ASSERT_TRUE(Put(s.get(), "k" + std::to_string(start), 4096).ok());
    s->SetEvents(nullptr);
    EXPECT_GT((*pub)->first_seq(), last);  // past every number of the start before
    zmq::context_t ctx(1);
    // A subscriber of the last start asks from its next number: this whole start, from its
    // EcCleared, while all of it is kept.
    auto got = Ask(ctx, o.replay, BigEndian(static_cast<int64_t>(last + 1)));
    ASSERT_GE(got.size(), 1u);
    EXPECT_EQ(got[0].first, static_cast<int64_t>((*pub)->first_seq()));
    std::string node;
    EXPECT_TRUE(Decode(got[0].second, &node)[0].starts_with("EcCleared"));
    last = (*pub)->first_seq() + (*pub)->batches() - 1;
  }
}

TEST(EventPublisher, ABadOrTakenEndpointIsAClearError) {
  TempDir dir;
  auto s = Open(dir.sub("store"), 8 * kMiB);
  EventOptions o;
  o.publish = "nonsense";
  auto bad = EventPublisher::Start(o, s.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("nonsense"), std::string::npos);
  // A port another socket holds: Unavailable, naming it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  o.publish = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto taken = EventPublisher::Start(o, s.get());
  close(fd);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(taken.status().message().find(o.publish), std::string::npos);
}

}  // namespace
}  // namespace ecstore::events

namespace ecstore::events {
namespace {

// A quiet publisher still numbers a batch every heartbeat: a subscriber sees a lost batch or
// a restart as a gap without waiting for traffic.
TEST(EventPublisher, AQuietPublisherSendsAnEmptyBatchEachHeartbeat) {
  TempDir dir;
  auto s = Open(dir.sub("store"), 8 * kMiB);
  EventOptions o = InDir(dir);
  o.first_seq = 1;
  o.heartbeat = std::chrono::milliseconds(100);
  auto pub = EventPublisher::Start(o, s.get());
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  zmq::context_t ctx(1);
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "ec");
  sub.set(zmq::sockopt::rcvtimeo, 2000);
  sub.connect(o.publish);
  auto [first, p1] = Recv(sub);
  auto [second, p2] = Recv(sub);
  EXPECT_EQ(second, first + 1);
  std::string node;
  EXPECT_TRUE(Decode(p2, &node).empty());  // no event, only its number
}

// Events the ring could not take are not silently gone: after what it held, subscribers are
// told to forget the node (EcCleared), so a lost event costs misses, never a wrong holder.
TEST(EventPublisher, AFullRingTellsSubscribersToForgetTheNode) {
  TempDir dir;
  auto s = Open(dir.sub("store"), 8 * kMiB);
  EventOptions o = InDir(dir);
  o.node = "node-a";
  o.first_seq = 1;
  o.ring_slots = 4;
  o.min_interval = std::chrono::seconds(30);  // the thread looks only when asked below
  auto pub = EventPublisher::Start(o, s.get());
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  s->SetEvents(pub->get());
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(Put(s.get(), "k" + std::to_string(i), 4096).ok());
  s->SetEvents(nullptr);
  zmq::context_t ctx(1);
  auto got = Ask(ctx, o.replay, BigEndian(2));  // answering flushes the ring first
  ASSERT_EQ(got.size(), 2u);
  std::string node;
  EXPECT_EQ(Decode(got[0].second, &node),
            (std::vector<std::string>{
                "EcStored ns k0 node-a pool 4096", "EcStored ns k1 node-a pool 4096",
                "EcStored ns k2 node-a pool 4096", "EcStored ns k3 node-a pool 4096"}));
  EXPECT_EQ(Decode(got[1].second, &node), (std::vector<std::string>{"EcCleared node-a 0"}));
}

// With CURVE, only a subscriber whose key the check allows gets a batch or an answer: one
// without CURVE, and one with a key it refuses, get nothing from either socket.
TEST(EventPublisher, WithCurveOnlyAnAllowedKeySubscribesOrAsks) {
  TempDir dir;
  auto s = Open(dir.sub("store"), 8 * kMiB);
  auto server = NewCurveKeys(), allowed = NewCurveKeys(), other = NewCurveKeys();
  if (!server.ok()) GTEST_SKIP() << server.status().ToString();
  EventOptions o = InDir(dir);
  o.first_seq = 1;
  o.curve_secret_key = server->secret_key;
  o.may_subscribe = [&](const std::string& key) { return key == allowed->public_key; };
  auto pub = EventPublisher::Start(o, s.get());
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  s->SetEvents(pub->get());
  zmq::context_t ctx(1);
  auto as = [&](zmq::socket_t& sock, const CurveKeys* keys) {
    sock.set(zmq::sockopt::rcvtimeo, 1500);
    // A refused socket keeps its request queued; closing the context must not wait for it.
    sock.set(zmq::sockopt::linger, 0);
    if (keys) {
      sock.set(zmq::sockopt::curve_serverkey, server->public_key);
      sock.set(zmq::sockopt::curve_publickey, keys->public_key);
      sock.set(zmq::sockopt::curve_secretkey, keys->secret_key);
    }
  };
  const CurveKeys* none = nullptr;
  for (const CurveKeys* keys : std::vector<const CurveKeys*>{&*allowed, &*other, none}) {
    SCOPED_TRACE(keys == &*allowed ? "allowed" : keys ? "other key" : "no CURVE");
    zmq::socket_t d(ctx, zmq::socket_type::dealer);
    as(d, keys);
    d.connect(o.replay);
    d.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
    d.send(zmq::str_buffer("snapshot"));
    std::vector<zmq::message_t> f;
    const bool answered = zmq::recv_multipart(d, std::back_inserter(f)).has_value();
    EXPECT_EQ(answered, keys == &*allowed);
    zmq::socket_t sub(ctx, zmq::socket_type::sub);
    as(sub, keys);
    sub.set(zmq::sockopt::subscribe, "ec");
    sub.connect(o.publish);
    bool got = false;
    for (int i = 0; i < 15 && !got; ++i) {
      ASSERT_TRUE(Put(s.get(), "k" + std::to_string(i), 4096).ok());
      zmq::pollitem_t item[] = {{sub.handle(), 0, ZMQ_POLLIN, 0}};
      got = zmq::poll(item, 1, std::chrono::milliseconds(100)) > 0;
    }
    EXPECT_EQ(got, keys == &*allowed);
  }
  EXPECT_GE((*pub)->refused(), 2u);
  s->SetEvents(nullptr);
  // A key that is not one is refused at start, with what to do.
  o.curve_secret_key = "not a key";
  auto bad = EventPublisher::Start(o, s.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("40 Z85 characters"), std::string::npos);
}

}  // namespace
}  // namespace ecstore::events
