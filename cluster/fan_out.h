// FanOut: a process's fixed pool of threads for a cluster call's parts on different nodes (a
// put's replicas and clears, a batch's per-node parts, a locate's asks), in place of a thread
// started per part. The caller runs its own parts too, taking the next one no thread has
// started, so a call never waits for a thread the pool cannot spare: a pool busy with
// parts stuck on a hung node's deadline delays other calls' parts, never blocks them.
//
//   std::vector<std::function<void()>> parts = {[&] { a = ask(0); }, [&] { b = ask(1); }};
//   FanOut::Process().Run(parts);   // returns once every part has run
//
// Thread rules: thread-safe; Run from any thread, not from inside a part.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace ecstore::cluster {

class FanOut {
 public:
  explicit FanOut(unsigned threads);
  ~FanOut();
  FanOut(const FanOut&) = delete;
  FanOut& operator=(const FanOut&) = delete;

  // The process's pool: twice the cores, 4 to 32 threads, started at first use.
  static FanOut& Process();
  unsigned threads() const { return static_cast<unsigned>(threads_.size()); }

  // Runs every part (the pool's threads and the caller's); returns when all have finished.
  void Run(const std::vector<std::function<void()>>& parts) EXCLUDES(mu_);

 private:
  struct Job {
    const std::vector<std::function<void()>>* parts;
    size_t next = 0;  // the next part no one has taken (FanOut::mu_)
    size_t done = 0;  // parts finished (FanOut::mu_)
  };
  // Counts one of the job's parts done, waking its caller after the last.
  void Finished(Job* job) REQUIRES(mu_);
  void Work() EXCLUDES(mu_);  // a thread's loop

  Mutex mu_;
  CondVar wake_, finished_;
  std::deque<Job*> queue_ GUARDED_BY(mu_);  // jobs with parts not yet taken, oldest first
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ecstore::cluster
