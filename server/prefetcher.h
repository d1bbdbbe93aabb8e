// Prefetcher: a server's PREFETCH hints and the one thread that acts on them.
//
// An engine's scheduler sees a request's items a step or more before a worker reads them;
// vLLM's connector then calls prefetch(keys) (python/ecstore/vllm.py). In process that is
// Store::Prefetch. Through a daemon the hint arrives as PREFETCH on the scheduler's own
// connection, which must not wait for the disk: the request is checked, queued and answered
// at once, and this thread reads the queued keys' disk-only entries into the pool, a hint's
// keys in one batch (Store::Prefetch: all reads in flight together, nothing evicted). The
// queue holds at most kMaxQueuedKeys keys; a hint that would pass it is dropped and counted
// (it is a hint: a later read fetches what it would have). Stop drops what is still queued.
//
//   Prefetcher p(store);
//   bool queued = p.Queue("qwen", {h1, h2});   // false: dropped, the queue is full
//
// Thread rules: Queue and counters from any thread (a connection's); Stop from the owner
// (the Server, before its store closes). The thread starts at the first Queue.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "net/protocol.h"
#include "store/store.h"

namespace ecstore::net {

class Prefetcher {
 public:
  static constexpr size_t kMaxQueuedKeys = 4096;
  explicit Prefetcher(Store* store) : store_(store) {}
  ~Prefetcher() { Stop(); }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Queues a hint of valid keys; false (dropped) when the queue is full or stopped.
  bool Queue(std::string ns, std::vector<std::string> keys) EXCLUDES(mu_);
  // Joins the thread; hints still queued are dropped. Idempotent.
  void Stop() EXCLUDES(mu_);
  struct Counters {
    uint64_t hints = 0;    // queued
    uint64_t dropped = 0;  // hints dropped: the queue was full
    uint64_t done = 0;     // hints acted on
  };
  Counters counters() const EXCLUDES(mu_);

 private:
  void Loop() EXCLUDES(mu_);

  Store* const store_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::pair<std::string, std::vector<std::string>>> queue_ GUARDED_BY(mu_);
  size_t queued_keys_ GUARDED_BY(mu_) = 0;
  Counters counters_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // started by the first Queue (under mu_), joined by Stop
};

// PREFETCH: the keys checked (a bad one is the answer's InvalidArgument, nothing queued),
// queued, and answered OK with queued u8. A malformed body is the outer status: answer it,
// then close the connection.
Result<Answer> AnswerPrefetch(Prefetcher* prefetcher, BodyReader* r);

}  // namespace ecstore::net
