#include "sim/fleet.h"

#include <gtest/gtest.h>

#include "cluster/cluster_cache.h"
#include "sim/fake_node.h"

namespace ecstore::sim {
namespace {

// A small fleet through the real routing under every kind of churn: the promises a fleet of
// 1,000 is measured on in the bench (`--workloads fleet`), held here as a history.
TEST(Fleet, ASmallFleetUnderChurnKeepsItsPromises) {
  FleetOptions o;
  o.nodes = 30, o.catalog = 20000, o.minutes = 8, o.warmup_minutes = 1, o.burst_at_minute = 5;
  o.requests_per_s = 150, o.balance_keys = 30000, o.churn_per_hour = 0.5, o.seed = 7;
  o.node_capacity = uint64_t{4} << 30;
  const FleetReport r = RunFleet(o);
  ASSERT_GT(r.requests, 50000u);
  EXPECT_EQ(r.wrong_reads, 0u) << "a hit returned another entry";
  EXPECT_GT(r.hit_rate(), 0.3);
  EXPECT_GT(r.fallback_hits, 0u) << "after a join, the previous owner serves the moved keys";
  EXPECT_GT(r.claims_held, 0u) << "concurrent misses of one image wait for one encoder run";
  // A duplicate run needs a claim the owner could not keep: a node killed or gone.
  EXPECT_LE(r.duplicates, r.unanswered_claims + r.claims_granted / 100);
  size_t joins = 0, leaves = 0;
  for (const FleetEvent& e : r.events) {
    if (e.keys_moved < 0) continue;
    // A join or a clean leave moves the owners of about 1/N of the held keys, no more.
    EXPECT_LT(e.keys_moved, 2.5 * e.ideal_moved) << e.what << " at minute " << e.minute;
    e.what.find("leave") != std::string::npos ? ++leaves : ++joins;
    // An empty joiner takes its share of the puts, not all of them (Mooncake #3688).
    if (e.joiner_puts >= 0) {
      EXPECT_LT(e.joiner_puts, 3.0) << e.what;
    }
  }
  EXPECT_GE(joins, 1u);
  EXPECT_GE(leaves, 1u);
  EXPECT_LT(r.balance, 1.3);
  // The burst's minute dips and the fleet recovers before the end.
  EXPECT_GT(r.hit_rate_by_minute.back(), 0.3);
}

// The simulated node answers as a node does: Unavailable while down, claims on its clock,
// least recently used out past its capacity.
TEST(FakeNode, AnswersAsANodeDoes) {
  std::atomic<uint64_t> now{0};
  FakeNode n("node-1", 3 * 7168, &now);
  auto c = n.Connect();
  TensorMeta row;
  row.shape = {1, 3584};
  ASSERT_TRUE(c->Put("ns", "a", row, {}).ok());
  ASSERT_TRUE(c->Put("ns", "b", row, {}).ok());
  ASSERT_TRUE(c->Get("ns", "a", {}).ok());  // a is now the more recent
  ASSERT_TRUE(c->Put("ns", "c", row, {}).ok());
  ASSERT_TRUE(c->Put("ns", "d", row, {}).ok());  // past capacity: b goes
  EXPECT_TRUE(c->Get("ns", "b", {}).status().IsNotFound());
  EXPECT_TRUE(c->Get("ns", "a", {}).ok());
  Claims* claims = c->capabilities().claims;
  ASSERT_NE(claims, nullptr);
  EXPECT_EQ(claims->Claim("ns", "x", std::chrono::milliseconds(100))->outcome,
            ClaimOutcome::kGranted);
  EXPECT_EQ(claims->Claim("ns", "x", std::chrono::milliseconds(100))->outcome, ClaimOutcome::kHeld);
  now = 200000;  // the claim lapsed
  EXPECT_EQ(claims->Claim("ns", "x", std::chrono::milliseconds(100))->outcome,
            ClaimOutcome::kGranted);
  EXPECT_EQ(claims->Claim("ns", "a", std::chrono::milliseconds(100))->outcome,
            ClaimOutcome::kPresent);
  n.SetDown(true);
  EXPECT_TRUE(c->Get("ns", "a", {}).status().IsUnavailable());
  n.SetDown(false);
  n.Clear();
  EXPECT_TRUE(c->Get("ns", "a", {}).status().IsNotFound());
}

}  // namespace
}  // namespace ecstore::sim
