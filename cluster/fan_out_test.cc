#include "cluster/fan_out.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace ecstore::cluster {
namespace {

TEST(FanOut, EveryPartRunsOnceAndRunReturnsAfterTheLast) {
  FanOut pool(3);
  std::vector<std::atomic<int>> ran(50);
  std::vector<std::function<void()>> parts;
  for (size_t i = 0; i < ran.size(); ++i) parts.push_back([&, i] { ++ran[i]; });
  for (int round = 0; round < 20; ++round) pool.Run(parts);
  for (auto& r : ran) EXPECT_EQ(r.load(), 20);
}

TEST(FanOut, PartsRunAtOnceSoOneMayWaitForAnother) {
  FanOut pool(2);
  std::promise<void> first_ran;
  auto seen = first_ran.get_future();
  std::vector<std::function<void()>> parts = {
      [&] { EXPECT_EQ(seen.wait_for(std::chrono::seconds(10)), std::future_status::ready); },
      [&] { first_ran.set_value(); }};
  pool.Run(parts);
}

TEST(FanOut, ACallerFinishesItsPartsWhileEveryThreadIsStuckOnAnother) {
  FanOut pool(2);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  // Two callers' parts hold both threads (a hung node's deadline)...
  std::vector<std::function<void()>> stuck = {[gate] { gate.wait(); }, [gate] { gate.wait(); },
                                              [gate] { gate.wait(); }};
  std::thread holder([&] { pool.Run(stuck); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // ...and another caller's parts still run: on its own thread, one after another.
  std::atomic<int> done{0};
  std::vector<std::function<void()>> mine = {[&] { ++done; }, [&] { ++done; }, [&] { ++done; }};
  pool.Run(mine);
  EXPECT_EQ(done.load(), 3);
  release.set_value();
  holder.join();
}

}  // namespace
}  // namespace ecstore::cluster
