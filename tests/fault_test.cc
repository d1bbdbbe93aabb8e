// Faults injected through the Env seam: ENOSPC, EIO and torn writes on the disk tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>

#include "base/test_util.h"
#include "base/units.h"
#include "store/store.h"

namespace ecstore {
namespace {

using testing::Payload;
using testing::Span;

class FaultEnv : public EnvWrapper {
 public:
  FaultEnv() : EnvWrapper(Env::Default()) {}
  std::atomic<int64_t> write_budget{INT64_MAX};  // bytes that may still be written
  std::atomic<bool> fail_reads{false};
  std::atomic<int> torn_writes{0};  // the next N payload writes stop half way
  std::atomic<int> index_error{0};  // the index's commits fail with it (0: they succeed)
  int BeforeIndexCommit() override { return index_error; }
  int BeforeIo(IoOp op, int, uint64_t, size_t len) override {
    if (op == IoOp::kRead) return fail_reads ? EIO : 0;
    if (op != IoOp::kWrite) return 0;
    if (len > 4096 && torn_writes > 0) {
      --torn_writes;
      return -static_cast<int>(len / 2);
    }
    if ((write_budget -= static_cast<int64_t>(len)) < 0) return ENOSPC;
    return 0;
  }
};

Options WithEnv(FaultEnv* env) {
  Options o;
  o.pool_bytes = 8 * kMiB;
  o.env = env;
  o.put_wait = std::chrono::milliseconds(2000);
  return o;
}

using testing::U8;

TEST(Faults, DiskFullIsNoSpaceAndLosesNothingStored) {
  testing::TempDir dir;
  FaultEnv env;
  env.write_budget = 10 * kMiB;
  auto s = Store::Open(dir.path(), WithEnv(&env));
  ASSERT_TRUE(s.ok());
  int stored = 0;
  Status last;
  for (int i = 0; i < 20; ++i) {
    last = (*s)->Put("ns", "k" + std::to_string(i), U8(2 * kMiB), Span(Payload(i, 2 * kMiB)));
    if (!last.ok()) break;
    ++stored;
  }
  ASSERT_TRUE(last.IsNoSpace()) << last.ToString();
  EXPECT_NE(last.message().find("disk"), std::string::npos) << last.message();
  EXPECT_GT((*s)->Stats()->spill_errors, 0u);
  Status health = (*s)->Health();  // what /healthz reports while the disk is full
  EXPECT_TRUE(health.IsNoSpace()) << health.ToString();
  for (int i = 0; i < stored; ++i) {
    std::vector<uint8_t> got(2 * kMiB);
    auto r = (*s)->Get("ns", "k" + std::to_string(i), {got.data(), got.size()});
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    ASSERT_TRUE(got == Payload(i, 2 * kMiB));
  }
  env.write_budget = INT64_MAX;  // space comes back: the store carries on
  ASSERT_TRUE((*s)->Put("ns", "after", U8(2 * kMiB), Span(Payload(99, 2 * kMiB))).ok());
  ASSERT_TRUE((*s)->Flush().ok());
  EXPECT_TRUE((*s)->Health().ok()) << (*s)->Health().ToString();  // spills succeed again
  ASSERT_TRUE((*s)->Close().ok());
  EXPECT_TRUE((*s)->Health().IsUnavailable());
  auto again = Store::Open(dir.path(), WithEnv(&env));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->List()->size(), static_cast<size_t>(stored) + 1);
}

// An erase on a full disk cannot write its tombstone: it says so, and the tombstone goes with
// the next write that succeeds (here Flush), so that even an index rebuilt from the segments
// alone does not bring the entry back (before, it came back after every restart: soak test).
TEST(Faults, AnEraseOnAFullDiskIsMadeDurableOnceThereIsRoom) {
  testing::TempDir dir;
  FaultEnv env;
  auto s = Store::Open(dir.path(), WithEnv(&env));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Put("ns", "gone", U8(kMiB), Span(Payload(1, kMiB))).ok());
  ASSERT_TRUE((*s)->Put("ns", "kept", U8(kMiB), Span(Payload(2, kMiB))).ok());
  ASSERT_TRUE((*s)->Flush().ok());
  env.write_budget = 0;
  Status erased = (*s)->Erase("ns", "gone");
  EXPECT_TRUE(erased.IsNoSpace()) << erased.ToString();
  EXPECT_NE(erased.message().find("next write that succeeds"), std::string::npos)
      << erased.message();
  EXPECT_FALSE(*(*s)->Contains("ns", "gone"));
  EXPECT_TRUE((*s)->Flush().IsNoSpace());  // still owed: not everything is durable
  env.write_budget = INT64_MAX;
  ASSERT_TRUE((*s)->Flush().ok());
  ASSERT_TRUE((*s)->Close().ok());
  std::filesystem::remove(dir.path() + "/index.sqlite");  // the segments alone decide
  auto again = Store::Open(dir.path(), WithEnv(&env));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(*(*again)->Contains("ns", "gone"));
  EXPECT_TRUE(*(*again)->Contains("ns", "kept"));
}

// The disk fills while the current segment still has preallocated room: records are
// appended and acknowledged but the index cannot commit their rows. Whether room comes back
// before the store closes or not, every acknowledged put is there after a restart and every
// acknowledged erase stays erased (the index's failed batches were once dropped, and a later
// tail marked the segment indexed past them).
TEST(Faults, PutsAndErasesAcknowledgedWhileTheIndexCannotCommitSurviveARestart) {
  for (bool room_comes_back : {true, false}) {
    SCOPED_TRACE(room_comes_back ? "room comes back before the close" : "closed still full");
    testing::TempDir dir;
    FaultEnv env;
    auto s = Store::Open(dir.path(), WithEnv(&env));
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 6; ++i)
      ASSERT_TRUE(
          (*s)->Put("ns", "old" + std::to_string(i), U8(kMiB), Span(Payload(i, kMiB))).ok());
    ASSERT_TRUE((*s)->Flush().ok());
    env.index_error = ENOSPC;
    for (int i = 0; i < 12; ++i)
      ASSERT_TRUE(
          (*s)->Put("ns", "new" + std::to_string(i), U8(kMiB), Span(Payload(50 + i, kMiB))).ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->Erase("ns", "old" + std::to_string(i)).ok());
    ASSERT_TRUE((*s)->Flush().ok());  // durable in the segments, whatever the index says
    if (room_comes_back) {
      env.index_error = 0;
      ASSERT_TRUE((*s)->Put("ns", "later", U8(kMiB), Span(Payload(99, kMiB))).ok());
      ASSERT_TRUE((*s)->Flush().ok());
      // Compaction waits on the index too: its failure once stuck, and it failed for ever.
      auto compacted = (*s)->Compact(1.0);
      EXPECT_TRUE(compacted.ok()) << compacted.status().ToString();
    }
    ASSERT_TRUE((*s)->Close().ok());
    env.index_error = 0;
    auto again = Store::Open(dir.path(), WithEnv(&env));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    for (int i = 0; i < 12; ++i) {
      std::vector<uint8_t> got(kMiB);
      auto r = (*again)->Get("ns", "new" + std::to_string(i), {got.data(), got.size()});
      ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
      EXPECT_TRUE(got == Payload(50 + i, kMiB)) << i;
    }
    for (int i = 0; i < 6; ++i)
      EXPECT_EQ(*(*again)->Contains("ns", "old" + std::to_string(i)), i >= 3) << i;
  }
}

// A store whose directory is removed under it (a cleaned /tmp, an unmounted volume) says so
// in Health: nothing put from then on could be made durable.
TEST(Faults, RemovedStoreDirectoryMakesTheStoreUnhealthy) {
  testing::TempDir dir;
  FaultEnv env;
  const std::string path = dir.path() + "/store";
  auto s = Store::Open(path, WithEnv(&env));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->Health().ok()) << (*s)->Health().ToString();
  std::filesystem::remove_all(path);
  Status health = (*s)->Health();
  EXPECT_TRUE(health.IsUnavailable()) << health.ToString();
  EXPECT_NE(health.message().find("is gone"), std::string::npos) << health.message();
}

TEST(Faults, ReadErrorIsIOErrorAndKeepsTheEntry) {
  testing::TempDir dir;
  FaultEnv env;
  {
    auto s = Store::Open(dir.path(), WithEnv(&env));
    ASSERT_TRUE((*s)->Put("ns", "k", U8(kMiB), Span(Payload(1, kMiB))).ok());
    ASSERT_TRUE((*s)->Close().ok());
  }
  auto s = Store::Open(dir.path(), WithEnv(&env));
  ASSERT_TRUE(s.ok());
  env.fail_reads = true;
  std::vector<uint8_t> got(kMiB);
  auto r = (*s)->Get("ns", "k", {got.data(), got.size()});
  EXPECT_TRUE(r.status().IsIOError()) << r.status().ToString();
  EXPECT_TRUE(*(*s)->Contains("ns", "k"));  // an I/O error is not corruption: keep it
  env.fail_reads = false;
  ASSERT_TRUE((*s)->Get("ns", "k", {got.data(), got.size()}).ok());
  EXPECT_TRUE(got == Payload(1, kMiB));
}

// A transient read error during verify is reported, never taken for corruption: nothing is
// dropped or tombstoned, with or without a pool copy, and everything reads back afterwards.
TEST(Faults, VerifyDuringReadErrorsKeepsEveryEntry) {
  testing::TempDir dir;
  FaultEnv env;
  {
    auto s = Store::Open(dir.path(), WithEnv(&env));
    ASSERT_TRUE((*s)->Put("ns", "cold", U8(kMiB), Span(Payload(1, kMiB))).ok());
    ASSERT_TRUE((*s)->Close().ok());
  }
  auto s = Store::Open(dir.path(), WithEnv(&env));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Put("ns", "hot", U8(kMiB), Span(Payload(2, kMiB))).ok());
  ASSERT_TRUE((*s)->Flush().ok());  // "hot" is in the pool and on disk
  env.fail_reads = true;
  auto report = (*s)->Verify(nullptr);
  env.fail_reads = false;
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->corrupt.empty()) << report->corrupt[0];
  // Both entries, and the segments' header check, report the read errors.
  ASSERT_GE(report->errors.size(), 2u);
  EXPECT_NE(report->errors[0].find("Input/output error"), std::string::npos) << report->errors[0];
  EXPECT_EQ((*s)->Stats()->corrupt_dropped, 0u);
  ASSERT_TRUE((*s)->Close().ok());
  Options o = WithEnv(&env);
  o.rebuild_index = true;  // not even a rebuild from the segments loses them
  auto again = Store::Open(dir.path(), o);
  ASSERT_TRUE(again.ok());
  std::vector<uint8_t> got(kMiB);
  ASSERT_TRUE((*again)->Get("ns", "cold", {got.data(), got.size()}).ok());
  EXPECT_TRUE(got == Payload(1, kMiB));
  ASSERT_TRUE((*again)->Get("ns", "hot", {got.data(), got.size()}).ok());
  EXPECT_TRUE(got == Payload(2, kMiB));
}

class SyncCountingEnv : public EnvWrapper {
 public:
  SyncCountingEnv() : EnvWrapper(Env::Default()) {}
  std::atomic<int> syncs{0};
  int BeforeIo(IoOp op, int, uint64_t, size_t) override {
    if (op == IoOp::kSync) ++syncs;
    return 0;
  }
};

// Erasing many disk entries writes their tombstones in one durable batch, not one fdatasync
// per entry; and the erase holds across a rebuild of the index.
TEST(Faults, EraseManyWritesTombstonesInOneBatch) {
  testing::TempDir dir;
  SyncCountingEnv env;
  Options o;
  o.pool_bytes = 8 * kMiB;
  o.env = &env;
  std::vector<std::pair<std::string, std::string>> keys;
  {
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 500; ++i) {
      keys.emplace_back("ns", "k" + std::to_string(i));
      ASSERT_TRUE((*s)->Put("ns", keys.back().second, U8(4096), Span(Payload(i, 4096))).ok());
    }
    ASSERT_TRUE((*s)->Flush().ok());
    keys.emplace_back("ns", "missing");
    const int before = env.syncs;
    std::vector<bool> erased;
    ASSERT_TRUE((*s)->EraseMany(keys, &erased).ok());
    EXPECT_LE(env.syncs - before, 1);
    EXPECT_EQ(std::count(erased.begin(), erased.end(), true), 500);
    EXPECT_FALSE(erased.back());
    EXPECT_TRUE((*s)->List()->empty());
    ASSERT_TRUE((*s)->Close().ok());
  }
  o.rebuild_index = true;
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->List()->empty());
}

// Compaction moves a segment's live records in batches: one fdatasync per batch, not one
// per record.
TEST(Faults, CompactionAppendsInBatches) {
  testing::TempDir dir;
  SyncCountingEnv env;
  Options o;
  o.pool_bytes = 16 * kMiB;
  o.segment_bytes = 8 * kMiB;
  o.env = &env;
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok());
  std::vector<std::pair<std::string, std::string>> odd;
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(
        (*s)->Put("ns", "k" + std::to_string(i), U8(256 << 10), Span(Payload(i, 256 << 10))).ok());
    if (i % 2) odd.emplace_back("ns", "k" + std::to_string(i));
  }
  ASSERT_TRUE((*s)->Flush().ok());  // one batch: one segment of 10 MiB
  std::vector<bool> erased;
  ASSERT_TRUE((*s)->EraseMany(odd, &erased).ok());  // tombstones start the next segment
  const int before = env.syncs;
  ASSERT_TRUE((*s)->Compact(1.0).ok());
  EXPECT_GT((*s)->Stats()->compactions, 0u);
  EXPECT_LE(env.syncs - before, 2) << "20 live records moved with one fdatasync each";
  for (int i = 0; i < 40; i += 2) {
    std::vector<uint8_t> got(256 << 10);
    ASSERT_TRUE((*s)->Get("ns", "k" + std::to_string(i), {got.data(), got.size()}).ok());
    EXPECT_TRUE(got == Payload(i, 256 << 10));
  }
}

TEST(Faults, TornSpillIsCutBackAndRetried) {
  testing::TempDir dir;
  FaultEnv env;
  {
    auto s = Store::Open(dir.path(), WithEnv(&env));
    env.torn_writes = 1;
    for (int i = 0; i < 6; ++i)
      ASSERT_TRUE(
          (*s)->Put("ns", "k" + std::to_string(i), U8(2 * kMiB), Span(Payload(i, 2 * kMiB))).ok());
    ASSERT_TRUE((*s)->Close().ok());
  }
  auto s = Store::Open(dir.path(), WithEnv(&env));
  ASSERT_TRUE(s.ok());
  EXPECT_GE((*s)->Stats()->spill_errors, 0u);
  ASSERT_EQ((*s)->List()->size(), 6u);
  for (int i = 0; i < 6; ++i) {
    std::vector<uint8_t> got(2 * kMiB);
    ASSERT_TRUE((*s)->Get("ns", "k" + std::to_string(i), {got.data(), got.size()}).ok());
    ASSERT_TRUE(got == Payload(i, 2 * kMiB));
  }
}

}  // namespace
}  // namespace ecstore
