// EventPublisher: where a store's entries are, as a stream routers follow -- the framing of
// vLLM's KV events (and Mooncake's), so their subscribers and relays work: a ZMQ PUB socket
// sends frames (topic, 8-byte big-endian sequence number -- from the start time in µs, so
// that a restart reads as a gap -- and msgpack payload), the payload
// [timestamp, [events], node]; an event is one of
//   ["EcStored", ns, [key, ...], node, medium, bytes]
//   ["EcRemoved", ns, [key, ...], node, medium]
//   ["EcCleared", node, incarnation]        (the first batch of a start: forget this node)
// with medium "device", "pool" or "disk". A ROUTER socket answers a request frame of 8
// bytes (a sequence number) with the batches kept from it on, each (seq, payload), then
// (-1, ""); or with (-2, "") where they are no longer kept (a number from before this start
// gets the whole start while it is all kept); and a request "snapshot" with
// (seq, payload) batches of EcStored for every copy held as of batch seq, then (-1, "").
// The store tells events under its metadata lock into a ring of fixed slots made at start
// (events/event_ring.h): no allocation, lock or system call there. A thread of the
// publisher's takes them every min_interval and sends them in batches -- one wake-up per
// interval, never per put. A ring that was full publishes EcCleared after what it held (a
// subscriber forgets the node and takes a snapshot: in doubt, a miss). A put never waits on
// a subscriber, and a slow one loses batches (ZMQ's high water mark) which it replays by
// sequence number.
//
//   auto pub = EventPublisher::Start({.publish = "tcp://*:5557", .replay = "tcp://*:5558",
//                                     .node = "node-a"}, store);
//   store->SetEvents(pub->get());   // ... store->SetEvents(nullptr) before pub goes
//
// Thread rules: Stored/Removed from any thread (the store's, under its lock); Start and the
// destructor from the owner's thread. The sockets are the publisher thread's alone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "cache/cache.h"
#include "events/event_ring.h"
#include "store/entry_hooks.h"

namespace ecstore::events {

struct EventOptions {
  std::string publish;       // the PUB socket's endpoint, e.g. tcp://127.0.0.1:5557
  std::string replay;        // the ROUTER socket's (empty: none)
  std::string node;          // this node's name in every batch
  uint64_t incarnation = 0;  // told in the first batch's EcCleared
  std::string topic = "ec";
  uint64_t first_seq = 0;      // the first batch's sequence number; 0: the start time in µs
  size_t keep_batches = 4096;  // replayable
  size_t max_events = 1024;    // per batch
  // Batches are sent at most once per interval: under a stream of puts the publisher wakes
  // once per interval, not once per put (the lag this adds is at most the interval).
  std::chrono::microseconds min_interval{2000};
  // Events the store may tell between two intervals before the ring is full.
  size_t ring_slots = 8192;
  // Where nothing was published for this long, an empty batch is: a subscriber sees a lost
  // batch or a restart as a gap in the numbers without waiting for traffic. 0: none.
  std::chrono::milliseconds heartbeat{0};
  // CURVE (ZeroMQ's authenticated encryption) on both sockets where set: this node's secret
  // key (Z85, 40 characters). Each connecting subscriber's public key (Z85) is then put to
  // may_subscribe, on the publisher's thread (ZAP); false, or none given, refuses it.
  std::string curve_secret_key;
  std::function<bool(const std::string& client_key)> may_subscribe;
};

// A CURVE key pair in Z85 (zmq_curve_keypair), and the public key of a secret one;
// InvalidArgument where `secret` is not 40 Z85 characters, Unavailable where this libzmq
// has no CURVE.
struct CurveKeys {
  std::string public_key, secret_key;
};
Result<CurveKeys> NewCurveKeys();
Result<std::string> CurvePublicKey(const std::string& secret);

class EventPublisher : public EntryEvents {
 public:
  // Binds the sockets (InvalidArgument naming a bad endpoint, Unavailable where one is in
  // use) and publishes EcCleared. `store` is listed for snapshots; it must outlive this.
  static Result<std::unique_ptr<EventPublisher>> Start(EventOptions options, Cache* store);
  ~EventPublisher() override;

  void Stored(std::string_view ns, std::string_view key, Tier medium, uint64_t bytes) override;
  void Removed(std::string_view ns, std::string_view key, Tier medium) override;

  uint64_t batches() const { return seq_.load() - (first_ - 1); }  // published so far
  uint64_t first_seq() const { return first_; }                    // this start's EcCleared batch
  uint64_t events() const { return events_.load(); }               // in them
  uint64_t replays() const { return replays_.load(); }             // replay and snapshot requests
  uint64_t refused() const { return refused_.load(); }             // subscribers CURVE refused

 private:
  using Event = EventRing::Event;
  struct Sockets;
  struct Wake {  // an eventfd the publisher thread polls beside its sockets
    Wake();
    ~Wake();
    void Raise() const;
    void Clear() const;
    const int fd;
  };
  EventPublisher(EventOptions o, Cache* store);
  void Run();
  size_t Flush();  // the queue, in batches of max_events; the events sent
  void Publish(const std::string& payload);
  void Answer();        // one ROUTER request
  void Authenticate();  // one ZAP request: a subscriber's CURVE key, allowed or refused
  std::string Encode(const std::vector<Event>& events, size_t from, size_t to) const;
  std::string Cleared() const;  // EcCleared: forget what this node held

  const EventOptions opt_;
  Cache* const store_;
  std::unique_ptr<Sockets> sockets_;
  const Wake wake_;
  EventRing ring_;
  std::deque<std::pair<uint64_t, std::string>> kept_;  // the thread's: the last batches
  std::chrono::steady_clock::time_point last_sent_{};  // the thread's: the last batch's time
  const uint64_t first_;
  std::atomic<uint64_t> seq_, events_{0}, replays_{0}, refused_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ecstore::events
