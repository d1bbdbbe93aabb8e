#include "store/keydir_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace ecstore {
namespace {

IndexRow Row(std::string ns, std::string key, uint64_t seq, std::vector<int64_t> shape = {400, 8}) {
  IndexRow r;
  r.ns = std::move(ns);
  r.key = std::move(key);
  r.seq = seq;
  r.meta = {DType::kF16, std::move(shape), seq % 3 ? 0.0 : 17.25};
  r.bytes = 6400 + seq;
  r.checksum = seq * 0x9E3779B97F4A7C15ull;
  r.created_us = 1000 + seq;
  r.last_access_us = 2000 + seq;
  r.hits = seq % 5;
  r.loc = {static_cast<uint32_t>(seq % 7 + 1), seq * 8192, 6400 + seq, Codec::kLz4};
  return r;
}

void ExpectSame(const EntryInfo& got, const IndexRow& want) {
  EXPECT_EQ(got.ns, want.ns);
  EXPECT_EQ(got.key, want.key);
  EXPECT_EQ(got.bytes, want.bytes);
  EXPECT_EQ(got.checksum, want.checksum);
  EXPECT_EQ(got.meta.dtype, want.meta.dtype);
  EXPECT_EQ(got.meta.shape, want.meta.shape);
  EXPECT_EQ(got.meta.recompute_cost, want.meta.recompute_cost);
  EXPECT_EQ(got.created_us, want.created_us);
  EXPECT_EQ(got.last_access_us, want.last_access_us);
  EXPECT_EQ(got.hits, want.hits);
}

// Keys of every kind a row stores: hex (packed to half), upper-case and odd-length hex (kept
// as they are), any printable key, the longest key, the empty namespace.
const std::vector<std::pair<std::string, std::string>> kKeys = {
    {"qwen", std::string(64, 'a') + "0123456789"},
    {"qwen", "3fa2b1"},
    {"qwen", "3FA2B1"},
    {"qwen", "3fa2b"},
    {"", "lora:img-7"},
    {"other", "3fa2b1"},
    {"qwen", std::string(kMaxKeyBytes, 'f')},
    {"qwen", std::string(kMaxKeyBytes - 1, 'z')},
};

TEST(KeydirTable, RecoveredRecordsAreRowsThatGiveBackEveryField) {
  KeydirTable t;
  std::vector<IndexRow> want;
  for (size_t i = 0; i < kKeys.size(); ++i) {
    want.push_back(Row(kKeys[i].first, kKeys[i].second, i + 1, {int64_t(i) + 1, 4, 2}));
    t.AddRecovered(IndexRow(want.back()));
  }
  EXPECT_EQ(t.size(), kKeys.size());
  EXPECT_EQ(t.rows(), kKeys.size());
  for (const IndexRow& w : want) {
    const KeydirSlot* s = t.Peek(w.ns, w.key);
    ASSERT_TRUE(s && s->cold()) << w.key;
    const EntryInfo info = *t.Info(*s);
    ExpectSame(info, w);
    EXPECT_TRUE(info.tiers.has(Tier::kDisk));
    EXPECT_FALSE(t.Peek(w.ns + "x", w.key));
  }
  EXPECT_FALSE(t.Peek("qwen", "3fa2b2"));
  EXPECT_FALSE(t.Peek("qwen", "3fa2"));
  for (const IndexRow& w : want) {
    EntryPtr e = t.Find(w.ns, w.key);
    ASSERT_TRUE(e) << w.key;
    ExpectSame(EntryInfo::Of(*e, {}), w);
    ASSERT_TRUE(e->disk);
    EXPECT_EQ(e->disk->segment, w.loc.segment);
    EXPECT_EQ(e->disk->offset, w.loc.offset);
    EXPECT_EQ(e->disk->stored_len, w.loc.stored_len);
    EXPECT_EQ(e->disk->codec, w.loc.codec);
    EXPECT_EQ(t.Find(w.ns, w.key), e) << "found again: the same Entry";
  }
  EXPECT_EQ(t.rows(), 0u);
}

TEST(KeydirTable, AnEntryBecomesARowOnlyOnceNothingHoldsIt) {
  KeydirTable t;
  IndexRow w = Row("ns", "ab12", 1);
  t.AddRecovered(IndexRow(w));
  EntryPtr e = t.Find("ns", "ab12");
  ASSERT_TRUE(e);
  t.FreezeSome(8);
  EXPECT_EQ(t.rows(), 0u) << "a request still holds it";
  e->pool = PoolBlock{0, 8192};
  Entry* raw = e.get();
  e.reset();
  t.FreezeSome(8);
  EXPECT_EQ(t.rows(), 0u) << "it has a pool copy";
  e = t.Find("ns", "ab12");
  EXPECT_EQ(e.get(), raw);
  e->pool.reset();
  ++e->hits;
  e->touched = true;
  t.QueueFreeze(e);
  e.reset();
  t.FreezeSome(8);
  ASSERT_EQ(t.rows(), 1u);
  w.hits += 1;
  ExpectSame(*t.Info(*t.Peek("ns", "ab12")), w);
  e = t.Find("ns", "ab12");
  EXPECT_TRUE(e->touched) << "a row keeps that its access info is not indexed yet";
}

TEST(KeydirTable, ASnapshotOutlivesTheRowsItHolds) {
  KeydirTable t;
  for (int i = 0; i < 3; ++i) t.AddRecovered(Row("ns", "k" + std::to_string(i), i + 1));
  std::vector<KeydirSlot> snap;
  for (const KeydirSlot& s : t.slots()) snap.push_back(s);
  EntryPtr e = t.Find("ns", "k1");  // k1's row leaves the table; the snapshot keeps it
  e->hits = 99;
  ASSERT_TRUE(t.Erase(*e));
  t.Erase("ns", "k2");
  e = NewEntry();
  e->ns = "ns";
  e->key = "k2";
  e->hits = 7;
  EXPECT_FALSE(t.Insert(e));
  std::map<std::string, uint64_t> listed;
  for (const KeydirSlot& s : snap)
    if (auto info = t.Info(s)) listed[info->key] = info->hits;
  EXPECT_EQ(listed, (std::map<std::string, uint64_t>{{"k0", 1}, {"k2", 7}}));
  int found = 0;
  for (const KeydirSlot& s : snap) found += bool(t.EntryOf(s));
  EXPECT_EQ(found, 2) << "k0 (its row made an Entry) and the new k2; k1 is gone";
}

TEST(KeydirTable, InsertOverARowReturnsItAsAnEntry) {
  KeydirTable t;
  t.AddRecovered(Row("ns", "cafe", 1));
  t.AddRecovered(Row("ns", "cafe", 2));  // a newer record replaces the older
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.rows(), 1u);
  EntryPtr e = NewEntry();
  e->ns = "ns";
  e->key = "cafe";
  EntryPtr old = t.Insert(e);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->seq, 2u);
  EXPECT_EQ(t.rows(), 0u);
  EXPECT_EQ(t.Find("ns", "cafe"), e);
}

// Against a plain map, through growth and deletion by shifting: rows and entries mixed.
TEST(KeydirTable, MatchesAMapUnderRandomUse) {
  KeydirTable t;
  std::map<std::pair<std::string, std::string>, uint64_t> model;  // -> seq
  std::mt19937_64 rng(7);
  std::vector<EntryPtr> held;
  for (uint64_t i = 1; i < 40000; ++i) {
    char key[24];
    std::snprintf(key, sizeof(key), rng() % 2 ? "%08llx" : "k%llu",
                  static_cast<unsigned long long>(rng() % 3000));
    const std::string ns = rng() % 4 ? "a" : "b";
    switch (rng() % 5) {
      case 0:
      case 1:
        t.AddRecovered(Row(ns, key, i));
        model[{ns, key}] = i;
        break;
      case 2:
        if (EntryPtr e = t.Find(ns, key)) {
          ASSERT_EQ(e->seq, (model[{ns, key}]));
          if (rng() % 2) held.push_back(e);
        } else {
          ASSERT_EQ(model.count({ns, key}), 0u);
        }
        break;
      case 3:
        t.Erase(ns, key);
        model.erase({ns, key});
        break;
      default:
        if (rng() % 4 == 0) held.clear();
        t.FreezeSome(16);
    }
  }
  ASSERT_EQ(t.size(), model.size());
  EXPECT_GT(t.rows(), 0u);
  for (const auto& [k, seq] : model) {
    const KeydirSlot* s = t.Peek(k.first, k.second);
    ASSERT_TRUE(s) << k.second;
    EXPECT_EQ(s->cold() ? s->row()->seq : s->entry()->seq, seq);
  }
}

}  // namespace
}  // namespace ecstore
