// MemoryTier on its own: block and entry accounting, the eviction order it keeps, its
// watermarks, and the registration of its region with each registrar once.
#include "store/memory_tier.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/units.h"

namespace ecstore {
namespace {

std::unique_ptr<MemoryTier> OpenTier(uint64_t bytes, MemoryTierOptions o = {}) {
  auto t = MemoryTier::Open(Tier::kPool, NewHostPinnedBackend(), bytes, o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

EntryRecord Rec(const std::string& key, uint64_t bytes) {
  EntryRecord r;
  r.ns = "ns";
  r.key = key;
  r.bytes = bytes;
  return r;
}

// Records what it was asked to register; fails when told to.
class FakeRegistrar : public MemoryRegistrar {
 public:
  const char* Name() const override { return "fake"; }
  Status Register(const MemoryRegion& r) override {
    if (fail) return Status::IOError("no room for the region");
    registered.push_back(r.base);
    return Status::Ok();
  }
  void Deregister(const MemoryRegion& r) override { deregistered.push_back(r.base); }
  bool fail = false;
  std::vector<uint8_t*> registered, deregistered;
};

TEST(MemoryTier, CountsEntriesAndBlocksAndFreesABlockWithItsEntry) {
  auto t = OpenTier(1 * kMiB);
  ASSERT_EQ(t->capacity(), 1 * kMiB);
  auto b = t->Allocate(10000);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->length, t->RoundUp(10000));
  EXPECT_EQ(b->length % 4096, 0u);
  EXPECT_GE(t->Ptr(*b), t->region().base);
  EXPECT_LE(t->Ptr(*b) + b->length, t->region().base + t->region().size);
  t->Insert(7, Rec("a", 10000));
  TierStats s = t->Stats();
  EXPECT_EQ(s.tier, Tier::kPool);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, 10000u);
  EXPECT_EQ(s.used, b->length) << "used counts the rounded block";
  EXPECT_EQ(t->free_bytes(), t->capacity() - b->length);

  t->Remove(7, 10000, *b);
  s = t->Stats();
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.bytes, 0u);
  EXPECT_EQ(t->free_bytes(), t->capacity());
  EXPECT_TRUE(t->Coldest(4).empty()) << "a removed entry is no longer a candidate";
}

TEST(MemoryTier, ColdestFollowsTouchesAndLeavesOutUnrankedEntries) {
  auto t = OpenTier(1 * kMiB);
  for (uint64_t id : {1, 2, 3}) t->Insert(id, Rec("k" + std::to_string(id), 4096));
  EXPECT_EQ(t->Coldest(3), (std::vector<uint64_t>{1, 2, 3}));
  t->Touch(1);
  EXPECT_EQ(t->Coldest(3), (std::vector<uint64_t>{2, 3, 1}));
  t->Unrank(3);  // leased: not a candidate until ranked again
  EXPECT_EQ(t->Coldest(3), (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(t->Coldest(1), (std::vector<uint64_t>{2}));
  t->ResetPolicy();
  EXPECT_TRUE(t->Coldest(3).empty());
}

TEST(MemoryTier, EvictionStartsAboveTheHighWatermarkAndStopsAtTheLowOne) {
  MemoryTierOptions o;
  o.high_watermark = 0.5;
  o.low_watermark = 0.25;
  auto t = OpenTier(1 * kMiB, o);
  auto first = t->Allocate(400 * 1024);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(t->NeedsEviction(0)) << "39% used";
  auto second = t->Allocate(200 * 1024);
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(t->NeedsEviction(0)) << "59% used";
  EXPECT_FALSE(t->EvictionDone(0));
  EXPECT_FALSE(t->EvictionDone(0, 200 * 1024)) << "39% left is above the low watermark";
  EXPECT_TRUE(t->EvictionDone(0, 400 * 1024)) << "20% left";
  t->Free(*second);
  EXPECT_FALSE(t->NeedsEviction(0));
  EXPECT_TRUE(t->NeedsEviction(t->largest_free_extent() + 4096))
      << "a waiting put whose block does not fit needs eviction below the watermark too";
  EXPECT_FALSE(t->EvictionDone(t->largest_free_extent() + 4096, 400 * 1024));
}

TEST(MemoryTier, RegistersItsRegionOnceWithEachRegistrarAndDeregistersAtClose) {
  auto t = OpenTier(1 * kMiB);
  uint8_t* base = t->region().base;
  FakeRegistrar a, b, bad;
  bad.fail = true;
  ASSERT_TRUE(t->AddRegistrar(&a).ok());
  ASSERT_TRUE(t->AddRegistrar(&a).ok());
  EXPECT_EQ(a.registered, std::vector<uint8_t*>{base}) << "registered once";
  Status st = t->AddRegistrar(&bad);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("registering the pool with fake"), std::string::npos)
      << st.ToString();
  ASSERT_TRUE(t->AddRegistrar(&b).ok());
  t->RemoveRegistrar(&b);
  t->RemoveRegistrar(&b);  // a second removal does nothing
  EXPECT_EQ(b.deregistered, std::vector<uint8_t*>{base});

  t->Close();
  EXPECT_EQ(a.deregistered, std::vector<uint8_t*>{base});
  EXPECT_TRUE(bad.deregistered.empty()) << "what failed to register is not deregistered";
  EXPECT_EQ(b.deregistered.size(), 1u);
  EXPECT_TRUE(t->AddRegistrar(&a).IsUnavailable());
  EXPECT_EQ(t->region().base, nullptr) << "closed: unmapped";
}

}  // namespace
}  // namespace ecstore
