#include "index/index.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <thread>

#include "tests/test_util.h"

namespace ecstore {
namespace {

IndexRow Row(const std::string& key, uint64_t seq) {
  IndexRow r;
  r.ns = "ns";
  r.key = key;
  r.seq = seq;
  r.loc = {1, 4096 * seq, 100, Codec::kNone};
  r.bytes = 100;
  r.checksum = ~0ull - seq;  // exercises the full 64-bit range
  r.meta = {DType::kU8, {10, 10}, 3.5};
  r.last_access_us = seq;
  return r;
}

TEST(Index, PutLoadDeleteBySeq) {
  testing::TempDir dir;
  {
    auto idx = Index::Open(dir.sub("i.sqlite"));
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    (*idx)->EnqueuePut(Row("a", 1));
    (*idx)->EnqueuePut(Row("b", 2));
    (*idx)->EnqueuePut(Row("a", 3));      // newer version of a
    (*idx)->EnqueueDelete("ns", "a", 1);  // stale delete: must not remove version 3
    (*idx)->EnqueueDelete("ns", "b", 2);
    (*idx)->EnqueueTail(1, 65536);
    ASSERT_TRUE((*idx)->Flush().ok());
  }
  auto idx = Index::Open(dir.sub("i.sqlite"));
  ASSERT_TRUE(idx.ok());
  auto rows = (*idx)->LoadAll();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].key, "a");
  EXPECT_EQ((*rows)[0].seq, 3u);
  EXPECT_EQ((*rows)[0].checksum, ~0ull - 3);
  EXPECT_EQ((*rows)[0].meta.shape, (std::vector<int64_t>{10, 10}));
  EXPECT_EQ((*rows)[0].meta.recompute_cost, 3.5);
  EXPECT_EQ((*(*idx)->SegmentTails())[1], 65536u);
}

TEST(Index, ReadsInKeyOrderFromEitherEndAndStopsWhenTold) {
  testing::TempDir dir;
  auto idx = Index::Open(dir.sub("i.sqlite"));
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  for (uint64_t i = 1; i <= 300; ++i) (*idx)->EnqueuePut(Row("k" + std::to_string(i), i));
  ASSERT_TRUE((*idx)->Flush().ok());
  ASSERT_TRUE((*idx)->CanReadFromBothEnds());
  for (bool from_the_end : {false, true}) {
    std::vector<std::string> keys;
    ASSERT_TRUE((*idx)
                    ->ForEachInOrder(from_the_end,
                                     [&](IndexRow&& r) {
                                       EXPECT_EQ(r.meta.shape, (std::vector<int64_t>{10, 10}));
                                       keys.push_back(r.key);
                                       return true;
                                     })
                    .ok());
    ASSERT_EQ(keys.size(), 300u);
    EXPECT_TRUE(from_the_end ? std::is_sorted(keys.rbegin(), keys.rend())
                             : std::is_sorted(keys.begin(), keys.end()));
  }
  // Both ends at once, each on its own thread, stopping after 100 rows.
  std::vector<std::string> first, last;
  std::thread end([&] {
    EXPECT_TRUE((*idx)
                    ->ForEachInOrder(true,
                                     [&](IndexRow&& r) {
                                       last.push_back(r.key);
                                       return last.size() < 100;
                                     })
                    .ok());
  });
  EXPECT_TRUE((*idx)
                  ->ForEachInOrder(false,
                                   [&](IndexRow&& r) {
                                     first.push_back(r.key);
                                     return first.size() < 100;
                                   })
                  .ok());
  end.join();
  ASSERT_EQ(first.size(), 100u);
  ASSERT_EQ(last.size(), 100u);
  EXPECT_LT(first.back(), last.back());
}

TEST(Index, AnIndexHeldInMemoryIsReadFromTheStartOnly) {
  testing::TempDir dir;
  auto idx = Index::Open(dir.sub("missing.sqlite"), /*read_only=*/true);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_FALSE((*idx)->CanReadFromBothEnds());
  Status st = (*idx)->ForEachInOrder(true, [](IndexRow&&) { return true; });
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_TRUE((*idx)->ForEachInOrder(false, [](IndexRow&&) { return true; }).ok());
}

TEST(Index, MigratesVersion1Schema) {
  testing::TempDir dir;
  std::string path = dir.sub("i.sqlite");
  sqlite3* db;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(
          db,
          "CREATE TABLE entries(ns TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL,"
          " segment INTEGER NOT NULL, offset INTEGER NOT NULL, stored_len INTEGER NOT NULL,"
          " codec INTEGER NOT NULL, raw_len INTEGER NOT NULL, checksum INTEGER NOT NULL,"
          " dtype INTEGER NOT NULL, shape TEXT NOT NULL, created_us INTEGER NOT NULL,"
          " last_access_us INTEGER NOT NULL, hits INTEGER NOT NULL, PRIMARY KEY(ns, key))"
          " WITHOUT ROWID; CREATE TABLE segments(id INTEGER PRIMARY KEY, tail INTEGER NOT NULL);"
          "INSERT INTO entries VALUES('ns','old',5,1,0,10,0,10,42,6,'10',1,2,3);"
          "PRAGMA user_version=1;",
          nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto idx = Index::Open(path);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ((*idx)->schema_version(), Index::kSchemaVersion);
  auto rows = (*idx)->LoadAll();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].key, "old");
  EXPECT_EQ((*rows)[0].meta.recompute_cost, 0.0);
}

TEST(Index, RefusesNewerSchema) {
  testing::TempDir dir;
  std::string path = dir.sub("i.sqlite");
  sqlite3* db;
  sqlite3_open(path.c_str(), &db);
  sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  auto idx = Index::Open(path);
  ASSERT_FALSE(idx.ok());
  EXPECT_NE(idx.status().message().find("upgrade"), std::string::npos);
}

}  // namespace
}  // namespace ecstore
