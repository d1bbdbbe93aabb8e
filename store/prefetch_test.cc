// Several disk reads in flight: Prefetch, GetMany and AcquireMany promote disk entries in one
// batch.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/test_util.h"
#include "base/units.h"
#include "store/store.h"

namespace ecstore {
namespace {

using testing::Bf16;
using testing::Payload;
using testing::TempDir;

// A store in `dir` whose entries k0..k{n-1} are all on disk only (flushed, reopened).
std::unique_ptr<Store> OnDisk(const std::string& dir, int n, uint64_t bytes) {
  Options o;
  o.pool_bytes = 64 * kMiB;
  {
    auto s = Store::Open(dir, o);
    EXPECT_TRUE(s.ok());
    for (int i = 0; i < n; ++i) {
      auto p = Payload(i, bytes);
      EXPECT_TRUE((*s)->Put("ns", "k" + std::to_string(i), Bf16(bytes), {p.data(), bytes}).ok());
    }
    EXPECT_TRUE((*s)->Close().ok());
  }
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(Prefetch, BringsDiskEntriesIntoThePoolInOneBatch) {
  TempDir dir;
  const uint64_t n = 1 * kMiB + 4096;
  auto s = OnDisk(dir.path(), 6, n);
  std::vector<std::string> keys = {"k0", "k2", "k4", "absent"};
  ASSERT_TRUE(*s->Prefetch("ns", keys));
  for (const char* k : {"k0", "k2", "k4"})
    EXPECT_TRUE(s->Lookup("ns", k)->tiers.has(Tier::kPool)) << k;
  EXPECT_FALSE(s->Lookup("ns", "k1")->tiers.has(Tier::kPool));
  StoreStats st = *s->Stats();
  EXPECT_EQ(st.pool().promotions, 3u);
  EXPECT_EQ(st.disk().hits, 0u) << "a prefetch is a hint, not a read";
  std::vector<uint8_t> got(n);
  for (int i : {0, 2, 4}) {
    ASSERT_TRUE(s->Get("ns", "k" + std::to_string(i), {got.data(), n}).ok());
    EXPECT_TRUE(got == Payload(i, n)) << i;
  }
}

// Damages key k's payload (n bytes) on disk, its header left sound: found by its bytes (the
// payload follows its 4 KiB header block), one byte flipped.
bool DamagePayload(const TempDir& dir, int k, uint64_t n) {
  bool damaged = false;
  for (auto& f : std::filesystem::directory_iterator(dir.sub("segments"))) {
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    std::vector<char> all((std::istreambuf_iterator<char>(io)), {});
    auto want = Payload(k, n);
    auto at = std::search(all.begin(), all.end(), want.begin(), want.begin() + 64,
                          [](char a, uint8_t b) { return static_cast<uint8_t>(a) == b; });
    if (at == all.end()) continue;
    io.clear();
    io.seekp(at - all.begin() + 100);
    io.put(static_cast<char>(~want[100]));
    damaged = true;
  }
  return damaged;
}

TEST(Prefetch, GetManyReadsABatchAndACorruptRecordFailsOnlyItsKey) {
  TempDir dir;
  const uint64_t n = 512 * 1024;
  { auto s = OnDisk(dir.path(), 5, n); }
  ASSERT_TRUE(DamagePayload(dir, 3, n));
  Options o;
  o.pool_bytes = 64 * kMiB;
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok());
  std::vector<std::vector<uint8_t>> bufs(5, std::vector<uint8_t>(n));
  std::vector<std::span<uint8_t>> dsts;
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) {
    keys.push_back("k" + std::to_string(i));
    dsts.emplace_back(bufs[i].data(), n);
  }
  auto got = (*s)->GetMany("ns", keys, dsts);
  for (int i = 0; i < 5; ++i) {
    if (i == 3) {
      EXPECT_TRUE(got[i].status().IsCorruption()) << got[i].status().ToString();
      continue;
    }
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    EXPECT_TRUE(bufs[i] == Payload(i, n)) << i;
  }
  EXPECT_TRUE((*s)->Lookup("ns", "k3").status().IsNotFound()) << "a corrupt entry is dropped";
  EXPECT_EQ((*s)->Stats()->pool().promotions, 4u);
}

// The server labels a get's latency with the tier it was served from; the lease says so, so
// no second lookup is needed (and none can race with the promotion).
TEST(Prefetch, ALeaseSaysWhichTierItsBytesCameFrom) {
  TempDir dir;
  auto s = OnDisk(dir.path(), 1, 64 * 1024);
  auto first = s->Acquire("ns", "k0");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->served_from(), Tier::kDisk);  // promoted by this acquire
  EXPECT_TRUE(first->info().tiers.has(Tier::kPool));
  auto again = s->Acquire("ns", "k0");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->served_from(), Tier::kPool);
}

// AcquireMany leases a pool hit and the disk entries it promoted in one batch, each with the
// tier it came from; an absent key and a bad one answer as Acquire would, alone.
TEST(Prefetch, AcquireManyLeasesPoolAndDiskEntriesAndAnswersEachKey) {
  TempDir dir;
  const uint64_t n = 1 * kMiB + 4096;
  auto s = OnDisk(dir.path(), 5, n);
  ASSERT_TRUE(s->Acquire("ns", "k1").ok());  // k1 is now in the pool too
  std::vector<std::string> keys = {"k0", "k1", "k2", "absent", "", "k4"};
  auto got = s->AcquireMany("ns", keys);
  ASSERT_EQ(got.size(), keys.size());
  for (int i : {0, 1, 2, 5}) {
    ASSERT_TRUE(got[i].ok()) << keys[i] << ": " << got[i].status().ToString();
    const int k = keys[i][1] - '0';
    EXPECT_EQ(got[i]->served_from(), k == 1 ? Tier::kPool : Tier::kDisk) << keys[i];
    EXPECT_TRUE(std::equal(got[i]->data(), got[i]->data() + n, Payload(k, n).begin()));
  }
  EXPECT_TRUE(got[3].status().IsNotFound()) << got[3].status().ToString();
  EXPECT_TRUE(got[4].status().IsInvalidArgument()) << got[4].status().ToString();
  StoreStats st = *s->Stats();
  EXPECT_EQ(st.pool().promotions, 4u);  // k1's Acquire, then k0, k2, k4 in one batch
  EXPECT_EQ(st.disk().hits, 4u);
  EXPECT_EQ(st.pool().hits, 1u);
  EXPECT_EQ(st.leases, 4u);
  got.clear();
  EXPECT_EQ(s->Stats()->leases, 0u);
}

// An AcquireMany of disk entries larger than the pool is served up to half the pool and
// refuses the rest at once (Busy, saying what to do); it never holds the pool so that other
// puts fail (40 MiB over a 16 MiB pool once kept every put Busy for two minutes).
TEST(Prefetch, AnAcquireManyLargerThanThePoolIsServedInPartsAndHoldsNothingElseUp) {
  TempDir dir;
  const uint64_t n = 1 * kMiB;
  OnDisk(dir.path(), 40, n).reset();
  Options o;
  o.pool_bytes = 16 * kMiB;
  o.put_wait = std::chrono::milliseconds(2000);
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) keys.push_back("k" + std::to_string(i));
  auto got = (*s)->AcquireMany("ns", keys);
  ASSERT_EQ(got.size(), keys.size());
  size_t granted = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].ok()) {
      ++granted;
      EXPECT_TRUE(std::equal(got[i]->data(), got[i]->data() + n, Payload(i, n).begin())) << i;
      continue;
    }
    EXPECT_TRUE(got[i].status().IsBusy()) << i << ": " << got[i].status().ToString();
    EXPECT_NE(got[i].status().message().find("half the pool"), std::string::npos);
  }
  EXPECT_GE(granted, 1u);
  EXPECT_LE(granted, 8u);
  auto p = Payload(99, n);  // while the batch's leases are held: room for others
  Status put = (*s)->Put("ns", "other", Bf16(n), {p.data(), n});
  EXPECT_TRUE(put.ok()) << put.ToString();
}

// A watched AcquireMany (what a server streams to a same-host reader): the pool hit is told
// whole before any read goes out; each disk entry's pieces are told in order as they land
// (how many calls that takes depends on how the disk completes them), in the block its
// lease then holds, and the lease is marked streamed. A corrupt record is
// told of as it lands but answers Corruption, unmarked; an absent key is never told of. A
// single disk entry is watched too.
TEST(Prefetch, AWatchedAcquireManyTellsEachPieceAsItLandsAndWhichLeasesHoldThem) {
  TempDir dir;
  const uint64_t n = 3 * kMiB + 4096;
  { auto s = OnDisk(dir.path(), 6, n); }
  ASSERT_TRUE(DamagePayload(dir, 3, n));
  Options o;
  o.pool_bytes = 64 * kMiB;
  auto s = std::move(Store::Open(dir.path(), o)).value();
  ASSERT_TRUE(s->Acquire("ns", "k1").ok());  // k1 is now in the pool too
  struct Told {
    const uint8_t* at = nullptr;
    uint64_t landed = 0;
    int calls = 0;
  };
  std::vector<Told> told(6);
  std::vector<size_t> order;
  Cache::LandingWatch watch;
  watch.landed = [&](size_t i, const uint8_t* at, uint64_t landed) {
    ASSERT_LT(i, told.size());
    Told& t = told[i];
    if (t.calls++ > 0) {
      EXPECT_EQ(at, t.at) << i;
    }
    EXPECT_GT(landed, t.landed) << i << ": in order, each call more";
    EXPECT_LE(landed, n) << i;
    t.at = at;
    t.landed = landed;
    order.push_back(i);
  };
  std::vector<std::string> keys = {"k0", "k1", "k2", "k3", "absent", "k4"};
  auto got = s->AcquireMany("ns", keys, &watch);
  ASSERT_EQ(watch.streamed.size(), keys.size());
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(order[0], 1u) << "the pool hit first";
  EXPECT_EQ(told[1].calls, 1);
  for (int i : {0, 1, 2, 5}) {
    ASSERT_TRUE(got[i].ok()) << keys[i] << ": " << got[i].status().ToString();
    EXPECT_TRUE(watch.streamed[i]) << keys[i];
    EXPECT_EQ(got[i]->data(), told[i].at) << keys[i];
    EXPECT_EQ(told[i].landed, n) << keys[i];
    const int k = keys[i][1] - '0';
    EXPECT_TRUE(std::equal(got[i]->data(), got[i]->data() + n, Payload(k, n).begin()));
  }
  EXPECT_TRUE(got[3].status().IsCorruption()) << got[3].status().ToString();
  EXPECT_FALSE(watch.streamed[3]);
  EXPECT_TRUE(got[4].status().IsNotFound()) << got[4].status().ToString();
  EXPECT_FALSE(watch.streamed[4]);
  EXPECT_EQ(told[4].calls, 0);
  got.clear();
  told.assign(6, Told{});
  auto one = s->AcquireMany("ns", {"k5"}, &watch);
  ASSERT_TRUE(one[0].ok()) << one[0].status().ToString();
  EXPECT_TRUE(watch.streamed[0]);
  EXPECT_EQ(one[0]->data(), told[0].at);
  EXPECT_EQ(told[0].landed, n);
  EXPECT_TRUE(std::equal(one[0]->data(), one[0]->data() + n, Payload(5, n).begin()));
  one.clear();
  EXPECT_EQ(s->Stats()->leases, 0u);
}

// A key listed twice is served twice, from one promotion.
TEST(Prefetch, AKeyListedTwiceIsServedTwice) {
  TempDir dir;
  const uint64_t n = 1 * kMiB + 4096;
  auto s = OnDisk(dir.path(), 3, n);
  auto leases = s->AcquireMany("ns", {"k0", "k1", "k0"});
  for (int i : {0, 2}) {
    ASSERT_TRUE(leases[i].ok()) << leases[i].status().ToString();
    EXPECT_TRUE(std::equal(leases[i]->data(), leases[i]->data() + n, Payload(0, n).begin()));
  }
  leases.clear();
  std::vector<std::vector<uint8_t>> bufs(3, std::vector<uint8_t>(n));
  auto got = s->GetMany("ns", {"k2", "k2", "k1"},
                        {{bufs[0].data(), n}, {bufs[1].data(), n}, {bufs[2].data(), n}});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    EXPECT_TRUE(bufs[i] == Payload(i < 2 ? 2 : 1, n)) << i;
  }
  EXPECT_EQ(s->Stats()->pool().promotions, 3u);
}

// Eight entries on disk in a 32 MiB pool: k0-k6 of 4 MiB, k7 of 8 MiB; k0-k6 are then
// prefetched (28 of 32 MiB: 4 MiB free, in one piece), k0 first, so k0 is the coldest.
std::unique_ptr<Store> PoolHoldingSevenOfEight(const TempDir& dir) {
  Options o;
  o.pool_bytes = 32 * kMiB;
  o.high_watermark = 0.99;  // the evictor stays out of it
  o.low_watermark = 0.98;
  {
    auto s = Store::Open(dir.path(), o);
    EXPECT_TRUE(s.ok());
    for (int i = 0; i < 8; ++i) {
      const uint64_t n = (i == 7 ? 8 : 4) * kMiB;
      auto p = Payload(i, n);
      EXPECT_TRUE((*s)->Put("ns", "k" + std::to_string(i), Bf16(n), {p.data(), n}).ok());
      if (i < 7) {
        EXPECT_TRUE((*s)->Flush().ok());
      }
    }
    EXPECT_TRUE((*s)->Close().ok());
  }
  auto s = Store::Open(dir.path(), o);
  EXPECT_TRUE(s.ok());
  std::vector<std::string> small;
  for (int i = 0; i < 7; ++i) small.push_back("k" + std::to_string(i));
  EXPECT_TRUE(*(*s)->Prefetch("ns", small));
  EXPECT_EQ((*s)->Stats()->pool().evictions, 0u);
  return std::move(s).value();
}

// Near a full pool, a read that no free extent holds evicts, at once and with no I/O, the
// cheapest span of clean entries (with disk copies), instead of waiting for the evictor to
// free cold entries all over the pool. Cheapest: fewest bytes weighted by how recently used --
// here the two coldest, side by side, rather than the free 4 MiB and the hottest entry next
// to it.
TEST(Prefetch, AReadNearAFullPoolEvictsOneSpanOfCleanEntriesAtOnce) {
  TempDir dir;
  auto s = PoolHoldingSevenOfEight(dir);
  std::vector<uint8_t> got(8 * kMiB);
  auto r = s->Get("ns", "k7", {got.data(), got.size()});  // 8 MiB: no extent holds it
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(got == Payload(7, 8 * kMiB));
  EXPECT_TRUE(s->Lookup("ns", "k7")->tiers.has(Tier::kPool));
  EXPECT_EQ(s->Stats()->pool().evictions, 2u);
  for (int i = 0; i < 7; ++i) {  // the read took k0 and k1: the coldest
    const std::string k = "k" + std::to_string(i);
    EXPECT_EQ(s->Lookup("ns", k)->tiers.has(Tier::kPool), i >= 2) << k;
  }
}

// A prefetch is a guess: near a full pool it evicts nothing (what it would evict is often what
// the step being fetched now is about to read) and says Busy for what does not fit; the entry
// stays on disk, and a read then makes room as above.
TEST(Prefetch, APrefetchNearAFullPoolEvictsNothing) {
  TempDir dir;
  auto s = PoolHoldingSevenOfEight(dir);
  Result<bool> done = s->Prefetch("ns", {"k7"});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_FALSE(*done) << "k7 does not fit now";
  EXPECT_EQ(s->Stats()->pool().evictions, 0u);
  EXPECT_FALSE(s->Lookup("ns", "k7")->tiers.has(Tier::kPool));
  for (int i = 0; i < 7; ++i) {
    const std::string k = "k" + std::to_string(i);
    EXPECT_TRUE(s->Lookup("ns", k)->tiers.has(Tier::kPool)) << k;
  }
  std::vector<uint8_t> got(8 * kMiB);
  ASSERT_TRUE(s->Get("ns", "k7", {got.data(), got.size()}).ok());
  EXPECT_TRUE(got == Payload(7, 8 * kMiB));
}

// With the free bytes there but in pieces, a promotion moves the entries in its way (a copy)
// instead of evicting any: nothing leaves the pool, and what moved reads back byte-exact.
TEST(Prefetch, APromotionMovesEntriesAsideWhenTheFreeSpaceIsInPieces) {
  TempDir dir;
  Options o;
  o.pool_bytes = 32 * kMiB;
  o.high_watermark = 0.99;
  o.low_watermark = 0.98;
  const auto size = [](int i) { return (i == 7 ? 8 : 4) * kMiB; };
  {
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 8; ++i) {
      auto p = Payload(i, size(i));
      ASSERT_TRUE(
          (*s)->Put("ns", "k" + std::to_string(i), Bf16(size(i)), {p.data(), size(i)}).ok());
      ASSERT_TRUE((*s)->Flush().ok());
    }
    ASSERT_TRUE((*s)->Close().ok());
  }
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(*(*s)->Prefetch("ns", {"k0", "k1", "k2", "k3", "k4", "k5", "k6"}));
  for (const char* k : {"k1", "k3", "k5"}) ASSERT_TRUE((*s)->Erase("ns", k).ok());
  // 16 MiB free, in four 4 MiB pieces; k7 needs 8 MiB in one.
  Result<bool> done = (*s)->Prefetch("ns", {"k7"});
  ASSERT_TRUE(done.ok() && *done) << done.status().ToString();
  EXPECT_EQ((*s)->Stats()->pool().evictions, 0u);
  for (int i : {0, 2, 4, 6, 7}) {
    const std::string k = "k" + std::to_string(i);
    EXPECT_TRUE((*s)->Lookup("ns", k)->tiers.has(Tier::kPool)) << k;
    std::vector<uint8_t> got(size(i));
    ASSERT_TRUE((*s)->Get("ns", k, {got.data(), got.size()}).ok()) << k;
    EXPECT_TRUE(got == Payload(i, size(i))) << k << " differs after the move";
  }
  EXPECT_EQ((*s)->Stats()->pool().promotions, 8u) << "nothing was read back from disk";
}

}  // namespace
}  // namespace ecstore
