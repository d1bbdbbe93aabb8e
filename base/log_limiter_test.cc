#include "base/log_limiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ecstore {
namespace {

TEST(LogLimiter, OncePerPeriodAndOneWinnerAmongRacers) {
  LogLimiter limiter;  // ten seconds: nothing below passes twice
  EXPECT_TRUE(limiter.Allow()) << "the first warning is never held back";
  EXPECT_FALSE(limiter.Allow());
  LogLimiter racing;
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) allowed += racing.Allow() ? 1 : 0;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed, 1);
  LogLimiter every(std::chrono::seconds(0));  // a zero period holds nothing back
  EXPECT_TRUE(every.Allow());
  EXPECT_TRUE(every.Allow());
}

}  // namespace
}  // namespace ecstore
