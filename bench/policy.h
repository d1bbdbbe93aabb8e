// The `policy` workload: eviction policies replayed over synthetic encoder-cache traces, no
// I/O -- what each one keeps, at capacities of 5-50% of the working set's bytes.
//   trace: N distinct images, Zipf(s) popularity whose ranking drifts (every `drift_every`
//   requests the `drift_step` least popular items jump to the top ranks and every other item
//   moves down by as many; `ec-store-bench --drift EVERY,STEP` sets both), sizes from the design's
//   mix (2.87 / 10.6 / 16.5 / 57.8 MB at 40/30/20/10%), recompute cost from the rows
//   (RecomputeCost: ~19 ms for 400 rows, ~86 ms for 2304).
// Reported per capacity and policy: hit ratio, byte hit ratio, and encoder time saved
// (the recompute cost of every hit), with a clairvoyant bound (Belady: evict the entry used
// furthest in the future) for scale, and "true-popularity": the items of highest true
// probability x cost per MiB (what the trace draws each with now, which no online policy
// knows; a bound for policies that estimate popularity from counts), and "popularity-5k":
// the same probability averaged over the last 5000 requests (what an estimator that counts
// over such a window would know, were its counts free of noise).
// Thread rules: pure computation; call from any thread.
#pragma once

#include <string>
#include <vector>

namespace ecstore::bench {

struct PolicyRow {
  double capacity_fraction;
  std::string policy;  // "lru", "gdsf", "freq", "true-popularity", "popularity-5k", "belady"
  double hit_ratio, byte_hit_ratio, saved_s, total_s;
};

struct TraceParams {
  int items = 20000;
  int requests = 400000;
  double zipf_s = 0.9;
  int drift_every = 20000;
  int drift_step = 500;
  unsigned seed = 42;
};

std::vector<PolicyRow> RunPolicyBench(const TraceParams& p, const std::vector<double>& capacities);

}  // namespace ecstore::bench
