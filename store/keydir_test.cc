// Keydir on its own, with a host pool, a durable tier in a temp directory and an Env whose
// clock the test sets: inserts and replacements, leases that outlive an erase, the hits and
// misses it counts, and a closed keydir.
#include "store/keydir.h"

#include <gtest/gtest.h>

#include "store/keydir_test_util.h"

namespace ecstore {
namespace {

using testing::KeydirFixture;

TEST(Keydir, AnInsertedEntryIsFoundAndAReplacementFreesTheOldOnesBlock) {
  KeydirFixture f;
  EntryPtr a = f.Insert("k", 8192);
  {
    Keydir::Lock l(f.kd.get());
    EXPECT_EQ(f.kd->FindLocked("ns", "k", true)->get(), a.get());
    EntryInfo info = *f.kd->LookupLocked("ns", "k");
    EXPECT_TRUE(info.tiers.has(Tier::kPool));
    EXPECT_EQ(info.bytes, 8192u);
    EXPECT_EQ(f.kd->size(), 1u);
  }
  EntryPtr b = f.Complete("k", 4096);
  Keydir::Lock l(f.kd.get());
  std::optional<Tombstone> tomb;
  EXPECT_EQ(f.kd->InsertLocked(b, &tomb).get(), a.get()) << "the replaced entry is returned";
  EXPECT_TRUE(a->erased);
  EXPECT_FALSE(a->pool.has_value()) << "nothing held it: its block went back at once";
  EXPECT_EQ(f.kd->FindLocked("ns", "k", true)->get(), b.get());
  EXPECT_EQ(f.pool->Stats().entries, 1u);
  EXPECT_EQ(f.pool->free_bytes(), f.pool->capacity() - 4096);
}

// A put's new entry is made by the keydir: created now, the next seq, its block its own; a
// second replaces it; once closed it is refused and its block given back.
TEST(Keydir, AFreshEntryIsMadeAndInstalledByTheKeydirAndRefusedOnceClosed) {
  KeydirFixture f;
  Keydir::Lock l(f.kd.get());
  auto fresh = [&](uint64_t bytes) {
    return Keydir::FreshEntry{.ns = "ns",
                              .key = "k",
                              .meta = {DType::kU8, {static_cast<int64_t>(bytes)}},
                              .bytes = bytes,
                              .checksum = 7,
                              .block = *f.pool->Allocate(bytes)};
  };
  f.env.now = 5'000'000;
  EntryPtr old;
  std::optional<Tombstone> tomb;
  auto a = f.kd->InstallLocked(fresh(8192), &old, &tomb);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(old);
  EXPECT_EQ((*a)->created_us, 5'000'000u);
  EXPECT_EQ((*a)->checksum, 7u);
  EXPECT_TRUE((*a)->pool.has_value());
  auto b = f.kd->InstallLocked(fresh(4096), &old, &tomb);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(old.get(), a->get()) << "the replaced entry is returned";
  EXPECT_GT((*b)->seq, (*a)->seq);
  EXPECT_EQ(f.kd->FindLocked("ns", "k", true)->get(), b->get());
  f.kd->CloseLocked();
  const uint64_t free_before = f.pool->free_bytes();
  auto c = f.kd->InstallLocked(fresh(4096), &old, &tomb);
  EXPECT_TRUE(c.status().IsUnavailable()) << c.status().ToString();
  EXPECT_EQ(f.pool->free_bytes(), free_before) << "the refused entry's block went back";
}

TEST(Keydir, ALeaseKeepsAnErasedEntrysBytesUntilItEnds) {
  KeydirFixture f;
  EntryPtr a = f.Insert("k", 8192);
  ReadLease lease;
  {
    Keydir::Lock l(f.kd.get());
    lease = f.kd->LeaseLocked(a);
    EXPECT_EQ(f.kd->leases(), 1u);
    f.kd->RemoveLocked(a.get());
    EXPECT_TRUE(a->erased);
    EXPECT_TRUE(f.pool->Coldest(4).empty()) << "an erased entry is no eviction candidate";
    EXPECT_TRUE(a->pool.has_value()) << "the lease still reads its block";
    EXPECT_TRUE(f.kd->LookupLocked("ns", "k").status().IsNotFound());
  }
  EXPECT_EQ(lease.size(), 8192u);
  EXPECT_EQ(f.pool->free_bytes(), f.pool->capacity() - 8192);
  lease = ReadLease();  // released: takes the mutex itself
  Keydir::Lock l(f.kd.get());
  EXPECT_EQ(f.kd->leases(), 0u);
  EXPECT_FALSE(a->pool.has_value());
  EXPECT_EQ(f.pool->free_bytes(), f.pool->capacity());
  EXPECT_EQ(f.lease_ends, 1);
}

TEST(Keydir, LeasesCountHitsAndAccessTimesButQuietLeasesLeaveNoTrace) {
  KeydirFixture f;
  EntryPtr a = f.Insert("a", 4096);
  EntryPtr b = f.Insert("b", 4096);
  ReadLease quiet, hit;  // released after the lock: a lease ends under the keydir's mutex
  {
    Keydir::Lock l(f.kd.get());
    f.env.now = 5'000'000;
    quiet = f.kd->QuietLeaseLocked(a);
    EXPECT_EQ(a->hits, 0u);
    EXPECT_EQ(f.pool->Stats().hits, 0u);
    EXPECT_EQ(f.pool->Coldest(2), (std::vector<uint64_t>{a->id(), b->id()}));
    hit = f.kd->LeaseLocked(a);
    EXPECT_EQ(a->hits, 1u);
    EXPECT_EQ(a->last_access_us, 5'000'000u);
    EXPECT_TRUE(a->touched);
    EXPECT_EQ(f.pool->Stats().hits, 1u);
    EXPECT_EQ(f.pool->Coldest(2), (std::vector<uint64_t>{b->id(), a->id()}))
        << "a lease touches: a is now the warmer";
    EXPECT_EQ(f.kd->leases(), 2u);
  }
  quiet = ReadLease();
  hit = ReadLease();
  Keydir::Lock l(f.kd.get());
  EXPECT_EQ(f.kd->leases(), 0u);
  EXPECT_EQ(f.lease_ends, 1) << "told once, when the entry's last lease ended";
}

TEST(Keydir, ASpillEndingWithoutACopyGivesAnErasedEntrysBlockBack) {
  KeydirFixture f;
  EntryPtr a = f.Insert("a", 8192);
  Keydir::Lock l(f.kd.get());
  f.kd->BeginSpillLocked(a.get());
  f.kd->RemoveLocked(a.get());
  EXPECT_TRUE(a->pool.has_value()) << "the spill in flight still reads the block";
  f.kd->EndSpillLocked(a.get());
  EXPECT_FALSE(a->spilling);
  EXPECT_FALSE(a->pool.has_value());
  EXPECT_EQ(f.pool->free_bytes(), f.pool->capacity());
}

TEST(Keydir, AnEndedLoadInstallsItsBlockAsThePoolCopy) {
  KeydirFixture f;
  EntryPtr a = f.Complete("a", 4096);
  EntryPtr b = f.Complete("b", 4096);  // (Complete takes the mutex: before it is held)
  PoolBlock blk = *a->pool;
  Keydir::Lock l(f.kd.get());
  a->pool.reset();  // as a disk-only entry: its bytes are read into blk
  f.kd->BeginLoadLocked(a.get());
  EXPECT_TRUE(a->loading);
  f.kd->EndLoadLocked(a.get(), blk);
  EXPECT_FALSE(a->loading);
  ASSERT_TRUE(a->pool.has_value());
  EXPECT_EQ(a->pool->offset, blk.offset);
  EXPECT_EQ(f.pool->Stats().entries, 1u) << "ranked in the pool";
  EXPECT_EQ(f.pool->Coldest(1), (std::vector<uint64_t>{a->id()}));
  f.kd->MovePoolCopyLocked(a.get(), *b->pool);
  EXPECT_EQ(a->pool->offset, b->pool->offset);
}

TEST(Keydir, AMissIsCountedWhereAskedAndAClosedKeydirIsUnavailable) {
  KeydirFixture f;
  Keydir::Lock l(f.kd.get());
  Result<EntryPtr> r = f.kd->FindLocked("ns", "absent", true);
  EXPECT_TRUE(r.status().IsNotFound());
  EXPECT_NE(r.status().message().find("'absent' in namespace 'ns'"), std::string::npos);
  EXPECT_TRUE(f.kd->FindLocked("ns", "absent", false).status().IsNotFound());
  EXPECT_EQ(f.kd->misses(), 1u) << "only the lookup that asked is counted";
  EXPECT_EQ(f.pool->Stats().misses, 1u);
  f.kd->CloseLocked();
  EXPECT_TRUE(f.kd->FindLocked("ns", "absent", true).status().IsUnavailable());
  EXPECT_TRUE(f.kd->LookupLocked("ns", "absent").status().IsUnavailable());
}

// The reads DeviceFront and BatchReads make: each key looked up once, under the keydir's lock,
// and leased where memory holds it; what does not fit or is absent gets no lease.
TEST(Keydir, ReadsLeaseWhatMemoryHoldsAndSayWhyNot) {
  KeydirFixture f;
  f.Insert("a", 8192);
  f.Insert("b", 4096);
  auto small = f.kd->LeaseInMemory("ns", "a", 4096);
  EXPECT_TRUE(small.status().IsInvalidArgument());
  EXPECT_NE(small.status().message().find("size it from this answer"), std::string::npos);
  EXPECT_TRUE(f.kd->LeaseInMemory("ns", "absent", 1 << 20).status().IsNotFound());
  {
    auto a = f.kd->LeaseInMemory("ns", "a", 8192);
    ASSERT_TRUE(a.ok() && a->has_value()) << a.status().ToString();
    EXPECT_EQ((*a)->memory_kind(), MemoryKind::kHost) << "no device tier: the host copy";
    EXPECT_EQ((*a)->size(), 8192u);
    auto dev = f.kd->LeaseDeviceCopy("ns", "a", false);
    ASSERT_TRUE(dev.ok());
    EXPECT_FALSE(dev->has_value()) << "no device copy, no lease";
    Keydir::Lock l(f.kd.get());
    EXPECT_EQ(f.kd->leases(), 1u);
  }
  std::vector<uint8_t> big(8192), little(16);
  std::vector<std::span<uint8_t>> dsts = {big, little, big};
  auto hot = f.kd->LeasePoolCopies("ns", {"a", "b", "absent"}, &dsts, nullptr);
  ASSERT_EQ(hot.size(), 3u);
  EXPECT_TRUE(hot[0].has_value());
  EXPECT_FALSE(hot[1].has_value()) << "its buffer cannot hold it";
  EXPECT_FALSE(hot[2].has_value());
  EXPECT_EQ(f.kd->UnpooledBytes("ns", {"a", "absent"}, {false, false}),
            (std::vector<uint64_t>{0, 0}))
      << "in the pool or absent: nothing to read in";
  hot.clear();
  Keydir::Lock l(f.kd.get());
  EXPECT_EQ(f.kd->leases(), 0u);
  EXPECT_EQ(f.pool->Stats().hits, 2u) << "the leases that served a read";
}

}  // namespace
}  // namespace ecstore
