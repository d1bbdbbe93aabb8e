// Recovery's index load through a real store: a large index read from both ends at once.
#include "store/recovery_scan.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "base/test_util.h"
#include "index/index.h"
#include "store/store.h"

namespace ecstore {
namespace {

constexpr uint64_t kRecord = 8192;

std::string KeyOf(uint64_t i) { return "key-" + std::to_string(i); }

// A store directory whose index holds `rows` entries of 4 KiB in one sparse segment, and
// `strays` more pointing at a segment that is not there, as the bench's index workload
// builds it (the open does not read the records).
void BuildStore(const std::string& dir, uint64_t rows, uint64_t strays) {
  std::filesystem::create_directories(dir + "/segments");
  int fd = ::open((dir + "/segments/seg-00000001.ecs").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(rows * kRecord)), 0);
  ::close(fd);
  auto idx = Index::Open(dir + "/index.sqlite");
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  for (uint64_t i = 0; i < rows + strays; ++i) {
    IndexRow r;
    r.ns = "ns";
    r.key = KeyOf(i);
    r.seq = i + 1;
    r.loc = {i < rows ? 1u : 7u, (i % rows) * kRecord, 4096, Codec::kNone};
    r.bytes = 4096;
    r.checksum = i;
    r.meta = {DType::kBF16, {2, 1024}};
    (*idx)->EnqueuePut(std::move(r));
  }
  (*idx)->EnqueueTail(1, rows * kRecord);
  ASSERT_TRUE((*idx)->Flush().ok());
}

TEST(RecoveryScan, ALargeIndexReadFromBothEndsGivesEveryRowOnce) {
  testing::TempDir dir;
  const uint64_t rows = RecoveryScan::kBothEndsRows + 4321, strays = 5;
  ASSERT_NO_FATAL_FAILURE(BuildStore(dir.path(), rows, strays));
  Options o;
  o.pool_bytes = 16 << 20;
  for (int open = 0; open < 2; ++open) {  // the strays' rows go at the first open
    auto store = Store::Open(dir.path(), o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto stats = (*store)->Stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->keydir_entries, rows);
    // Each segment's records counted once: what the disk tier holds and its quota sees.
    EXPECT_EQ(stats->at(Tier::kDisk).entries, rows);
    EXPECT_EQ(stats->at(Tier::kDisk).bytes, rows * 4096);
    for (uint64_t i : {uint64_t{0}, rows / 2, rows - 1})
      EXPECT_TRUE((*store)->Lookup("ns", KeyOf(i)).ok()) << KeyOf(i);
    for (uint64_t i = rows; i < rows + strays; ++i)
      EXPECT_TRUE((*store)->Lookup("ns", KeyOf(i)).status().IsNotFound()) << KeyOf(i);
  }
  auto idx = Index::Open(dir.sub("index.sqlite"));
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(*(*idx)->Count(), rows);
}

}  // namespace
}  // namespace ecstore
