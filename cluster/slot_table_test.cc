#include "cluster/slot_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace ecstore::cluster {
namespace {

constexpr int kBits = 12;

std::vector<ScoredMember> Members(std::vector<std::pair<std::string, double>> ids) {
  std::vector<ScoredMember> out;
  for (auto& [id, w] : ids) out.push_back({id, std::hash<std::string>{}(id), w});
  return out;
}

std::vector<std::pair<std::string, double>> Named(int n, int from = 0) {
  std::vector<std::pair<std::string, double>> out;
  for (int i = from; i < from + n; ++i) out.push_back({"node-" + std::to_string(i), 1.0});
  return out;
}

// The reference: the slot scored on every member, best first.
std::vector<std::string> Reference(const std::vector<ScoredMember>& m, uint32_t slot, size_t n) {
  std::vector<size_t> idx(m.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return RanksBefore(RendezvousScore(slot, m[a]), m[a], RendezvousScore(slot, m[b]), m[b]);
  });
  std::vector<std::string> out;
  for (size_t i = 0; i < std::min(n, idx.size()); ++i) out.push_back(m[idx[i]].id);
  return out;
}

std::vector<std::string> Ids(const SlotTable& t, const std::vector<ScoredMember>& m,
                             uint32_t slot) {
  std::vector<size_t> got;
  EXPECT_TRUE(t.Lookup(slot, SlotTable::kDepth, &got));
  std::vector<std::string> out;
  for (size_t i : got) out.push_back(m[i].id);
  return out;
}

// Every slot's entry against the reference ranking.
void ExpectMatchesReference(const SlotTable& t, const std::vector<ScoredMember>& m) {
  for (uint32_t s = 0; s < (1u << kBits); ++s)
    ASSERT_EQ(Ids(t, m, s), Reference(m, s, SlotTable::kDepth)) << "slot " << s;
}

TEST(SlotTable, AFilledTableIsEachSlotsRendezvousOrder) {
  const auto m = Members(Named(40));
  SlotTable t(kBits, m, nullptr);
  t.Wait();
  ExpectMatchesReference(t, m);
  std::vector<size_t> out;
  EXPECT_FALSE(t.Lookup(0, SlotTable::kDepth + 1, &out)) << "deeper than kept: ranked directly";
  const auto few = Members(Named(2));  // fewer members than the depth
  SlotTable small(kBits, few, nullptr);
  small.Wait();
  ExpectMatchesReference(small, few);
}

// A table filled from its predecessor is the one filled from nothing, whatever changed.
TEST(SlotTable, FillingFromThePreviousTableGivesTheFreshTable) {
  const auto base = Members(Named(30));
  SlotTable before(kBits, base, nullptr);
  before.Wait();
  auto joined = Named(30);
  joined.push_back({"node-new", 1.0});
  joined.push_back({"node-new-2", 2.0});
  auto left = Named(30);
  left.erase(left.begin() + 3);
  left.erase(left.begin() + 10);
  auto reweighed = Named(30);
  reweighed[7].second = 3.0;
  auto mixed = left;
  mixed.push_back({"node-new", 1.0});
  for (const auto& ids : {joined, left, reweighed, mixed}) {
    const auto now = Members(ids);
    SlotTable after(kBits, now, &before);
    EXPECT_TRUE(after.ready()) << "a few changes fill at once, in the caller's thread";
    ExpectMatchesReference(after, now);
  }
  // Many joiners (more than a quarter) are left to the filling thread; the same result.
  auto grown = Named(30);
  for (auto& x : Named(40, 100)) grown.push_back(x);
  const auto now = Members(grown);
  SlotTable after(kBits, now, &before);
  after.Wait();
  ExpectMatchesReference(after, now);
}

TEST(SlotTable, ASupersededTableStopsFilling) {
  // Destroyed while filling (500 members over 2^20 slots take seconds): the destructor
  // stops and joins the filling thread, which touches nothing after (ASan and TSan see).
  auto t = std::make_unique<SlotTable>(20, Members(Named(500)), nullptr);
  std::vector<size_t> out;
  EXPECT_FALSE(t->Lookup(0, 1, &out)) << "not filled yet: callers rank directly";
  t.reset();
}

}  // namespace
}  // namespace ecstore::cluster
