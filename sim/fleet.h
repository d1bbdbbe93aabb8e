// The fleet simulator: the real placement (cluster/placement.h) and the real ClusterCache
// routing -- owner first, the previous owner as fallback, a dead node skipped, replicas and
// the places a put clears, claims at the owner, a node dropping what a change moved off it
// (cluster/node_guard.h) -- against in-process FakeNodes with capacities, driven by a Zipf
// trace of 3-60 MB entries keyed like vLLM's mm_hash on a virtual clock, with churn: joins,
// clean leaves, SIGKILL-like losses (the node answers nothing; it leaves when its lease
// lapses), restarts with the same directory (within the lease: it keeps what it held; after:
// it drops it), and a burst of losses at once.
//
//   FleetOptions o;  // 1,000 nodes, 30 virtual minutes
//   FleetReport r = RunFleet(o);
//   printf("hit rate %.3f, largest node %.2fx the mean\n", r.hit_rate(), r.balance);
//
// Thread rules: RunFleet from any thread; it runs its fleet on that thread (and the
// ClusterCache's own threads for a put's clears).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ecstore::sim {

struct FleetOptions {
  size_t nodes = 1000;
  uint64_t node_capacity = uint64_t{8} << 30;  // notional bytes each node holds
  size_t catalog = 1000000;                    // distinct images
  double zipf = 0.9;                           // popularity skew of the trace
  double requests_per_s = 1000;                // virtual, over the fleet
  double minutes = 30;                         // virtual
  double warmup_minutes = 5;                   // before the first churn event
  double churn_per_hour = 0.02;                // share of nodes changing an hour
  double burst_at_minute = 20;                 // 0: no burst
  double burst_share = 0.10;                   // of the nodes, lost at once
  double lease_ttl_s = 10;
  size_t keep = 3;                // places a node keeps a key at (serve --cluster-keep)
  size_t replicas = 1;            // a put's copies
  size_t balance_keys = 1000000;  // keys placed to measure balance (no churn, no capacity)
  uint64_t seed = 1;
};

struct FleetEvent {
  double minute = 0;
  std::string what;         // "join", "leave", "kill, back within the lease", ...
  size_t nodes = 0;         // members after it
  double hit_before = 0;    // hit rate in the minute before
  double hit_low = 0;       // the lowest minute's hit rate among the two after
  double keys_moved = -1;   // share of held keys whose owner changed (joins and leaves)
  double bytes_moved = -1;  // ... of their bytes
  double ideal_moved = -1;  // 1/(N+1) for a join, 1/N for a leave
  double joiner_puts = -1;  // a joiner's share of the puts in its first minute, times N
  uint64_t puts_to_joiner = 0, puts_in_minute = 0;  // ... from these counts
};

struct FleetReport {
  size_t nodes = 0;
  std::vector<double> hit_rate_by_minute;
  std::vector<FleetEvent> events;
  uint64_t requests = 0, hits = 0, fallback_hits = 0;
  uint64_t computes = 0, recompute_bytes = 0;
  uint64_t claims_granted = 0, claims_held = 0;  // held: a wait for another's put
  uint64_t duplicates = 0;         // granted while another compute of the key was running
  uint64_t unanswered_claims = 0;  // granted because the owner did not answer
  uint64_t puts_acked = 0, puts_failed = 0;
  uint64_t wrong_reads = 0;  // a hit with another entry's size: must be 0
  double balance = 0;        // largest node's bytes / mean, balance_keys placed
  double owner_p50_us = 0, owner_p99_us = 0;
  double hit_rate() const { return requests ? static_cast<double>(hits) / requests : 0; }
};

FleetReport RunFleet(const FleetOptions& options);

}  // namespace ecstore::sim
