// Write-back: new pool entries are spilled in the background and stay in the pool, so a full
// pool makes room at once; and GetMany copies its pool hits out while its disk reads run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/test_util.h"
#include "base/units.h"
#include "disk/record.h"
#include "store/store.h"
#include "store/store_test_util.h"

namespace ecstore {
namespace {

using testing::Bf16;
using testing::OpenWithPool;
using testing::Payload;
using testing::TempDir;

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

// A Put of the bytes (and meta) a key already holds keeps the stored entry: no tombstone for its
// written-back copy and no second write, which made a daemon's re-puts of the same entries
// 0.37-0.42 x a socket stream instead of 0.83 x (remote_put, when it re-put the same keys).
TEST(WriteBack, APutOfTheBytesAKeyHoldsKeepsTheStoredEntry) {
  TempDir dir;
  Options o;
  o.pool_bytes = 64 * kMiB;
  {
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(PutSeeded(s->get(), "k0", 7, kMiB).ok());
    ASSERT_TRUE((*s)->Flush().ok());
    const auto before = (*s)->Lookup("ns", "k0");
    const auto stats = (*s)->Stats();
    ASSERT_TRUE(before.ok() && stats.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(PutSeeded(s->get(), "k0", 7, kMiB).ok());
    ASSERT_TRUE((*s)->Flush().ok());
    const auto after = (*s)->Lookup("ns", "k0");
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->created_us, before->created_us);  // the same entry
    EXPECT_TRUE(after->tiers.has(Tier::kDisk) && after->tiers.has(Tier::kPool));
    EXPECT_EQ((*s)->Stats()->pool().spills, stats->pool().spills);  // nothing written again
    EXPECT_EQ((*s)->Stats()->disk().used, stats->disk().used);      // nor a tombstone
    EXPECT_EQ((*s)->Stats()->pool().used, stats->pool().used);      // the new block went back
  }
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<uint8_t> got(kMiB);
  ASSERT_TRUE((*s)->Get("ns", "k0", {got.data(), got.size()}).ok());
  EXPECT_TRUE(got == Payload(7, kMiB));
}

// A reservation for a key the pool holds at its size and meta (a daemon's PUT lands in one)
// is compared with the held entry piece by piece as Filled is told, and committed without a
// second pass where every piece matched: the held entry stays. A piece that differs -- the
// first or the very last byte -- makes the put replace it, and an entry erased meanwhile
// leaves the put to install its own.
TEST(WriteBack, AReservationIsComparedWithTheHeldEntryAsItsPiecesLand) {
  TempDir dir;
  std::unique_ptr<Store> s = OpenWithPool(dir.path(), 64 * kMiB);  // far below its watermark
  ASSERT_TRUE(s);
  const auto held = Payload(7, kMiB);
  auto fill = [&](const std::vector<uint8_t>& bytes) {
    auto r = s->Reserve("ns", "k0", Bf16(kMiB), kMiB);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    for (uint64_t at = 0; at < kMiB;) {  // as a socket read lands: piece by piece
      const uint64_t n = std::min<uint64_t>(300'000, kMiB - at);
      std::memcpy(r->bytes().data() + at, bytes.data() + at, n);
      r->Filled(at += n);
    }
    return std::move(r).value();
  };
  ASSERT_TRUE(PutSeeded(s.get(), "k0", 7, kMiB).ok());
  ASSERT_TRUE(s->Flush().ok());
  const auto before = s->Lookup("ns", "k0");
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(s->Commit(fill(held)).ok());
  EXPECT_EQ(s->Lookup("ns", "k0")->created_us, before->created_us);  // kept
  std::vector<uint8_t> got(kMiB);
  for (size_t at : {size_t{0}, size_t{kMiB - 1}}) {
    auto other = held;
    other[at] ^= 1;
    ASSERT_TRUE(s->Commit(fill(other)).ok());
    const auto now = s->Lookup("ns", "k0");
    EXPECT_EQ(now->checksum, PayloadChecksum(other.data(), kMiB)) << "differs at " << at;
    ASSERT_TRUE(s->Get("ns", "k0", {got.data(), got.size()}).ok());
    EXPECT_TRUE(got == other) << "differs at " << at;
  }
  ASSERT_TRUE(s->Commit(fill(held)).ok());  // back to the first bytes
  auto r = fill(held);                      // compared equal, then the entry goes
  ASSERT_TRUE(s->Erase("ns", "k0").ok());
  ASSERT_TRUE(s->Commit(std::move(r)).ok());
  ASSERT_TRUE(s->Get("ns", "k0", {got.data(), got.size()}).ok());
  EXPECT_TRUE(got == held);
  EXPECT_EQ(s->Stats()->pool().entries, 1u);
}

// Other bytes of the same size, or the same bytes with other meta, still replace the entry,
// and the replacement is what a reopen finds.
TEST(WriteBack, APutOfOtherBytesOrMetaReplacesTheEntry) {
  TempDir dir;
  Options o;
  o.pool_bytes = 64 * kMiB;
  auto p = Payload(7, kMiB), q = Payload(8, kMiB);
  {
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->Put("ns", "k0", Bf16(kMiB), {p.data(), kMiB}).ok());
    ASSERT_TRUE((*s)->Flush().ok());
    const auto first = (*s)->Lookup("ns", "k0");
    ASSERT_TRUE((*s)->Put("ns", "k0", Bf16(kMiB), {q.data(), kMiB}).ok());
    const auto second = (*s)->Lookup("ns", "k0");
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_NE(second->checksum, first->checksum);
    TensorMeta costly = Bf16(kMiB);
    costly.recompute_cost = 42;
    ASSERT_TRUE((*s)->Put("ns", "k0", costly, {q.data(), kMiB}).ok());
    const auto third = (*s)->Lookup("ns", "k0");
    ASSERT_TRUE(third.ok());
    EXPECT_EQ(third->meta.recompute_cost, 42);
    ASSERT_TRUE((*s)->Flush().ok());
  }
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<uint8_t> got(kMiB);
  auto info = (*s)->Get("ns", "k0", {got.data(), got.size()});
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(got == q);
  EXPECT_EQ(info->meta.recompute_cost, 42);
}

}  // namespace
}  // namespace ecstore
