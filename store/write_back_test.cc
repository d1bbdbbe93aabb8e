// Write-back: new pool entries are spilled in the background and stay in the pool, so a full
// pool makes room at once; and GetMany copies its pool hits out while its disk reads run.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "store/store.h"
#include "tests/test_util.h"

namespace ecstore {
namespace {

using testing::Bf16;
using testing::Payload;
using testing::TempDir;

constexpr uint64_t kMiB = 1 << 20;

Status PutSeeded(Store* s, const std::string& key, uint64_t seed, uint64_t bytes) {
  auto p = Payload(seed, bytes);
  return s->Put("ns", key, Bf16(bytes), {p.data(), bytes});
}

// Waits (up to 10 s) until every key has a disk copy.
bool AllOnDisk(Store* s, int n) {
  for (int tries = 0; tries < 1000; ++tries) {
    int on_disk = 0;
    for (int i = 0; i < n; ++i)
      on_disk += s->Lookup("ns", "k" + std::to_string(i))->tiers.has(Tier::kDisk);
    if (on_disk == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(WriteBack, NewEntriesReachDiskWithoutAFlushAndStayInThePool) {
  TempDir dir;
  Options o;
  o.pool_bytes = 64 * kMiB;  // far below the watermark: nothing is evicted
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(PutSeeded(s->get(), "k" + std::to_string(i), i, kMiB).ok());
  ASSERT_TRUE(AllOnDisk(s->get(), 4));
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE((*s)->Lookup("ns", "k" + std::to_string(i))->tiers.has(Tier::kPool)) << i;
  EXPECT_EQ((*s)->Stats()->pool().evictions, 0u);
  EXPECT_GE((*s)->Stats()->pool().spills, 4u);
}

// A pool full of written-back entries takes a Put at once, without waiting for a spill:
// with put_wait 0 it would otherwise be Busy (as it is with write_back off).
TEST(WriteBack, AFullPoolOfCleanEntriesTakesAPutWithoutWaiting) {
  TempDir dir;
  Options o;
  o.pool_bytes = 8 * kMiB;
  o.high_watermark = 0.999;  // the background evictor stays out of it
  o.low_watermark = 0.99;
  o.put_wait = std::chrono::milliseconds(0);
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(PutSeeded(s->get(), "k" + std::to_string(i), i, kMiB).ok());
  ASSERT_TRUE(AllOnDisk(s->get(), 8));
  Status st = PutSeeded(s->get(), "k8", 8, kMiB);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<uint8_t> got(kMiB);
  for (int i = 0; i <= 8; ++i) {  // the one evicted to make room is read back from disk
    ASSERT_TRUE((*s)->Get("ns", "k" + std::to_string(i), {got.data(), kMiB}).ok()) << i;
    EXPECT_TRUE(got == Payload(i, kMiB)) << i;
  }
}

TEST(WriteBack, OffMeansWrittenOnlyWhenEvictedOrFlushed) {
  TempDir dir;
  Options o;
  o.pool_bytes = 64 * kMiB;
  o.write_back = false;
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(PutSeeded(s->get(), "k0", 0, kMiB).ok());
  EXPECT_EQ((*s)->Stats()->pool().spills, 0u);
  ASSERT_TRUE((*s)->Flush().ok());
  EXPECT_TRUE((*s)->Lookup("ns", "k0")->tiers.has(Tier::kDisk));
}

// GetMany over keys in the pool and keys on disk only: every buffer gets its own bytes, each
// pool key counts one hit and each disk key one promotion.
TEST(WriteBack, GetManyServesPoolAndDiskKeysTogether) {
  TempDir dir;
  Options o;
  o.pool_bytes = 64 * kMiB;
  {
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(PutSeeded(s->get(), "k" + std::to_string(i), i, kMiB).ok());
    ASSERT_TRUE((*s)->Close().ok());
  }
  auto s = Store::Open(dir.path(), o);  // k0..k2 on disk only
  ASSERT_TRUE(s.ok());
  for (int i = 3; i < 6; ++i)
    ASSERT_TRUE(PutSeeded(s->get(), "k" + std::to_string(i), i, kMiB).ok());
  std::vector<std::string> keys = {"k3", "k0", "k4", "k1", "absent", "k5", "k2"};
  std::vector<std::vector<uint8_t>> bufs(keys.size(), std::vector<uint8_t>(kMiB));
  std::vector<std::span<uint8_t>> dsts;
  for (auto& b : bufs) dsts.emplace_back(b.data(), b.size());
  auto got = (*s)->GetMany("ns", keys, dsts);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t j = 0; j < keys.size(); ++j) {
    if (keys[j] == "absent") {
      EXPECT_TRUE(got[j].status().IsNotFound()) << got[j].status().ToString();
      continue;
    }
    ASSERT_TRUE(got[j].ok()) << keys[j] << ": " << got[j].status().ToString();
    EXPECT_EQ(got[j]->bytes, kMiB);
    EXPECT_TRUE(bufs[j] == Payload(keys[j][1] - '0', kMiB)) << keys[j];
  }
  StoreStats st = *(*s)->Stats();
  EXPECT_EQ(st.pool().promotions, 3u);
  EXPECT_EQ(st.pool().hits, 3u) << "the pool keys; the promoted ones count as disk hits";
  EXPECT_EQ(st.disk().hits, 3u);
  EXPECT_EQ(st.pool().misses, 1u);
}

}  // namespace
}  // namespace ecstore
