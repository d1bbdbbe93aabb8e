// `cluster`: placement over a cluster's nodes, without a network -- how evenly weighted
// rendezvous hashing spreads the bench's entry mix over 3, 100 and 1000 nodes (the largest
// node's owned bytes over the mean), how many keys a join moves against the joiner's share,
// and how fast a client computes an owner (the cost every routed call pays), for a ring
// that ranks each key and one that ranks 2^20 slots from its table; and how long the table
// takes to fill from nothing and from the ring before a join.
#include <algorithm>
#include <string>
#include <vector>

#include "bench/results.h"
#include "bench/workloads.h"
#include "cluster/placement.h"

namespace ecstore::bench {
namespace {

std::vector<cluster::Member> Nodes(size_t n) {
  std::vector<cluster::Member> m;
  for (size_t i = 0; i < n; ++i) m.push_back({"node-" + std::to_string(i), 1.0});
  return m;
}

void OneSize(const Config& cfg, size_t n, int slot_bits) {
  const size_t keys = cfg.quick ? 20000 : 1000000;
  const auto fill = Clock::now();
  const cluster::Ring ring(Nodes(n), slot_bits);
  ring.WaitForTable();
  const double fill_s = Since(fill);
  auto grown = Nodes(n);
  grown.push_back({"node-joined", 1.0});
  const auto refill = Clock::now();
  const cluster::Ring joined(grown, slot_bits, &ring);
  joined.WaitForTable();
  const double refill_s = Since(refill);
  std::vector<double> owned(n, 0);
  size_t moved = 0;
  Latencies lat;
  const auto start = Clock::now();
  for (size_t i = 0; i < keys; ++i) {
    const std::string key = "mm-" + std::to_string(i * 2654435761ull);
    const auto t = Clock::now();
    const size_t owner = ring.Choices("bench", key, 1)[0];
    if ((i & 15) == 0) lat.Add(t);
    // The bench's entry sizes, 2.87 to 57.8 MB, in turn: balance is of bytes, not keys.
    static constexpr double kMb[] = {2.87, 10.6, 16.5, 57.8};
    owned[owner] += kMb[i % 4];
    moved += joined.Choices("bench", key, 1)[0] != owner;
  }
  const double secs = Since(start) / 2;  // two rings asked per key; the rate is one's
  double sum = 0;
  for (double b : owned) sum += b;
  const double max_over_mean = *std::max_element(owned.begin(), owned.end()) / (sum / n);
  char note[256];
  int len = std::snprintf(note, sizeof(note),
                          "%zu keys: the largest node owns %.2fx the mean bytes; a join moved "
                          "%.3f%% of the keys (its share: %.3f%%)",
                          keys, max_over_mean, 100.0 * moved / keys, 100.0 / (n + 1));
  if (slot_bits)
    std::snprintf(note + len, sizeof(note) - len,
                  "; table filled in %.2f s from nothing, %.1f ms from the ring before the join",
                  fill_s, refill_s * 1e3);
  Add({slot_bits ? "cluster_ring_slots" : "cluster_ring", std::to_string(n) + " nodes", 0,
       keys / secs, lat.P(0.5), lat.P(0.99), -1, note});
}

}  // namespace

void ClusterWorkload(const Config& cfg) {
  for (int bits : {0, cluster::kSlotBits})
    for (size_t n : {3, 100, 1000})
      if (!(cfg.quick && bits && n == 1000)) OneSize(cfg, n, bits);  // --quick: no 12 s fill
}

}  // namespace ecstore::bench
