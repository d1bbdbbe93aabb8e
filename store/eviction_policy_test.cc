#include "store/eviction_policy.h"

#include <gtest/gtest.h>

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

TEST(EvictionPolicy, RecomputeCostDefaultsToOneThatGrowsWithRows) {
  TensorMeta small{DType::kBF16, {400, 3584}}, large{DType::kBF16, {2304, 3584}};
  EXPECT_NEAR(RecomputeCost(small), 19, 0.5);
  EXPECT_NEAR(RecomputeCost(large), 86, 0.5);
  large.recompute_cost = 5;  // an engine's own figure wins
  EXPECT_EQ(RecomputeCost(large), 5);
  EXPECT_EQ(NewEvictionPolicy("gdsf")->Name(), std::string("gdsf"));
  EXPECT_EQ(NewEvictionPolicy("fifo"), nullptr);
}

TEST(EvictionPolicy, AStoreRunsOnGdsfThroughPoolAndDisk) {
  testing::TempDir dir;
  Options o;
  o.pool_bytes = 16 * kMiB;
  o.disk_quota_bytes = 40 * kMiB;
  o.eviction_policy = "gdsf";
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
