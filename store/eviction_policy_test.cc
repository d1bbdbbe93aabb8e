#include "store/eviction_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>

#include "store/store.h"
#include "tests/test_util.h"

namespace ecstore {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(EvictionPolicy, LruEvictsTheLeastRecentlyUsed) {
  LruPolicy p;
  p.Insert(1, kMiB, 10);
  p.Insert(2, kMiB, 10);
  p.Insert(3, kMiB, 10);
  p.Touch(1);
  EXPECT_EQ(p.Coldest(3), (std::vector<uint64_t>{2, 3, 1}));
  p.Remove(3);
  EXPECT_EQ(p.Coldest(3), (std::vector<uint64_t>{2, 1}));
}

// The intrusive LRU against a plain list, over a random mix of inserts (new and again),
// touches and removes.
TEST(EvictionPolicy, LruMatchesAPlainListUnderRandomUse) {
  LruPolicy p;
  std::list<uint64_t> model;  // front = most recent
  std::mt19937_64 rng(3);
  auto drop = [&](uint64_t id) { model.remove(id); };
  for (int i = 0; i < 20000; ++i) {
    const uint64_t id = rng() % 64;
    const bool held = std::find(model.begin(), model.end(), id) != model.end();
    switch (rng() % 3) {
      case 0:
        p.Insert(id, kMiB, 1);
        drop(id);
        model.push_front(id);
        break;
      case 1:
        p.Touch(id);
        if (held) {
          drop(id);
          model.push_front(id);
        }
        break;
      default:
        p.Remove(id);
        drop(id);
    }
    ASSERT_EQ(p.size(), model.size());
    if (i % 97 == 0) {
      ASSERT_EQ(p.Coldest(1000), std::vector<uint64_t>(model.rbegin(), model.rend())) << i;
    }
  }
  while (!model.empty()) {
    ASSERT_EQ(p.Coldest(1), std::vector<uint64_t>{model.back()});
    p.Remove(model.back());
    model.pop_back();
  }
  EXPECT_TRUE(p.Coldest(1).empty());
}

TEST(EvictionPolicy, GdsfKeepsWhatIsDearToRecomputePerByte) {
  GdsfPolicy p;
  p.Insert(1, 58 * kMiB, 86);  // a large entry: 1.5 ms a MiB
  p.Insert(2, 3 * kMiB, 19);   // a small one: 6.3 ms a MiB
  EXPECT_EQ(p.Coldest(1), (std::vector<uint64_t>{1}));
  for (int i = 0; i < 5; ++i) p.Touch(1);  // hits make the large one worth keeping
  EXPECT_EQ(p.Coldest(1), (std::vector<uint64_t>{2}));
}

TEST(EvictionPolicy, GdsfAgesEntriesThatStopBeingHit) {
  GdsfPolicy p;
  p.Insert(1, kMiB, 10);
  for (int i = 0; i < 3; ++i) p.Touch(1);  // priority 40, then never hit again
  // Evicting from the cold end raises the clock: newer entries end up above the old hot one.
  for (uint64_t id = 2; id < 10; ++id) {
    p.Insert(id, kMiB, 10);
    auto cold = p.Coldest(1);
    if (cold[0] != 1) p.Remove(cold[0]);
  }
  EXPECT_EQ(p.Coldest(1), (std::vector<uint64_t>{1}));
}

TEST(EvictionPolicy, FreqKeepsWhatIsRequestedOftenAndDearPerByte) {
  FreqPolicy p;
  p.Insert(1, 58 * kMiB, 86);  // 1.5 ms a MiB
  p.Insert(2, 3 * kMiB, 19);   // 6.3 ms a MiB
  EXPECT_EQ(p.Coldest(1), (std::vector<uint64_t>{1}));
  for (int i = 0; i < 6; ++i) p.Touch(1);  // requested often: worth its bytes
  EXPECT_EQ(p.Coldest(1), (std::vector<uint64_t>{2}));
}

// Requests count per key, held or not: an entry brought back (a new id) keeps its history,
// and history fades as other keys are requested.
TEST(EvictionPolicy, FreqCountsRequestsOfKeysItDoesNotHoldAndLetsThemFade) {
  FreqPolicy p;
  for (int i = 0; i < 5; ++i) p.Requested(100);  // misses of key 100
  p.Insert(1, kMiB, 10, 200);
  p.Insert(2, kMiB, 10, 100);  // key 100 arrives under a new id
  EXPECT_EQ(p.Coldest(1), (std::vector<uint64_t>{1}));
  const uint32_t before = p.Estimate(100);
  for (int i = 0; i < 64; ++i) p.Requested(1000 + i);  // 4 x 16 requests: a halving
  EXPECT_EQ(p.Estimate(100), before / 2);
  for (int i = 0; i < 20; ++i) p.Touch(1);
  EXPECT_EQ(p.Coldest(1), (std::vector<uint64_t>{2}));
  p.Remove(2);
  EXPECT_EQ(p.Coldest(2), (std::vector<uint64_t>{1}));
  EXPECT_EQ(p.size(), 1u);
}

TEST(EvictionPolicy, RecomputeCostDefaultsToOneThatGrowsWithRows) {
  TensorMeta small{DType::kBF16, {400, 3584}}, large{DType::kBF16, {2304, 3584}};
  EXPECT_NEAR(RecomputeCost(small), 19, 0.5);
  EXPECT_NEAR(RecomputeCost(large), 86, 0.5);
  large.recompute_cost = 5;  // an engine's own figure wins
  EXPECT_EQ(RecomputeCost(large), 5);
  EXPECT_EQ(NewEvictionPolicy("gdsf")->Name(), std::string("gdsf"));
  EXPECT_EQ(NewEvictionPolicy("freq")->Name(), std::string("freq"));
  EXPECT_EQ(NewEvictionPolicy("fifo"), nullptr);
}

class StorePolicy : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(EvictionPolicy, StorePolicy, ::testing::Values("gdsf", "freq"));

TEST_P(StorePolicy, RunsThroughPoolAndDisk) {
  testing::TempDir dir;
  Options o;
  o.pool_bytes = 16 * kMiB;
  o.disk_quota_bytes = 40 * kMiB;
  o.eviction_policy = GetParam();
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const uint64_t n = 3 * kMiB;
  for (int i = 0; i < 20; ++i) {  // 60 MiB through a 16 MiB pool and a 40 MiB quota
    auto p = testing::Payload(i, n);
    ASSERT_TRUE((*s)->Put("ns", "k" + std::to_string(i),
                          {DType::kBF16, {static_cast<int64_t>(n / 2)}}, {p.data(), n})
                    .ok());
  }
  ASSERT_TRUE((*s)->Flush().ok());
  int present = 0;
  std::vector<uint8_t> got(n);
  for (int i = 0; i < 20; ++i) {
    auto r = (*s)->Get("ns", "k" + std::to_string(i), {got.data(), n});
    if (!r.ok()) continue;
    ++present;
    EXPECT_TRUE(got == testing::Payload(i, n)) << i;
  }
  EXPECT_GE(present, 10);  // what the quota holds, byte-exact
  EXPECT_GT((*s)->Stats()->disk().evictions, 0u);
  EXPECT_TRUE(Store::Open(dir.sub("x"),
                          [&] {
                            auto bad = o;
                            bad.eviction_policy = "fifo";
                            return bad;
                          }())
                  .status()
                  .IsInvalidArgument());
}

}  // namespace
}  // namespace ecstore
