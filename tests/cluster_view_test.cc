// ClusterView: a write made just after a membership change also clears the key's places
// before it, so that a client and a node that have not seen the change yet never meet over
// an older copy. Through the real ClusterCache against the simulator's in-process nodes,
// which (unlike a daemon's NodeGuard) never drop what moves off them: the slowest node.
#include "cluster/cluster_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "cluster/cluster_cache.h"
#include "sim/fake_node.h"

namespace ecstore::cluster {
namespace {

struct Fleet {
  std::atomic<uint64_t> clock{0};
  std::map<std::string, std::unique_ptr<sim::FakeNode>> nodes;
  std::vector<NodeInfo> members;

  Fleet() {
    for (int i = 0; i < 5; ++i) {
      NodeInfo n;
      n.id = "node-" + std::to_string(i);
      n.tcp = "10.0.0." + std::to_string(i) + ":7000";
      nodes[n.id] = std::make_unique<sim::FakeNode>(n.id, uint64_t{1} << 30, &clock);
      members.push_back(n);
    }
  }
  std::unique_ptr<ClusterCache> Client(std::chrono::milliseconds settle) {
    ClusterOptions co;
    co.down_for = std::chrono::milliseconds(0);
    co.settle = settle;
    co.replicas = 3;  // a copy at each of a key's places
    co.connector = [this](const NodeInfo& n) -> Result<std::unique_ptr<Cache>> {
      return nodes.at(n.id)->Connect();
    };
    return ClusterCache::WithMembers("t", std::move(co));
  }
  std::vector<NodeInfo> First(size_t n) const { return {members.begin(), members.begin() + n}; }
  // A key one of whose places among the first four nodes is no place once the fifth joins.
  std::pair<std::string, std::string> MovedKey(ClusterCache& four, ClusterCache& five) {
    for (int i = 0;; ++i) {
      const std::string key = "mm-" + std::to_string(i);
      for (const auto& id : four.Owners("ns", key, 3)) {
        auto now = five.Owners("ns", key, 3);
        if (std::find(now.begin(), now.end(), id) == now.end()) return {key, id};
      }
    }
  }
};

TensorMeta Version(int64_t v) { return {DType::kU8, {v}}; }  // told apart by their size

TEST(ClusterView, AWriteWhileAChangeSettlesClearsThePlacesTheKeyMovedOff) {
  for (const bool settling : {true, false}) {
    Fleet f;
    auto writer =
        f.Client(settling ? std::chrono::milliseconds(60000) : std::chrono::milliseconds(0));
    auto lagging = f.Client(std::chrono::milliseconds(0));  // a reader that has not seen the join
    auto five = f.Client(std::chrono::milliseconds(0));
    writer->Follow(f.First(4));
    lagging->Follow(f.First(4));
    five->Follow(f.First(5));
    auto [key, left] = f.MovedKey(*writer, *five);
    ASSERT_TRUE(writer->Put("ns", key, Version(100), {}).ok());
    writer->Follow(f.First(5));  // the join, which the node `left` has not acted on
    ASSERT_TRUE(writer->Put("ns", key, Version(200), {}).ok());
    auto at_left = f.nodes.at(left)->Connect()->Lookup("ns", key);
    auto read = lagging->Lookup("ns", key);
    if (settling) {
      EXPECT_TRUE(at_left.status().IsNotFound()) << left << " kept the older copy";
      // A miss or the put; never the older copy.
      if (read.ok())
        EXPECT_EQ(read->bytes, 200u);
      else
        EXPECT_TRUE(read.status().IsNotFound()) << read.status().ToString();
    } else {
      // Without it: the older copy stays where a client that has not seen the join looks.
      ASSERT_TRUE(at_left.ok());
      EXPECT_EQ(at_left->bytes, 100u);
    }
  }
}

TEST(ClusterView, AnEraseWhileAChangeSettlesReachesThePlacesTheKeyMovedOff) {
  Fleet f;
  auto writer = f.Client(std::chrono::milliseconds(60000));
  auto five = f.Client(std::chrono::milliseconds(0));
  writer->Follow(f.First(4));
  five->Follow(f.First(5));
  auto [key, left] = f.MovedKey(*writer, *five);
  ASSERT_TRUE(writer->Put("ns", key, Version(100), {}).ok());
  writer->Follow(f.First(5));
  ASSERT_TRUE(writer->Erase("ns", key).ok());
  EXPECT_TRUE(f.nodes.at(left)->Connect()->Lookup("ns", key).status().IsNotFound());
  // Once settled, a write asks only the places.
  writer->Follow(f.First(4));
  writer->Follow(f.First(5));
  auto settled = f.Client(std::chrono::milliseconds(0));
  settled->Follow(f.First(4));
  settled->Follow(f.First(5));
  ASSERT_TRUE(f.nodes.at(left)->Connect()->Put("ns", key, Version(100), {}).ok());
  ASSERT_TRUE(settled->Put("ns", key, Version(200), {}).ok());
  EXPECT_TRUE(f.nodes.at(left)->Connect()->Lookup("ns", key).ok());
}

// A member that left may still serve a reader whose view lags: for a change's settle, a write
// clears it too, and is not acknowledged where it does not answer at an address something
// listens at (a hung node); where nothing listens any more, it serves nothing.
TEST(ClusterView, AWriteAfterALeaveClearsTheNodeThatLeftOrIsNotAcknowledged) {
  for (const bool listening : {true, false}) {
    Fleet f;
    // A hung node's address answers connects; 127.0.0.1:1 refuses them: nothing is there.
    f.members[4].tcp = listening ? "10.0.0.4:7000" : "127.0.0.1:1";
    auto writer = f.Client(std::chrono::milliseconds(60000));
    writer->Follow(f.First(5));
    std::string key;
    for (int i = 0; key.empty(); ++i) {
      auto places = writer->Owners("ns", "mm-" + std::to_string(i), 3);
      if (std::find(places.begin(), places.end(), "node-4") != places.end())
        key = "mm-" + std::to_string(i);
    }
    ASSERT_TRUE(writer->Put("ns", key, Version(100), {}).ok());
    writer->Follow(f.First(4));  // node-4 leaves
    ASSERT_TRUE(writer->Put("ns", key, Version(200), {}).ok());
    EXPECT_TRUE(f.nodes.at("node-4")->Connect()->Lookup("ns", key).status().IsNotFound())
        << "the node that left kept the older copy";
    f.nodes.at("node-4")->SetDown(true);
    Status st = writer->Put("ns", key, Version(300), {});
    if (listening) {
      EXPECT_TRUE(st.IsUnavailable()) << st.ToString();
      EXPECT_NE(st.message().find("not acknowledged"), std::string::npos) << st.ToString();
    } else {
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
  }
}

}  // namespace
}  // namespace ecstore::cluster
