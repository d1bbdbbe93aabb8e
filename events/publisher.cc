#include "events/publisher.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <msgpack.hpp>
#include <zmq.hpp>

namespace ecstore::events {

namespace {

constexpr int64_t kEnd = -1;     // the last frame of a reply
constexpr int64_t kTooOld = -2;  // the batches asked for are no longer kept
constexpr size_t kSnapshotPage = 4096;

std::string BigEndian(int64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return s;
}

int64_t FromBigEndian(const zmq::message_t& m) {
  int64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

// The frames of one message waiting on `s` (none where nothing waits), never blocking.
std::vector<zmq::message_t> TakeMessage(zmq::socket_t& s) {
  std::vector<zmq::message_t> frames;
  for (;;) {
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::dontwait)) break;
    const bool more = m.more();
    frames.push_back(std::move(m));
    if (!more) break;
  }
  return frames;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct EventPublisher::Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  zmq::socket_t zap{ctx, zmq::socket_type::rep};  // with CURVE: libzmq asks it of each peer
  bool replay = false, curve = false;
};

Result<CurveKeys> NewCurveKeys() {
  if (!zmq_has("curve")) return Status::Unavailable("this libzmq was built without CURVE");
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return Status::IOError(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  return CurveKeys{pub, sec};
}

Result<std::string> CurvePublicKey(const std::string& secret) {
  if (!zmq_has("curve")) return Status::Unavailable("this libzmq was built without CURVE");
  char pub[41];
  if (secret.size() != 40 || zmq_curve_public(pub, secret.c_str()) != 0)
    return Status::InvalidArgument(
        "a CURVE secret key is 40 Z85 characters (make one with `ec-store events-keys`)");
  return std::string(pub);
}

namespace {
// Both sockets: peers' messages are small (a subscription, a sequence number, "snapshot"),
// so a larger one is refused before it is buffered; with a key, CURVE and ZAP.
Status Harden(zmq::socket_t& s, const std::string& secret_key) {
  try {
    s.set(zmq::sockopt::maxmsgsize, int64_t{4096});
    if (secret_key.empty()) return Status::Ok();
    s.set(zmq::sockopt::curve_server, true);
    s.set(zmq::sockopt::curve_secretkey, secret_key);
    s.set(zmq::sockopt::zap_domain, std::string("ec-store-events"));
    return Status::Ok();
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(std::string("events: the CURVE secret key is refused: ") +
                                   e.what() + " (40 Z85 characters: `ec-store events-keys`)");
  }
}
}  // namespace

EventPublisher::Wake::Wake() : fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
EventPublisher::Wake::~Wake() {
  if (fd >= 0) close(fd);
}
void EventPublisher::Wake::Raise() const {
  const uint64_t one = 1;
  if (write(fd, &one, sizeof one) < 0) {
  }  // EAGAIN: already raised past the counter's limit; the thread wakes anyway
}
void EventPublisher::Wake::Clear() const {
  uint64_t n;
  if (read(fd, &n, sizeof n) < 0) {
  }  // EAGAIN: not raised
}

Result<std::unique_ptr<EventPublisher>> EventPublisher::Start(EventOptions options, Cache* store) {
  std::unique_ptr<EventPublisher> p(new EventPublisher(std::move(options), store));
  if (p->wake_.fd < 0)
    return Status::IOError(std::string("events: eventfd: ") + std::strerror(errno));
  p->sockets_ = std::make_unique<Sockets>();
  auto bind = [](zmq::socket_t& s, const std::string& at, const char* what) -> Status {
    try {
      s.set(zmq::sockopt::linger, 0);
      s.bind(at);
      return Status::Ok();
    } catch (const zmq::error_t& e) {
      const std::string why = std::string(what) + " endpoint " + at + ": " + e.what();
      if (e.num() == EADDRINUSE) return Status::Unavailable(why + " (another process has it)");
      return Status::InvalidArgument(why + " (give tcp://HOST:PORT or ipc://PATH)");
    }
  };
  const std::string& key = p->opt_.curve_secret_key;
  if (!key.empty()) {
    EC_RETURN_IF_ERROR(CurvePublicKey(key).status());
    p->sockets_->zap.bind("inproc://zeromq.zap.01");  // before any peer can connect
    p->sockets_->curve = true;
  }
  EC_RETURN_IF_ERROR(Harden(p->sockets_->pub, key));
  EC_RETURN_IF_ERROR(Harden(p->sockets_->router, key));
  EC_RETURN_IF_ERROR(bind(p->sockets_->pub, p->opt_.publish, "--events"));
  if (!p->opt_.replay.empty()) {
    EC_RETURN_IF_ERROR(bind(p->sockets_->router, p->opt_.replay, "--events-replay"));
    p->sockets_->replay = true;
  }
  // The first batch: whatever a subscriber held of this node is gone (a start has an empty
  // pool); what the node holds on disk comes with a snapshot.
  p->Publish(p->Cleared());
  p->thread_ = std::thread([q = p.get()] { q->Run(); });
  return p;
}

// A start's numbers begin at its start time in microseconds (unless told otherwise), so
// they follow the last start's: a subscriber of that one sees a gap, and replays or takes a
// snapshot, rather than taking new batches for ones it has seen.
EventPublisher::EventPublisher(EventOptions o, Cache* store)
    : opt_(std::move(o)),
      store_(store),
      ring_(opt_.ring_slots),
      first_(opt_.first_seq
                 ? opt_.first_seq
                 : static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count())),
      seq_(first_ - 1) {}

EventPublisher::~EventPublisher() {
  stop_ = true;
  wake_.Raise();
  if (thread_.joinable()) thread_.join();
}

void EventPublisher::Stored(std::string_view ns, std::string_view key, Tier medium,
                            uint64_t bytes) {
  ring_.Push(true, medium, bytes, ns, key);
}

void EventPublisher::Removed(std::string_view ns, std::string_view key, Tier medium) {
  ring_.Push(false, medium, 0, ns, key);
}

std::string EventPublisher::Cleared() const {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack(Now());
  pk.pack_array(1);
  pk.pack_array(3);
  pk.pack(std::string("EcCleared"));
  pk.pack(opt_.node);
  pk.pack(opt_.incarnation);
  pk.pack(opt_.node);
  return std::string(buf.data(), buf.size());
}

std::string EventPublisher::Encode(const std::vector<Event>& events, size_t from, size_t to) const {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack(Now());
  pk.pack_array(static_cast<uint32_t>(to - from));
  for (size_t i = from; i < to; ++i) {
    const Event& e = events[i];
    pk.pack_array(e.stored ? 6 : 5);
    pk.pack(std::string(e.stored ? "EcStored" : "EcRemoved"));
    pk.pack(e.ns);
    pk.pack_array(1);
    pk.pack(e.key);
    pk.pack(opt_.node);
    pk.pack(std::string(TierName(e.medium)));
    if (e.stored) pk.pack(e.bytes);
  }
  pk.pack(opt_.node);
  return std::string(buf.data(), buf.size());
}

void EventPublisher::Publish(const std::string& payload) {
  const uint64_t seq = seq_.load() + 1;
  const std::string seq_be = BigEndian(static_cast<int64_t>(seq));
  auto& pub = sockets_->pub;
  // PUB never blocks: a subscriber past its high water mark loses the batch, and replays.
  pub.send(zmq::buffer(opt_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  pub.send(zmq::buffer(seq_be), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  last_sent_ = std::chrono::steady_clock::now();
  kept_.emplace_back(seq, payload);
  if (kept_.size() > opt_.keep_batches) kept_.pop_front();
  seq_.store(seq);
}

size_t EventPublisher::Flush() {
  std::vector<Event> events;
  for (Event e; ring_.Pop(&e);) events.push_back(std::move(e));
  for (size_t at = 0; at < events.size(); at += opt_.max_events) {
    const size_t to = std::min(events.size(), at + opt_.max_events);
    Publish(Encode(events, at, to));
    events_ += to - at;
  }
  if (const uint64_t lost = ring_.TakeLost(); lost > 0) {
    // What a subscriber holds of this node may be wrong now: it forgets it (a miss, never a
    // wrong holder) and asks for a snapshot.
    spdlog::warn(
        "events: {} event(s) did not fit the ring of {}; told subscribers to forget "
        "node {} (EcCleared) and take a snapshot; raise the ring if this repeats",
        lost, ring_.capacity(), opt_.node);
    Publish(Cleared());
  }
  return events.size();
}

void EventPublisher::Answer() {
  auto& r = sockets_->router;
  std::vector<zmq::message_t> req = TakeMessage(r);
  if (req.size() < 2) return;
  ++replays_;
  const zmq::message_t& id = req.front();
  const zmq::message_t& body = req.back();
  auto reply = [&](int64_t seq, const std::string& payload) {
    r.send(zmq::buffer(id.data(), id.size()), zmq::send_flags::sndmore);
    r.send(zmq::buffer("", 0), zmq::send_flags::sndmore);
    r.send(zmq::buffer(BigEndian(seq)), zmq::send_flags::sndmore);
    r.send(zmq::buffer(payload));
  };
  Flush();  // what is queued is published first: a reply is as of seq_ or later
  if (body.to_string_view() == "snapshot") {
    const auto seq = static_cast<int64_t>(seq_.load());
    std::vector<Event> page;
    Status st = store_->ListPages(kSnapshotPage, [&](std::vector<EntryInfo>&& entries) {
      page.clear();
      for (const EntryInfo& e : entries)
        for (Tier t : {Tier::kDevice, Tier::kPool, Tier::kDisk})
          if (e.tiers.has(t)) page.push_back({true, t, e.bytes, e.ns, e.key});
      if (!page.empty()) reply(seq, Encode(page, 0, page.size()));
      return true;
    });
    if (!st.ok()) spdlog::warn("events: a snapshot's listing failed: {}", st.ToString());
  } else if (body.size() == 8) {
    const int64_t from = FromBigEndian(body);
    // From before the window: too old, unless the window still holds this start's every
    // batch (a subscriber of the last start: EcCleared and all since, from the start).
    if (!kept_.empty() && from < static_cast<int64_t>(kept_.front().first) &&
        kept_.front().first != first_)
      reply(kTooOld, "");  // then a snapshot, and the stream from its sequence number
    else
      for (const auto& [seq, payload] : kept_)
        if (static_cast<int64_t>(seq) >= from) reply(static_cast<int64_t>(seq), payload);
  }
  reply(kEnd, "");
}

// ZAP (RFC 27): libzmq asks, for each peer's CURVE handshake, whether its key may in.
void EventPublisher::Authenticate() {
  auto& z = sockets_->zap;
  std::vector<zmq::message_t> req = TakeMessage(z);
  if (req.empty()) return;
  // version, request id, domain, address, identity, mechanism, credentials...
  char key[41] = {0};
  const bool curve = req.size() >= 7 && req[5].to_string_view() == "CURVE" && req[6].size() == 32 &&
                     zmq_z85_encode(key, static_cast<const uint8_t*>(req[6].data()), 32);
  const bool ok = curve && opt_.may_subscribe && opt_.may_subscribe(key);
  if (!ok) {
    ++refused_;
    spdlog::warn(
        "events: refused a subscriber from {} (key {}): no principal with the events "
        "right has that CURVE key",
        req.size() > 3 ? req[3].to_string() : "?", curve ? key : "none");
  }
  const std::string id = req.size() > 1 ? req[1].to_string() : "";
  z.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
  z.send(zmq::buffer(id), zmq::send_flags::sndmore);
  z.send(zmq::buffer(std::string(ok ? "200" : "400")), zmq::send_flags::sndmore);
  z.send(zmq::buffer(std::string(ok ? "OK" : "not allowed")), zmq::send_flags::sndmore);
  z.send(zmq::buffer(std::string(ok ? key : "")), zmq::send_flags::sndmore);
  z.send(zmq::str_buffer(""));
}

void EventPublisher::Run() {
  pthread_setname_np(pthread_self(), "ec-events");
  const auto interval = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     opt_.min_interval + std::chrono::microseconds(999)),
                                 std::chrono::milliseconds(1));
  while (!stop_) {
    zmq::pollitem_t items[] = {{nullptr, wake_.fd, ZMQ_POLLIN, 0},
                               {sockets_->zap.handle(), 0, ZMQ_POLLIN, 0},
                               {sockets_->router.handle(), 0, ZMQ_POLLIN, 0}};
    // The ZAP socket is polled only with CURVE on; an unbound one would never be ready.
    if (!sockets_->curve) items[1] = {nullptr, -1, 0, 0};
    // The ring is looked at every interval: the store raises nothing under its lock, and
    // what comes meanwhile joins one batch.
    zmq::poll(items, sockets_->replay ? 3 : 2, interval);
    if (items[0].revents & ZMQ_POLLIN) wake_.Clear();
    if (sockets_->curve && (items[1].revents & ZMQ_POLLIN)) Authenticate();
    if (sockets_->replay && (items[2].revents & ZMQ_POLLIN)) Answer();
    if (Flush() == 0 && opt_.heartbeat.count() > 0 &&
        std::chrono::steady_clock::now() - last_sent_ >= opt_.heartbeat) {
      Publish(Encode({}, 0, 0));  // an empty batch: its number tells a gap
    }
  }
  Flush();
}

}  // namespace ecstore::events
