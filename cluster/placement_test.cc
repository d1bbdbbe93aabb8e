#include "cluster/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cluster/membership.h"

namespace ecstore::cluster {
namespace {

constexpr int kKeys = 60000;

std::string Key(int i) { return "mm-" + std::to_string(i * 2654435761u); }

// Each test holds for a ring that ranks each key (0) and one that ranks slots.
class RingTest : public ::testing::TestWithParam<int> {
 protected:
  Ring Make(std::vector<Member> m) const {
    Ring r(std::move(m), GetParam());
    r.WaitForTable();
    return r;
  }
};

INSTANTIATE_TEST_SUITE_P(Ring, RingTest, ::testing::Values(0, kSlotBits),
                         [](const auto& p) { return p.param ? "Slots" : "EachKey"; });

TEST_P(RingTest, EveryClientComputesTheSameOwnersWhateverTheMembersOrder) {
  Ring a = Make({{"n1", 1}, {"n2", 1}, {"n3", 1}});
  Ring b = Make({{"n3", 1}, {"n1", 1}, {"n2", 1}});
  for (int i = 0; i < 1000; ++i) {
    auto ca = a.Choices("ns", Key(i), 3), cb = b.Choices("ns", Key(i), 3);
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(a.members()[ca[j]].id, b.members()[cb[j]].id);
  }
}

// A join moves only the keys the new node now owns: about its share, and nothing between
// the old nodes. The moved keys' second choice is their old owner (the fallback a miss tries).
TEST_P(RingTest, AJoinMovesAboutTheNewNodesShareAndOnlyToIt) {
  Ring before = Make({{"n1", 1}, {"n2", 1}, {"n3", 1}});
  Ring after = Make({{"n1", 1}, {"n2", 1}, {"n3", 1}, {"n4", 1}});
  int moved = 0;
  for (int i = 0; i < kKeys; ++i) {
    const std::string was = before.members()[before.Choices("ns", Key(i), 1)[0]].id;
    auto now = after.Choices("ns", Key(i), 2);
    const std::string is = after.members()[now[0]].id;
    if (was == is) continue;
    ++moved;
    EXPECT_EQ(is, "n4") << "a key moved between two old nodes";
    EXPECT_EQ(after.members()[now[1]].id, was) << "the old owner is not the next choice";
  }
  EXPECT_NEAR(static_cast<double>(moved) / kKeys, 0.25, 0.02);
}

TEST_P(RingTest, ALeaveMovesOnlyTheLeaversKeys) {
  Ring before = Make({{"n1", 1}, {"n2", 1}, {"n3", 1}, {"n4", 1}});
  Ring after = Make({{"n1", 1}, {"n2", 1}, {"n4", 1}});
  for (int i = 0; i < kKeys; ++i) {
    const std::string was = before.members()[before.Choices("ns", Key(i), 1)[0]].id;
    const std::string is = after.members()[after.Choices("ns", Key(i), 1)[0]].id;
    if (was != "n3") {
      EXPECT_EQ(was, is);
    }
  }
}

TEST_P(RingTest, KeysFollowTheWeights) {
  Ring ring = Make({{"small", 1}, {"big", 3}});
  std::map<std::string, int> owned;
  for (int i = 0; i < kKeys; ++i) ++owned[ring.members()[ring.Choices("ns", Key(i), 1)[0]].id];
  EXPECT_NEAR(static_cast<double>(owned["big"]) / kKeys, 0.75, 0.02);
}

TEST_P(RingTest, TheNamespaceIsPartOfTheKey) {
  Ring ring = Make({{"n1", 1}, {"n2", 1}, {"n3", 1}, {"n4", 1}});
  int differ = 0;
  for (int i = 0; i < 1000; ++i)
    differ += ring.Choices("a", Key(i), 1)[0] != ring.Choices("b", Key(i), 1)[0];
  EXPECT_GT(differ, 600);  // about 3 in 4 for independent placements
  EXPECT_TRUE(Ring({}).Choices("a", "k", 2).empty());
  EXPECT_EQ(Ring({{"only", 1}}).Choices("a", "k", 3).size(), 1u);
}

TEST(CopyOrder, DistinctHostsFirstThenTheRestInRingOrder) {
  Ring ring({{"a1", 1}, {"a2", 1}, {"a3", 1}, {"b1", 1}});
  const std::vector<std::string> hosts = {"a", "a", "a", "b"};
  for (int i = 0; i < 200; ++i) {
    auto order = CopyOrder(ring, hosts, "ns", Key(i), 4);
    ASSERT_EQ(order.size(), 4u);
    EXPECT_NE(hosts[order[0]], hosts[order[1]]) << i;       // two hosts: the first two differ
    EXPECT_EQ(order[0], ring.Choices("ns", Key(i), 1)[0]);  // the owner is unchanged
    auto two = CopyOrder(ring, hosts, "ns", Key(i), 2);
    EXPECT_EQ(two, std::vector<size_t>(order.begin(), order.begin() + 2));  // a prefix
  }
  // One host: the ring's own order.
  EXPECT_EQ(CopyOrder(ring, {"h", "h", "h", "h"}, "ns", "k", 3), ring.Choices("ns", "k", 3));
  EXPECT_EQ(CopyOrder(ring, hosts, "ns", "k", 9).size(), 4u);
}

// While the table fills, and for choices deeper than it keeps, the slot is ranked directly:
// the same answers.
TEST(Ring, SlotsAnswerAlikeFromTheTableAndDirectly) {
  std::vector<Member> m;
  for (int i = 0; i < 80; ++i) m.push_back({"node-" + std::to_string(i), 1.0 + i % 3});
  Ring filling(m, kSlotBits);
  Ring filled(m, kSlotBits);
  filled.WaitForTable();
  ASSERT_TRUE(filled.table_ready());
  for (int i = 0; i < 2000; ++i) {
    EXPECT_EQ(filled.Choices("ns", Key(i), 3), filling.Choices("ns", Key(i), 3)) << i;
    auto deep = filled.Choices("ns", Key(i), 6);  // past the table's depth
    EXPECT_EQ(std::vector<size_t>(deep.begin(), deep.begin() + 3), filled.Choices("ns", Key(i), 3));
  }
  EXPECT_FALSE(Ring(m).table_ready()) << "without slots there is no table";
}

// Every member must place by slots for the layout to: a cluster mid-upgrade, with one node
// whose record has none, ranks each key as that node does.
TEST(Layout, SlotsOnlyWhereEveryMemberPlacesBySlots) {
  std::vector<NodeInfo> nodes(3);
  for (int i = 0; i < 3; ++i) {
    nodes[i].id = "n" + std::to_string(i);
    nodes[i].tcp = "10.0.0." + std::to_string(i) + ":7000";
  }
  EXPECT_EQ(Layout::Of(nodes).ring.slot_bits(), kSlotBits);
  auto old = NodeInfo::FromJson(R"({"id": "n2", "tcp": "10.0.0.2:7000"})");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->slots, 0) << "a record without slots ranks each key";
  nodes[2] = *old;
  EXPECT_EQ(Layout::Of(nodes).ring.slot_bits(), 0);
  auto back = NodeInfo::FromJson(nodes[0].ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->slots, kSlotBits);
  auto bad = NodeInfo::FromJson(R"({"id": "n2", "tcp": "10.0.0.2:7000", "slots": 99})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'slots' is out of range"), std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace ecstore::cluster
