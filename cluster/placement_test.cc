#include "cluster/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace ecstore::cluster {
namespace {

constexpr int kKeys = 60000;

std::string Key(int i) { return "mm-" + std::to_string(i * 2654435761u); }

TEST(Ring, EveryClientComputesTheSameOwnersWhateverTheMembersOrder) {
  Ring a({{"n1", 1}, {"n2", 1}, {"n3", 1}});
  Ring b({{"n3", 1}, {"n1", 1}, {"n2", 1}});
  for (int i = 0; i < 1000; ++i) {
    auto ca = a.Choices("ns", Key(i), 3), cb = b.Choices("ns", Key(i), 3);
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(a.members()[ca[j]].id, b.members()[cb[j]].id);
  }
}

// A join moves only the keys the new node now owns: about its share, and nothing between
// the old nodes. The moved keys' second choice is their old owner (the fallback a miss tries).
TEST(Ring, AJoinMovesAboutTheNewNodesShareAndOnlyToIt) {
  Ring before({{"n1", 1}, {"n2", 1}, {"n3", 1}});
  Ring after({{"n1", 1}, {"n2", 1}, {"n3", 1}, {"n4", 1}});
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

TEST(Ring, ALeaveMovesOnlyTheLeaversKeys) {
  Ring before({{"n1", 1}, {"n2", 1}, {"n3", 1}, {"n4", 1}});
  Ring after({{"n1", 1}, {"n2", 1}, {"n4", 1}});
  for (int i = 0; i < kKeys; ++i) {
    const std::string was = before.members()[before.Choices("ns", Key(i), 1)[0]].id;
    const std::string is = after.members()[after.Choices("ns", Key(i), 1)[0]].id;
    if (was != "n3") {
      EXPECT_EQ(was, is);
    }
  }
}

TEST(Ring, KeysFollowTheWeights) {
  Ring ring({{"small", 1}, {"big", 3}});
  std::map<std::string, int> owned;
  for (int i = 0; i < kKeys; ++i) ++owned[ring.members()[ring.Choices("ns", Key(i), 1)[0]].id];
  EXPECT_NEAR(static_cast<double>(owned["big"]) / kKeys, 0.75, 0.02);
}

TEST(Ring, TheNamespaceIsPartOfTheKey) {
  Ring ring({{"n1", 1}, {"n2", 1}, {"n3", 1}, {"n4", 1}});
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

}  // namespace
}  // namespace ecstore::cluster
