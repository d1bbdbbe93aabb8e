// `fleet`: the fleet simulator (sim/fleet.h) -- 1,000 in-process nodes behind the real
// ClusterCache routing, a Zipf trace of 3-60 MB images, churn at 2 % of the nodes an hour
// and a burst of 10 % lost at once -- and what it reports: hit rate by minute and its dip at
// each event, recompute bytes, keys and bytes a join or leave moves against 1/N, a joining
// empty node's share of the puts, claims and duplicates, balance over 10^6 keys, and what a
// routed call pays to find its places. Held to no limit: the ideals are in each row.
#include "sim/fleet.h"

#include <cstdio>
#include <string>

#include "bench/results.h"
#include "bench/workloads.h"

namespace ecstore::bench {

void FleetWorkload(const Config& cfg) {
  sim::FleetOptions o;
  if (cfg.quick) {  // the same story, small: 50 nodes, 6 minutes
    o.nodes = 50, o.catalog = 50000, o.minutes = 6, o.warmup_minutes = 1, o.burst_at_minute = 4;
    o.requests_per_s = 300, o.balance_keys = 50000, o.churn_per_hour = 0.8;
  }
  Progress("fleet: " + std::to_string(o.nodes) + " simulated nodes, " +
           std::to_string(static_cast<int>(o.minutes)) + " virtual minutes");
  const auto start = Clock::now();
  const sim::FleetReport r = sim::RunFleet(o);
  const double secs = Since(start);
  char note[512];
  uint64_t to_joiners = 0, join_puts = 0;
  size_t join_n = 0, join_count = 0;
  for (const sim::FleetEvent& e : r.events) {
    join_count += e.keys_moved >= 0 && e.joiner_puts >= 0;
    int n = std::snprintf(note, sizeof(note), "minute %.1f, %zu nodes after: hit rate %.3f -> %.3f",
                          e.minute, e.nodes, e.hit_before, e.hit_low);
    if (e.keys_moved >= 0)
      n += std::snprintf(note + n, sizeof(note) - n,
                         "; owners moved: %.3f%% of held keys, %.3f%% of bytes (ideal %.3f%%)",
                         100 * e.keys_moved, 100 * e.bytes_moved, 100 * e.ideal_moved);
    if (e.joiner_puts >= 0)
      std::snprintf(note + n, sizeof(note) - n, "; its first minute's puts: %.2f/N (%llu of %llu)",
                    e.joiner_puts, static_cast<unsigned long long>(e.puts_to_joiner),
                    static_cast<unsigned long long>(e.puts_in_minute));
    Add({"fleet_events", e.what, 0, 0, 0, 0, -1, note});
    if (e.keys_moved >= 0 && e.joiner_puts >= 0)  // a new node: its first minutes, together
      to_joiners += e.puts_to_joiner, join_puts += e.puts_in_minute, join_n += e.nodes;
  }
  if (join_puts)
    std::snprintf(note, sizeof(note),
                  "new nodes' first minutes together: %llu of %llu puts, %.2f/N (goal <= 1.2/N)",
                  static_cast<unsigned long long>(to_joiners),
                  static_cast<unsigned long long>(join_puts),
                  static_cast<double>(to_joiners) / join_puts * static_cast<double>(join_n) /
                      static_cast<double>(join_count));
  if (join_puts) Add({"fleet", "joiners' puts", 0, 0, 0, 0, -1, note});
  std::string by_minute;
  for (double h : r.hit_rate_by_minute) by_minute += std::to_string(h).substr(0, 5) + " ";
  Add({"fleet", "hit rate by minute", 0, 0, 0, 0, -1, by_minute});
  std::snprintf(note, sizeof(note),
                "%llu requests: %.3f hits (%llu from the previous owner), %llu encoder runs, "
                "%.1f TB recomputed",
                static_cast<unsigned long long>(r.requests), r.hit_rate(),
                static_cast<unsigned long long>(r.fallback_hits),
                static_cast<unsigned long long>(r.computes), r.recompute_bytes / 1e12);
  Add({"fleet", "trace", 0, r.requests / secs, 0, 0, -1, note});
  std::snprintf(
      note, sizeof(note),
      "%llu granted, %llu waited for another's put, %llu duplicate runs (%llu granted "
      "because the owner did not answer); puts %llu acknowledged, %llu refused; "
      "%llu wrong reads",
      static_cast<unsigned long long>(r.claims_granted),
      static_cast<unsigned long long>(r.claims_held), static_cast<unsigned long long>(r.duplicates),
      static_cast<unsigned long long>(r.unanswered_claims),
      static_cast<unsigned long long>(r.puts_acked), static_cast<unsigned long long>(r.puts_failed),
      static_cast<unsigned long long>(r.wrong_reads));
  Add({"fleet", "claims", 0, 0, 0, 0, -1, note});
  std::snprintf(note, sizeof(note),
                "%zu keys over %zu nodes: the largest node holds %.2fx the mean bytes",
                o.balance_keys, o.nodes, r.balance);
  Add({"fleet", "balance", 0, 0, 0, 0, -1, note});
  Add({"fleet", "a routed call's places", 0, 0, r.owner_p50_us, r.owner_p99_us, -1,
       "Layout::Places (owner, replicas, fallback) from the slot table"});
}

}  // namespace ecstore::bench
