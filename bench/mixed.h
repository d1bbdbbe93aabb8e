// What the mixed workload's host run (mixed.cc) and GPU run (mixed_gpu.cc) share: one plan
// of an engine's steps, and how a pass's disk traffic is reported.
// Thread rules: pure functions; call from any thread.
#pragma once

#include <string>
#include <vector>

#include "bench/common.h"
#include "bench/disk_stats.h"

namespace ecstore::bench {

// Each step is a batch of kMixedBatch distinct items drawn Zipf(0.99) from a working set 3x
// the memory budget (`pool`).
inline constexpr int kMixedBatch = 4;
struct MixedPlan {
  uint64_t pool = 0;
  std::vector<Entry> entries;
  std::vector<std::vector<size_t>> steps;  // the items of each step, in order
  std::vector<std::string> Keys(size_t step) const;
  uint64_t Bytes() const;  // of every item of every step
};
MixedPlan MakeMixedPlan(const Config& cfg);

// What a pass did to the disk since `before`: MB per op read and written by this process,
// and how much of the pass's wall time the device was busy.
std::string DiskNote(const std::string& dir, const DiskCounters& before, double secs, double ops);

}  // namespace ecstore::bench
