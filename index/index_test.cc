#include "index/index.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/test_util.h"

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

// The index cannot commit (a full disk): its changes are kept and retried in order, never
// dropped, and a segment's tail is never committed past a row that is not.
class CommitFaultEnv : public EnvWrapper {
 public:
  CommitFaultEnv() : EnvWrapper(Env::Default()) {}
  std::atomic<int> error{0};
  int BeforeIndexCommit() override { return error; }
};

TEST(Index, AFailedCommitIsRetriedInOrderNotDropped) {
  testing::TempDir dir;
  CommitFaultEnv env;
  auto idx = Index::Open(dir.sub("i.sqlite"), false, &env);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  env.error = ENOSPC;
  (*idx)->EnqueuePut(Row("a", 1));
  (*idx)->EnqueueTouch("ns", "a", 7, 1);
  Status st = (*idx)->Flush();
  EXPECT_TRUE(st.IsNoSpace()) << st.ToString();
  (*idx)->EnqueueTail(1, 8192);  // after the put it covers, as the store enqueues it
  EXPECT_TRUE((*idx)->Flush().IsNoSpace());
  EXPECT_TRUE((*(*idx)->SegmentTails()).empty());  // nothing committed past the failed put
  env.error = 0;                                   // room again
  (*idx)->EnqueuePut(Row("b", 2));
  ASSERT_TRUE((*idx)->Flush().ok());
  auto rows = (*idx)->LoadAll();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].key, "a");
  EXPECT_EQ((*(*idx)->SegmentTails())[1], 8192u);
  ASSERT_TRUE((*idx)->Flush().ok());  // the error is gone with the retry that committed
}

TEST(Index, ClosingWithChangesNotWrittenLeavesTheTailBeforeThem) {
  testing::TempDir dir;
  CommitFaultEnv env;
  {
    auto idx = Index::Open(dir.sub("i.sqlite"), false, &env);
    ASSERT_TRUE(idx.ok());
    (*idx)->EnqueuePut(Row("a", 1));
    (*idx)->EnqueueTail(1, 4096);
    ASSERT_TRUE((*idx)->Flush().ok());
    env.error = EIO;
    (*idx)->EnqueuePut(Row("b", 2));
    (*idx)->EnqueueDelete("ns", "a", 1);
    (*idx)->EnqueueTail(1, 12288);
    EXPECT_FALSE((*idx)->Flush().ok());
  }  // closed while the disk still fails
  auto idx = Index::Open(dir.sub("i.sqlite"));
  ASSERT_TRUE(idx.ok());
  // The tail stayed where the committed rows end: the next recovery scans the segment from
  // there and finds b's record and a's tombstone.
  EXPECT_EQ((*(*idx)->SegmentTails())[1], 4096u);
  EXPECT_EQ((*idx)->LoadAll()->size(), 1u);
}

// A crash leaves a young store's schema in the WAL: a read-only open (a full disk) reads it.
TEST(Index, AReadOnlyOpenReadsWhatTheWalHolds) {
  testing::TempDir dir;
  const std::string path = dir.sub("i.sqlite");
  auto writer = Index::Open(path);
  ASSERT_TRUE(writer.ok());
  (*writer)->EnqueuePut(Row("a", 1));
  ASSERT_TRUE((*writer)->Flush().ok());
  ASSERT_GT(std::filesystem::file_size(path + "-wal"), 0u);  // not checkpointed yet
  bool damaged = false;
  auto ro = Index::OpenOrReplace(path, Env::Default(), true, false, &damaged);
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_FALSE(damaged);
  EXPECT_FALSE((*ro)->stands_in());
  EXPECT_EQ((*ro)->LoadAll()->size(), 1u);
}

// An index file that cannot be read at all read-only: an empty one in memory stands in and
// the caller is told to read the segments (never "needs a migration").
TEST(Index, AnUnreadableIndexOpenedReadOnlyIsStoodInFor) {
  testing::TempDir dir;
  const std::string path = dir.sub("i.sqlite");
  { std::ofstream(path) << "not a database"; }
  bool damaged = false;
  auto ro = Index::OpenOrReplace(path, Env::Default(), true, false, &damaged);
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_TRUE(damaged);
  EXPECT_TRUE((*ro)->stands_in());
}

}  // namespace
}  // namespace ecstore
