// Which segments compaction takes: the choice, kept apart from the copying (DurableTier), from
// each segment's size and the record bytes still live in it.
//
//   auto victim = MostDead(uses, newest);             // to keep the disk quota
//   for (uint32_t seg : BelowLiveRatio(uses, active, 0.5)) ...   // Compact(0.5)
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ecstore {

struct SegmentUse {
  uint32_t id = 0;
  uint64_t size = 0;  // bytes of the segment file in use
  uint64_t live = 0;  // bytes of its records still referenced
  uint64_t dead() const { return size > live ? size - live : 0; }
};

// The segment with the most dead bytes among those numbered up to `newest` (the quota's
// choice: what frees most for the one copy); nullopt where none has any.
std::optional<SegmentUse> MostDead(const std::vector<SegmentUse>& segs, uint32_t newest);

// The segments other than `active` whose live bytes are below threshold x size, in the
// order given (oldest first); with threshold >= 1, every one with any dead bytes.
std::vector<uint32_t> BelowLiveRatio(const std::vector<SegmentUse>& segs, uint32_t active,
                                     double threshold);

}  // namespace ecstore
