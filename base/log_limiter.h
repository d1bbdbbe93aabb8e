// LogLimiter: yes at most once a period (ten seconds unless told), so that the warning of a
// condition that persists (a full disk, a failing compaction) says so without flooding the
// log.
//
//   if (limiter_.Allow()) spdlog::warn("...");
//
// Thread rules: thread-safe (one atomic; of callers racing for one period, one gets yes).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ecstore {

class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::seconds period = std::chrono::seconds(10))
      : period_(period.count()) {}
  bool Allow() {
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    int64_t prev = last_.load();
    return now - prev >= period_ && last_.compare_exchange_strong(prev, now);
  }

 private:
  const int64_t period_;
  std::atomic<int64_t> last_{INT64_MIN / 2};  // seconds on the steady clock
};

}  // namespace ecstore
