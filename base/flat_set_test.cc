#include "base/flat_set.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>

namespace ecstore {
namespace {

using IntPtr = std::shared_ptr<const int>;
// A poor hash on purpose: values collide in runs, so probe runs wrap around the table and
// deletions have to shift entries back across the wrap.
struct IntHash {
  size_t operator()(int k) const { return static_cast<size_t>(k / 3) * 0x9e3779b97f4a7c15ull; }
  size_t operator()(const IntPtr& p) const { return (*this)(*p); }
};
struct IntEq {
  static int Of(int k) { return k; }
  static int Of(const IntPtr& p) { return *p; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return Of(a) == Of(b);
  }
};

// Random inserts and erases (by key and by iterator) against std::set, with the table kept
// small so it grows, wraps and shifts; every key of the model is found, every other is not.
TEST(FlatSet, MatchesASetUnderRandomInsertsAndErases) {
  FlatSet<IntPtr, IntHash, IntEq> set;
  std::set<int> model;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 200000; ++step) {
    const int k = static_cast<int>(rng() % 600);
    switch (rng() % 3) {
      case 0: {
        auto [it, added] = set.insert(std::make_shared<const int>(k));
        ASSERT_EQ(added, model.insert(k).second) << k;
        ASSERT_EQ(**it, k);
        break;
      }
      case 1:
        ASSERT_EQ(set.erase(k), model.erase(k)) << k;
        break;
      default: {
        auto it = set.find(k);
        ASSERT_EQ(it != set.end(), model.count(k) > 0) << k;
        if (it != set.end()) {
          set.erase(it);
          model.erase(k);
        }
      }
    }
    ASSERT_EQ(set.size(), model.size());
    if (step % 1000 == 0) {
      for (int q = 0; q < 600; ++q) ASSERT_EQ(set.find(q) != set.end(), model.count(q) > 0) << q;
      size_t seen = 0;
      for (const IntPtr& p : set) seen += model.count(*p);
      ASSERT_EQ(seen, model.size()) << "iteration visits each entry once";
    }
  }
}

TEST(FlatSet, ReserveMakesRoomWithoutGrowingAndClearEmpties) {
  FlatSet<IntPtr, IntHash, IntEq> set;
  set.reserve(1000);
  const size_t slots = set.slot_count();
  EXPECT_GE(slots * 7 / 8, 1000u);
  for (int k = 0; k < 1000; ++k) ASSERT_TRUE(set.insert(std::make_shared<const int>(k)).second);
  EXPECT_EQ(set.slot_count(), slots);
  auto held = *set.find(5);
  EXPECT_EQ(held.use_count(), 2) << "the set owns its pointers";
  set.clear();
  EXPECT_TRUE(set.empty());
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_EQ(set.find(5), set.end());
}

}  // namespace
}  // namespace ecstore
