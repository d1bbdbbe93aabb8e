#include "store/quota_victims.h"

#include <gtest/gtest.h>

#include <string>

namespace ecstore {
namespace {

// A recovered entry (a row): `bytes` on disk, last read at `last_access_us`, `hits` times.
IndexRow Row(const std::string& key, uint64_t seq, uint64_t last_access_us, uint64_t hits,
             uint64_t bytes = 1 << 20) {
  IndexRow r;
  r.ns = "ns";
  r.key = key;
  r.seq = seq;
  r.meta = {DType::kBF16, {static_cast<int64_t>(bytes / 2)}};
  r.bytes = bytes;
  r.created_us = 1;
  r.last_access_us = last_access_us;
  r.hits = hits;
  r.loc = {1, seq * 8192 * 256, bytes, Codec::kNone};
  return r;
}

std::vector<std::string> Keys(const KeydirTable& t, const std::vector<KeydirSlot>& slots) {
  std::vector<std::string> keys;
  for (const KeydirSlot& s : slots) keys.push_back(t.Info(s)->key);
  return keys;
}

TEST(QuotaVictims, LruGivesUpTheLeastRecentlyReadFirst) {
  KeydirTable t;
  t.AddRecovered(Row("b", 1, 3000, 9));
  t.AddRecovered(Row("a", 2, 1000, 9));
  t.AddRecovered(Row("c", 3, 2000, 9));
  QuotaVictims lru(false);
  EXPECT_EQ(Keys(t, lru.Coldest(t, 5000, 2)), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(Keys(t, lru.Coldest(t, 5000, 10)), (std::vector<std::string>{"a", "c", "b"}));
}

TEST(QuotaVictims, ValueAwareKeepsTheOftenReadOverTheRecentlyRead) {
  KeydirTable t;
  const uint64_t s = 1000000;
  t.AddRecovered(Row("popular", 1, 1 * s, 50));  // read 50 times, last 9 s ago
  t.AddRecovered(Row("once", 2, 9 * s, 1));      // read once, just now
  QuotaVictims value(true);
  EXPECT_EQ(Keys(t, value.Coldest(t, 10 * s, 1)), (std::vector<std::string>{"once"}));
  QuotaVictims lru(false);
  EXPECT_EQ(Keys(t, lru.Coldest(t, 10 * s, 1)), (std::vector<std::string>{"popular"}));
}

TEST(QuotaVictims, AnEntryInUseIsNeverChosen) {
  KeydirTable t;
  t.AddRecovered(Row("leased", 1, 1000, 1));
  t.AddRecovered(Row("spilling", 2, 1500, 1));
  t.AddRecovered(Row("idle", 3, 2000, 1));
  EntryPtr leased = t.Find("ns", "leased");  // a row made an Entry, as a read makes it
  ++leased->leases;
  EntryPtr spilling = t.Find("ns", "spilling");
  spilling->spilling = true;
  QuotaVictims lru(false);
  EXPECT_EQ(Keys(t, lru.Coldest(t, 5000, 3)), (std::vector<std::string>{"idle"}));
  --leased->leases;
  EXPECT_EQ(Keys(t, lru.Coldest(t, 5000, 3)), (std::vector<std::string>{"leased", "idle"}));
  spilling->spilling = false;
}

TEST(QuotaVictims, ALargeTableIsSampledAndStillYieldsColdEntries) {
  KeydirTable t;
  constexpr uint64_t kEntries = 20000;
  for (uint64_t i = 0; i < kEntries; ++i) t.AddRecovered(Row("k" + std::to_string(i), i + 1, i, 1));
  QuotaVictims lru(false);
  auto victims = lru.Coldest(t, kEntries, 64);
  ASSERT_EQ(victims.size(), 64u);
  // Sampled, not ranked in full: 16 draws a victim put each among the coldest few percent.
  uint64_t worst = 0;
  for (const KeydirSlot& s : victims) worst = std::max(worst, t.Info(s)->last_access_us);
  EXPECT_LT(worst, kEntries / 5);
}

}  // namespace
}  // namespace ecstore
