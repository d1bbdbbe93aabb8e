#include "store/disk_accounting.h"

#include <gtest/gtest.h>

namespace ecstore {
namespace {

DiskLocation At(uint32_t segment, uint64_t stored_len) {
  DiskLocation loc;
  loc.segment = segment;
  loc.stored_len = stored_len;
  return loc;
}

// Records count against the quota and their segment by their whole record (header block and
// padding), entries by their raw payload; a move shifts live bytes between segments without
// changing the total, and a compacted segment leaves the picker's view.
TEST(DiskAccounting, TracksRecordBytesPerSegmentAgainstTheQuota) {
  DiskAccounting acct(64 * kBlockSize);
  const DiskLocation a = At(1, 10 * kBlockSize), b = At(1, 100), c = At(2, 20 * kBlockSize);
  acct.Track(10 * kBlockSize, a);  // 11 blocks with its header
  acct.Track(100, b);              // 2 blocks: header, and 100 bytes rounded up
  acct.Track(20 * kBlockSize, c);  // 21 blocks
  EXPECT_EQ(acct.live_bytes(), 34 * kBlockSize);
  EXPECT_FALSE(acct.OverQuota(30 * kBlockSize));
  EXPECT_TRUE(acct.OverQuota(31 * kBlockSize));

  auto uses = acct.Uses({{1, 40 * kBlockSize}, {2, 21 * kBlockSize}, {3, 5 * kBlockSize}});
  ASSERT_EQ(uses.size(), 3u);
  EXPECT_EQ(uses[0].live, 13 * kBlockSize);
  EXPECT_EQ(uses[0].dead(), 27 * kBlockSize);
  EXPECT_EQ(uses[1].dead(), 0u);
  EXPECT_EQ(uses[2].live, 0u) << "a segment with no tracked record is all dead";

  acct.Moved(a, At(3, 10 * kBlockSize));  // compaction moved it
  acct.Untrack(100, b);
  acct.Compacted(1);
  uses = acct.Uses({{1, 0}, {3, 11 * kBlockSize}});
  EXPECT_EQ(uses[0].live, 0u);
  EXPECT_EQ(uses[1].live, 11 * kBlockSize);
  EXPECT_EQ(acct.live_bytes(), 32 * kBlockSize);

  acct.Spilled();
  acct.Hit();
  acct.Hit();
  acct.Evicted(3);
  acct.Corrupt(2);
  TierStats s;
  uint64_t compactions = 0, corrupt = 0;
  acct.Fill(&s, &compactions, &corrupt);
  EXPECT_EQ(s.tier, Tier::kDisk);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.bytes, 30 * kBlockSize);
  EXPECT_EQ(s.capacity, 64 * kBlockSize);
  EXPECT_EQ(s.spills, 1u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.evictions, 3u);
  EXPECT_EQ(compactions, 1u);
  EXPECT_EQ(corrupt, 2u);

  acct.Reset();  // a recovery starting over
  EXPECT_EQ(acct.live_bytes(), 0u);
  acct.Fill(&s, &compactions, &corrupt);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(corrupt, 0u);
}

}  // namespace
}  // namespace ecstore
