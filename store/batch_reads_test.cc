// BatchReads on a keydir of its own (no Store): pool hits copied out or leased in place, the
// disk-only entries promoted in one batch, the lease budget of a batch, and the keys it
// leaves over handed to the single-key path -- a fake Cache here, which records them.
#include "store/batch_reads.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "base/units.h"
#include "disk/record.h"
#include "store/keydir_test_util.h"

namespace ecstore {
namespace {

using testing::KeydirFixture;
using testing::Payload;

// The single-key path, as the batch sees it: what it was asked, answered NotFound.
class SingleKeys : public Cache {
 public:
  std::vector<std::string> gets, acquires;
  const char* transport() const override { return "single"; }
  Status Put(std::string_view, std::string_view, const TensorMeta&,
             std::span<const uint8_t>) override {
    return Status::InvalidArgument("not in this test");
  }
  Result<EntryInfo> Get(std::string_view, std::string_view key, std::span<uint8_t>) override {
    gets.emplace_back(key);
    return Status::NotFound(std::string(key));
  }
  std::vector<Result<EntryInfo>> GetMany(std::string_view, const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>&) override {
    return std::vector<Result<EntryInfo>>(keys.size(), Status::NotFound("batch"));
  }
  Result<ReadLease> Acquire(std::string_view, std::string_view key) override {
    acquires.emplace_back(key);
    return Status::NotFound(std::string(key));
  }
  Result<ReadLease> Pin(std::string_view, std::string_view key) override {
    return Status::NotFound(std::string(key));
  }
  Result<EntryInfo> Lookup(std::string_view, std::string_view key) override {
    return Status::NotFound(std::string(key));
  }
  Result<std::vector<std::optional<EntryInfo>>> LookupMany(
      std::string_view, const std::vector<std::string>& keys) override {
    return std::vector<std::optional<EntryInfo>>(keys.size());
  }
  Status Erase(std::string_view, std::string_view key) override {
    return Status::NotFound(std::string(key));
  }
  Status EraseMany(const std::vector<std::pair<std::string, std::string>>&,
                   std::vector<bool>*) override {
    return Status::Ok();
  }
  Status ListPages(size_t, const std::function<bool(std::vector<EntryInfo>&&)>&) override {
    return Status::Ok();
  }
  Result<StoreStats> Stats() override { return StoreStats{}; }
};

struct Batch {
  KeydirFixture f{1 << 20};  // a 1 MiB pool: a batch may lease 512 KiB of it
  HostEvictor ev{f.kd.get(), std::chrono::milliseconds(2000), /*write_back=*/false};
  SingleKeys single;
  BatchReads reads{&single, f.kd.get(), &ev, /*promote_on_get=*/true};

  // An entry in the pool holding Payload(seed, bytes).
  EntryPtr Pooled(const std::string& key, uint64_t seed, uint64_t bytes) {
    EntryPtr e = f.Insert(key, bytes);
    Keydir::Lock l(f.kd.get());
    std::memcpy(f.pool->Ptr(*e->pool), Payload(seed, bytes).data(), bytes);
    f.kd->SetChecksumLocked(e.get(), PayloadChecksum(f.pool->Ptr(*e->pool), bytes));  // a Put's
    return e;
  }
  // Entries moved to disk, their pool blocks given back.
  void ToDisk(const std::vector<EntryPtr>& es) {
    {
      Keydir::Lock l(f.kd.get());
      for (const EntryPtr& e : es) f.kd->BeginSpillLocked(e.get());
    }
    ASSERT_TRUE(ev.SpillBatch(es, /*drop_from_pool=*/true).ok());
    Keydir::Lock l(f.kd.get());
    for (const EntryPtr& e : es) ASSERT_FALSE(e->pool.has_value()) << e->key;
  }
  bool InPool(const std::string& key) {
    Keydir::Lock l(f.kd.get());
    auto e = f.kd->FindLocked("ns", key, false);
    return e.ok() && (*e)->pool.has_value();
  }
};

TEST(BatchReads, PoolHitsAndOneBatchOfDiskReadsLandAndTheRestGoKeyByKey) {
  Batch b;
  b.Pooled("hot", 1, 64 * kKiB);
  b.Pooled("small", 2, 64 * kKiB);
  b.ToDisk({b.Pooled("cold1", 3, 100 * kKiB), b.Pooled("cold2", 4, 200 * kKiB)});
  std::vector<std::vector<uint8_t>> bufs = {
      std::vector<uint8_t>(64 * kKiB), std::vector<uint8_t>(100 * kKiB), std::vector<uint8_t>(16),
      std::vector<uint8_t>(200 * kKiB), std::vector<uint8_t>(4 * kKiB)};
  std::vector<std::span<uint8_t>> dsts;
  for (auto& v : bufs) dsts.emplace_back(v.data(), v.size());
  auto got = b.reads.GetMany("ns", {"hot", "cold1", "gone", "cold2", "small"}, dsts);
  ASSERT_EQ(got.size(), 5u);
  for (int i : {0, 1, 3}) ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
  EXPECT_EQ(bufs[0], Payload(1, 64 * kKiB));
  EXPECT_EQ(bufs[1], Payload(3, 100 * kKiB));
  EXPECT_EQ(bufs[3], Payload(4, 200 * kKiB));
  EXPECT_TRUE(b.InPool("cold1") && b.InPool("cold2")) << "promoted in the batch";
  // Absent, and a buffer too small for its entry: the single-key path's to answer.
  EXPECT_EQ(b.single.gets, (std::vector<std::string>{"gone", "small"}));
  EXPECT_TRUE(got[2].status().IsNotFound());
  Keydir::Lock l(b.f.kd.get());
  EXPECT_EQ(b.f.kd->leases(), 0u) << "every lease the batch took is released";
}

TEST(BatchReads, LeasesAreInPlaceToldAtOnceForHitsAndAsTheyLandForDiskReads) {
  Batch b;
  b.Pooled("hot", 5, 64 * kKiB);
  b.ToDisk({b.Pooled("cold", 6, 128 * kKiB)});
  std::vector<uint64_t> told(3, 0);
  std::vector<const uint8_t*> at(3, nullptr);
  Cache::LandingWatch watch;
  watch.landed = [&](size_t k, const uint8_t* p, uint64_t n) {
    at[k] = p;
    told[k] = n;
  };
  auto got = b.reads.AcquireMany("ns", {"hot", "cold", "gone"}, &watch);
  ASSERT_TRUE(got[0].ok() && got[1].ok()) << got[1].status().ToString();
  EXPECT_EQ(b.single.acquires, (std::vector<std::string>{"gone"}));
  for (int i : {0, 1}) {
    EXPECT_TRUE(watch.streamed[i]) << i;
    EXPECT_EQ(at[i], got[i]->data()) << i << ": told where the lease lies";
    EXPECT_EQ(told[i], got[i]->size()) << i;
  }
  EXPECT_EQ(0, std::memcmp(got[1]->data(), Payload(6, 128 * kKiB).data(), 128 * kKiB));
  {
    Keydir::Lock l(b.f.kd.get());
    EXPECT_EQ(b.f.kd->leases(), 2u);
  }
  got.clear();
  Keydir::Lock l(b.f.kd.get());
  EXPECT_EQ(b.f.kd->leases(), 0u);
}

TEST(BatchReads, ABatchLeasesAtMostHalfThePoolAndSaysWhatToDoWithTheRest) {
  Batch b;
  b.ToDisk({b.Pooled("d0", 7, 256 * kKiB), b.Pooled("d1", 8, 256 * kKiB),
            b.Pooled("d2", 9, 256 * kKiB)});
  auto got = b.reads.AcquireMany("ns", {"d0", "d1", "d2"}, nullptr);
  ASSERT_TRUE(got[0].ok() && got[1].ok()) << got[0].status().ToString();
  EXPECT_TRUE(got[2].status().IsBusy()) << got[2].status().ToString();
  EXPECT_NE(got[2].status().message().find("half the pool"), std::string::npos);
  EXPECT_FALSE(b.InPool("d2")) << "not read in only to wait under no lease";
  EXPECT_TRUE(b.single.acquires.empty());
}

}  // namespace
}  // namespace ecstore
