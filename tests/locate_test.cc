// Cache::Locate: where each key is held -- one store from its keydir, a cluster from each
// key's places (through the simulator's in-process nodes, so real routing and no network).
#include <gtest/gtest.h>

#include <map>

#include "base/test_util.h"
#include "cluster/cluster_cache.h"
#include "sim/fake_node.h"
#include "store/store.h"

namespace ecstore {
namespace {

TEST(Locate, AStoreAnswersFromItsKeydirWithTheMedium) {
  testing::TempDir dir;
  Options o;
  o.pool_bytes = 16 << 20;
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& store = **s;
  auto bytes = testing::Payload(1, 4096);
  TensorMeta meta;
  meta.dtype = DType::kU8;
  meta.shape = {4096};
  ASSERT_TRUE(store.Put("ns", "held", meta, bytes).ok());
  auto where = store.Locate("ns", {"held", "absent"});
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  ASSERT_EQ(where->size(), 2u);
  EXPECT_EQ((*where)[0], std::vector<Location>({{"", Tier::kPool}}));
  EXPECT_TRUE((*where)[1].empty());
}

TEST(Locate, AClusterAsksEachKeysPlacesAndPutsTheOwnerFirst) {
  std::atomic<uint64_t> clock{0};
  std::map<std::string, std::unique_ptr<sim::FakeNode>> nodes;
  std::vector<cluster::NodeInfo> members;
  for (int i = 0; i < 5; ++i) {
    cluster::NodeInfo n;
    n.id = "node-" + std::to_string(i);
    n.tcp = "10.0.0." + std::to_string(i) + ":7000";
    nodes[n.id] = std::make_unique<sim::FakeNode>(n.id, uint64_t{1} << 30, &clock);
    members.push_back(n);
  }
  cluster::ClusterOptions co;
  co.down_for = std::chrono::milliseconds(0);
  co.connector = [&](const cluster::NodeInfo& n) -> Result<std::unique_ptr<Cache>> {
    return nodes.at(n.id)->Connect();
  };
  auto c = cluster::ClusterCache::WithMembers("t", std::move(co));
  c->Follow(members);
  TensorMeta meta;
  meta.shape = {1, 3584};
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) keys.push_back("mm-" + std::to_string(i));
  for (const auto& k : keys) ASSERT_TRUE(c->Put("ns", k, meta, {}).ok());
  // A copy at a key's second place too, as after a join (its previous owner).
  const auto places = c->Owners("ns", keys[0], 2);
  ASSERT_TRUE(nodes.at(places[1])->Connect()->Put("ns", keys[0], meta, {}).ok());
  keys.push_back("never-put");
  auto where = c->Locate("ns", keys);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ((*where)[0],
            std::vector<Location>({{places[0], Tier::kPool}, {places[1], Tier::kPool}}));
  for (size_t i = 1; i < 40; ++i)
    EXPECT_EQ((*where)[i], std::vector<Location>({{c->Owners("ns", keys[i], 1)[0], Tier::kPool}}));
  EXPECT_TRUE(where->back().empty());
  // A node that does not answer is left out, and counted; the rest still answer.
  const uint64_t before = c->counters().unavailable;
  nodes.at(places[0])->SetDown(true);
  where = c->Locate("ns", {keys[0]});
  ASSERT_TRUE(where.ok());
  EXPECT_EQ((*where)[0], std::vector<Location>({{places[1], Tier::kPool}}));
  EXPECT_GT(c->counters().unavailable, before);
}

}  // namespace
}  // namespace ecstore
