// EventRing: what the store tells under its lock arrives in order, whole, or is counted
// lost -- never torn, never reordered per producer -- under producers racing the consumer.
#include "events/event_ring.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

namespace ecstore::events {
namespace {

TEST(EventRing, EventsComeOutWholeAndInOrder) {
  EventRing ring(8);
  ASSERT_TRUE(ring.Push(true, Tier::kPool, 4096, "ns", "a"));
  ASSERT_TRUE(ring.Push(false, Tier::kDisk, 0, "other", std::string(kMaxKeyBytes, 'k')));
  EventRing::Event e;
  ASSERT_TRUE(ring.Pop(&e));
  EXPECT_TRUE(e.stored);
  EXPECT_EQ(e.medium, Tier::kPool);
  EXPECT_EQ(e.bytes, 4096u);
  EXPECT_EQ(e.ns, "ns");
  EXPECT_EQ(e.key, "a");
  ASSERT_TRUE(ring.Pop(&e));
  EXPECT_FALSE(e.stored);
  EXPECT_EQ(e.medium, Tier::kDisk);
  EXPECT_EQ(e.key, std::string(kMaxKeyBytes, 'k'));
  EXPECT_FALSE(ring.Pop(&e));
  EXPECT_EQ(ring.TakeLost(), 0u);
}

TEST(EventRing, AFullRingCountsWhatItCouldNotTakeAndTakesAgainOnceRead) {
  EventRing ring(5);  // rounded up to 8
  ASSERT_EQ(ring.capacity(), 8u);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(ring.Push(true, Tier::kPool, 1, "n", std::to_string(i)));
  EXPECT_FALSE(ring.Push(true, Tier::kPool, 1, "n", "8"));
  EXPECT_FALSE(ring.Push(true, Tier::kPool, 1, "n", "9"));
  EXPECT_EQ(ring.TakeLost(), 2u);
  EXPECT_EQ(ring.TakeLost(), 0u);
  EventRing::Event e;
  ASSERT_TRUE(ring.Pop(&e));
  EXPECT_EQ(e.key, "0");
  EXPECT_TRUE(ring.Push(true, Tier::kPool, 1, "n", "10"));  // the slot read is free again
  for (int i = 1; i < 8; ++i) {
    ASSERT_TRUE(ring.Pop(&e));
    EXPECT_EQ(e.key, std::to_string(i));
  }
  ASSERT_TRUE(ring.Pop(&e));
  EXPECT_EQ(e.key, "10");
}

TEST(EventRing, NamesLongerThanTheStoreTakesAreRefusedNotTruncated) {
  EventRing ring(4);
  EXPECT_FALSE(ring.Push(true, Tier::kPool, 1, std::string(kMaxNamespaceBytes + 1, 'n'), "k"));
  EXPECT_FALSE(ring.Push(true, Tier::kPool, 1, "n", std::string(kMaxKeyBytes + 1, 'k')));
  EXPECT_EQ(ring.TakeLost(), 2u);
  EventRing::Event e;
  EXPECT_FALSE(ring.Pop(&e));
}

TEST(EventRing, RacingProducersLoseNothingUncountedAndKeepTheirOwnOrder) {
  EventRing ring(256);
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t)
    producers.emplace_back([&ring, t] {
      for (int i = 0; i < kEach; ++i)
        ring.Push(true, Tier::kPool, static_cast<uint64_t>(i), "t" + std::to_string(t),
                  std::to_string(i));
    });
  std::map<std::string, int64_t> last;  // producer -> the last number seen from it
  uint64_t taken = 0, lost = 0;
  std::atomic<bool> done{false};
  std::thread joiner([&] {
    for (auto& p : producers) p.join();
    done = true;
  });
  EventRing::Event e;
  for (;;) {
    const bool finished = done.load();
    while (ring.Pop(&e)) {
      ++taken;
      const int64_t n = std::stoll(e.key);
      ASSERT_EQ(static_cast<uint64_t>(n), e.bytes) << "a torn event";
      auto [it, fresh] = last.emplace(e.ns, n);
      if (!fresh) {
        ASSERT_GT(n, it->second) << "reordered within " << e.ns;
        it->second = n;
      }
    }
    lost += ring.TakeLost();
    if (finished) break;
  }
  joiner.join();
  EXPECT_EQ(taken + lost, uint64_t{kThreads} * kEach);
  EXPECT_GT(taken, 0u);
}

}  // namespace
}  // namespace ecstore::events
