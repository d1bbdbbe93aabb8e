#include "store/compaction_picker.h"

#include <gtest/gtest.h>

namespace ecstore {
namespace {

TEST(CompactionPicker, QuotaTakesTheMostDeadBytesUpToTheNewest) {
  const std::vector<SegmentUse> segs = {{1, 100, 90}, {2, 100, 20}, {3, 100, 0}, {4, 100, 100}};
  auto best = MostDead(segs, 4);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->id, 3u);   // wholly dead: deleted without a copy
  best = MostDead(segs, 2);  // segments written after the call began are not candidates
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->id, 2u);
  EXPECT_FALSE(MostDead({{1, 100, 100}, {2, 0, 0}}, 9).has_value()) << "nothing dead";
  // Live bytes above the size (a record counted before its segment grew) count as no dead.
  EXPECT_FALSE(MostDead({{1, 100, 150}}, 9).has_value());
}

TEST(CompactionPicker, RatioSkipsTheActiveSegmentAndEmptyOnes) {
  const std::vector<SegmentUse> segs = {
      {1, 100, 40}, {2, 100, 60}, {3, 0, 0}, {4, 100, 10}, {5, 100, 99}};
  EXPECT_EQ(BelowLiveRatio(segs, 4, 0.5), (std::vector<uint32_t>{1}));
  EXPECT_EQ(BelowLiveRatio(segs, 0, 0.5), (std::vector<uint32_t>{1, 4}));
  // 1.0 takes every sealed segment with any dead bytes, however few.
  EXPECT_EQ(BelowLiveRatio(segs, 4, 1.0), (std::vector<uint32_t>{1, 2, 5}));
  EXPECT_TRUE(BelowLiveRatio(segs, 4, 0.0).empty());
}

}  // namespace
}  // namespace ecstore
