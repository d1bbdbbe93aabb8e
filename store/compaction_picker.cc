#include "store/compaction_picker.h"

namespace ecstore {

std::optional<SegmentUse> MostDead(const std::vector<SegmentUse>& segs, uint32_t newest) {
  std::optional<SegmentUse> best;
  for (const SegmentUse& s : segs)
    if (s.id <= newest && s.dead() > 0 && (!best || s.dead() > best->dead())) best = s;
  return best;
}

std::vector<uint32_t> BelowLiveRatio(const std::vector<SegmentUse>& segs, uint32_t active,
                                     double threshold) {
  std::vector<uint32_t> out;
  for (const SegmentUse& s : segs) {
    if (s.id == active || s.size == 0) continue;
    const bool below = static_cast<double>(s.live) < threshold * static_cast<double>(s.size);
    if (below || (threshold >= 1.0 && s.live < s.size)) out.push_back(s.id);
  }
  return out;
}

}  // namespace ecstore
