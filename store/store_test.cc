#include "store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/test_util.h"
#include "base/units.h"
#include "disk/record.h"

namespace ecstore {
namespace {

using testing::Bf16;
using testing::Payload;
using testing::Span;
using testing::TempDir;

Options Small(uint64_t pool = 32 * kMiB) {
  Options o;
  o.pool_bytes = pool;
  o.put_wait = std::chrono::milliseconds(1500);
  return o;
}

std::unique_ptr<Store> OpenOrDie(const std::string& dir, const Options& o) {
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

void ExpectEntry(Store* s, const std::string& key, uint64_t seed, size_t bytes) {
  std::vector<uint8_t> got(bytes);
  auto info = s->Get("ns", key, {got.data(), got.size()});
  ASSERT_TRUE(info.ok()) << key << ": " << info.status().ToString();
  ASSERT_EQ(info->bytes, bytes);
  ASSERT_TRUE(got == Payload(seed, bytes)) << key << " bytes differ";
}

TEST(Store, PutGetLookupEraseInThePool) {
  TempDir dir;
  auto s = OpenOrDie(dir.path(), Small());
  auto p = Payload(1, 2867200);
  ASSERT_TRUE(s->Put("ns", "k1", {DType::kBF16, {400, 3584}}, Span(p)).ok());
  auto info = s->Lookup("ns", "k1");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tier(), Tier::kPool);
  EXPECT_EQ(info->meta.shape, (std::vector<int64_t>{400, 3584}));
  ExpectEntry(s.get(), "k1", 1, p.size());
  EXPECT_TRUE(s->Lookup("other-ns", "k1").status().IsNotFound());
  ASSERT_TRUE(s->Erase("ns", "k1").ok());
  EXPECT_TRUE(s->Lookup("ns", "k1").status().IsNotFound());
  EXPECT_TRUE(s->Erase("ns", "k1").IsNotFound());
  StoreStats st = *s->Stats();
  EXPECT_EQ(st.pool().entries, 0u);
  EXPECT_EQ(st.pool().used, 0u);
}

// A reservation filled a piece at a time, each piece hashed as it lands (Filled), commits
// the checksum of the whole payload, as one filled and hashed at Commit does: calls that go
// backwards or past the end change nothing, and a reservation hashed in part finishes at
// Commit. Read back from disk after a reopen, each entry passes its checksum.
TEST(Store, AReservationHashedAsItFillsCommitsTheWholeChecksum) {
  TempDir dir;
  const size_t n = 3 * kMiB + 124;
  const auto p = Payload(5, n);
  {
    auto s = OpenOrDie(dir.path(), Small());
    for (const char* key : {"pieces", "half", "none"}) {
      auto r = s->Reserve("ns", key, Bf16(n), n);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      uint8_t* dst = r->bytes().data();
      for (size_t off = 0; off < n; off += kMiB) {
        const size_t len = std::min<size_t>(kMiB, n - off);
        std::memcpy(dst + off, p.data() + off, len);
        if (std::string_view(key) == "pieces") {
          r->Filled(off + len);
          r->Filled(off / 2);  // backwards: nothing
        }
      }
      if (std::string_view(key) == "pieces") r->Filled(n + 4096);  // past the end: clamped
      if (std::string_view(key) == "half") r->Filled(n / 2);
      ASSERT_TRUE(s->Commit(std::move(r).value()).ok());
      auto info = s->Lookup("ns", key);
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(info->checksum, PayloadChecksum(p.data(), n)) << key;
    }
  }
  auto s = OpenOrDie(dir.path(), Small());
  for (const char* key : {"pieces", "half", "none"}) {
    ASSERT_EQ(s->Lookup("ns", key)->tier(), Tier::kDisk) << key;
    ExpectEntry(s.get(), key, 5, n);
  }
}

// A reservation committed with ChecksumWhenSpilled is readable at once with checksum 0 and
// is hashed by the spill that writes it (Flush here; write-back off so nothing spills it
// sooner), then read back from disk checked. One for a key the store already holds is hashed
// at Commit, and a re-put of the same bytes keeps the entry.
TEST(Store, AReservationCanBeChecksummedWhenItIsFirstSpilled) {
  TempDir dir;
  const size_t n = 2 * kMiB + 64;
  const auto p = Payload(6, n);
  Options o = Small();
  o.write_back = false;
  auto reserve_filled = [&](Store* s, const char* key) {
    auto r = s->Reserve("ns", key, Bf16(n), n);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::memcpy(r->bytes().data(), p.data(), n);
    r->ChecksumWhenSpilled();
    return std::move(r).value();
  };
  {
    auto s = OpenOrDie(dir.path(), o);
    ASSERT_TRUE(s->Commit(reserve_filled(s.get(), "later")).ok());
    EXPECT_EQ(s->Lookup("ns", "later")->checksum, 0u);
    ExpectEntry(s.get(), "later", 6, n);
    ASSERT_TRUE(s->Put("ns", "held", Bf16(n), Span(p)).ok());
    ASSERT_TRUE(s->Commit(reserve_filled(s.get(), "held")).ok());
    EXPECT_EQ(s->Lookup("ns", "held")->checksum, PayloadChecksum(p.data(), n));
    EXPECT_EQ(s->Stats()->pool().entries, 2u);  // the held entry kept, not a second one
    ASSERT_TRUE(s->Flush().ok());
    EXPECT_EQ(s->Lookup("ns", "later")->checksum, PayloadChecksum(p.data(), n));
  }
  auto s = OpenOrDie(dir.path(), o);
  for (const char* key : {"later", "held"}) {
    ASSERT_EQ(s->Lookup("ns", key)->tier(), Tier::kDisk) << key;
    ExpectEntry(s.get(), key, 6, n);
  }
}

TEST(Store, RejectsBadInputWithoutLosingData) {
  TempDir dir;
  auto s = OpenOrDie(dir.path(), Small());
  auto p = Payload(2, 8192);
  ASSERT_TRUE(s->Put("ns", "good", Bf16(8192), Span(p)).ok());
  Status st = s->Put("ns", "bad", {DType::kBF16, {100, 100}}, Span(p));
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_NE(st.message().find("20000"), std::string::npos) << st.message();
  EXPECT_TRUE(s->Put("ns", "", Bf16(8192), Span(p)).IsInvalidArgument());
  EXPECT_TRUE(s->Put("ns", std::string(300, 'x'), Bf16(8192), Span(p)).IsInvalidArgument());
  EXPECT_TRUE(s->Put("ns\n", "k", Bf16(8192), Span(p)).IsInvalidArgument());
  auto big = Payload(3, 40 * kMiB);
  EXPECT_TRUE(s->Put("ns", "huge", Bf16(big.size()), Span(big)).IsNoSpace());
  std::vector<uint8_t> small(10);
  EXPECT_TRUE(s->Get("ns", "good", {small.data(), small.size()}).status().IsInvalidArgument());
  ExpectEntry(s.get(), "good", 2, 8192);
}

// A get into too small a buffer (none at all included) answers the entry's size and layout,
// so the caller sizes its buffer from it and gets again: no lookup first, wherever the entry
// lies, and the probe counts no hit.
TEST(Store, AGetIntoTooSmallABufferSaysTheSizeAndLayoutItNeeds) {
  TempDir dir;
  auto s = OpenOrDie(dir.path(), Small());
  const TensorMeta meta{DType::kBF16, {16, 256}};
  ASSERT_TRUE(s->Put("ns", "k", meta, Span(Payload(4, 8192))).ok());
  for (bool on_disk : {false, true}) {
    if (on_disk) {
      ASSERT_TRUE(s->Flush().ok());
      ASSERT_TRUE(s->Close().ok());
      s = OpenOrDie(dir.path(), Small());
    }
    const uint64_t hits = s->Stats()->pool().hits;
    auto probe = s->Get("ns", "k", {});
    ASSERT_TRUE(probe.status().IsBufferTooSmall()) << probe.status().ToString();
    EXPECT_TRUE(probe.status().IsInvalidArgument()) << "a too-small buffer is the caller's input";
    EXPECT_EQ(probe.status().needed_bytes(), 8192u);
    ASSERT_NE(probe.status().needed_meta(), nullptr);
    EXPECT_EQ(probe.status().needed_meta()->shape, meta.shape);
    EXPECT_EQ(probe.status().needed_meta()->dtype, meta.dtype);
    EXPECT_EQ(s->Stats()->pool().hits, hits) << "the probe is not a read";
    std::vector<uint8_t> dst(probe.status().needed_bytes());
    auto got = s->Get("ns", "k", {dst.data(), dst.size()});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(dst, Payload(4, 8192));
  }
  EXPECT_FALSE(s->Get("ns", "absent", {}).status().IsBufferTooSmall());
}

// Watermarks out of order are refused at Open with what is wrong, for the host pool and the
// device pool alike (checked before any device is looked for), and the store's entries wait
// for a good open.
TEST(Store, WatermarksOutOfOrderAreAClearErrorAtOpen) {
  TempDir dir;
  auto p = Payload(9, 8192);
  {
    auto s = OpenOrDie(dir.path(), Small());
    ASSERT_TRUE(s->Put("ns", "kept", Bf16(8192), Span(p)).ok());
    ASSERT_TRUE(s->Close().ok());
  }
  Options host = Small();
  host.low_watermark = host.high_watermark;
  auto bad = Store::Open(dir.path(), host);
  ASSERT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_EQ(bad.status().message(),
            "Options::low_watermark (0.98) and high_watermark (0.98) must satisfy "
            "0 < low < high <= 1");
  Options device = Small();
  device.device_high_watermark = 1.5;
  bad = Store::Open(dir.path(), device);
  ASSERT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_EQ(bad.status().message(),
            "Options::device_low_watermark (0.8) and device_high_watermark (1.5) must satisfy "
            "0 < low < high <= 1");
  auto s = OpenOrDie(dir.path(), Small());
  ExpectEntry(s.get(), "kept", 9, 8192);
}

TEST(Store, LeaseIsZeroCopyAndSurvivesOverwrite) {
  TempDir dir;
  auto s = OpenOrDie(dir.path(), Small());
  auto p = Payload(4, kMiB);
  ASSERT_TRUE(s->Put("ns", "k", Bf16(kMiB), Span(p)).ok());
  auto lease = s->Acquire("ns", "k");
  ASSERT_TRUE(lease.ok());
  auto q = Payload(5, kMiB);
  ASSERT_TRUE(s->Put("ns", "k", Bf16(kMiB), Span(q)).ok());  // replaces; old bytes stay leased
  EXPECT_EQ(0, std::memcmp(lease->data(), p.data(), p.size()));
  ExpectEntry(s.get(), "k", 5, kMiB);
  *lease = ReadLease();
  EXPECT_EQ(s->Stats()->pool().used, kMiB);  // the old block went back on release
}

TEST(Store, SpillsPastThePoolAndPromotesByteExact) {
  TempDir dir;
  auto s = OpenOrDie(dir.path(), Small(32 * kMiB));
  const size_t n = 3 * kMiB + 123;  // not block aligned on purpose
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(s->Put("ns", "k" + std::to_string(i), Bf16(n - 1), Span(Payload(i, n - 1))).ok());
  StoreStats st = *s->Stats();
  EXPECT_GT(st.pool().spills, 0u);
  EXPECT_GT(st.disk().entries, 0u);
  EXPECT_LE(st.pool().used, 32 * kMiB);
  auto first = s->Lookup("ns", "k0");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->tier(), Tier::kDisk);  // LRU: the oldest went first
  for (int i = 0; i < 40; ++i) ExpectEntry(s.get(), "k" + std::to_string(i), i, n - 1);
  EXPECT_GT(s->Stats()->pool().promotions, 0u);
  ExpectEntry(s.get(), "k0", 0, n - 1);
  EXPECT_EQ(s->Lookup("ns", "k0")->tier(), Tier::kPool);  // promoted on get
}

TEST(Store, GetWithoutPromotionReadsFromDisk) {
  TempDir dir;
  Options o = Small(16 * kMiB);
  o.promote_on_get = false;
  auto s = OpenOrDie(dir.path(), o);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(
        s->Put("ns", "k" + std::to_string(i), Bf16(4 * kMiB), Span(Payload(i, 4 * kMiB))).ok());
  ASSERT_EQ(s->Lookup("ns", "k0")->tier(), Tier::kDisk);
  ExpectEntry(s.get(), "k0", 0, 4 * kMiB);
  EXPECT_EQ(s->Lookup("ns", "k0")->tier(), Tier::kDisk);
  EXPECT_EQ(s->Stats()->pool().promotions, 0u);
}

TEST(Store, EvictionFollowsLruAndNeverTakesALeasedEntry) {
  TempDir dir;
  auto s = OpenOrDie(dir.path(), Small(16 * kMiB));
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(
        s->Put("ns", "k" + std::to_string(i), Bf16(4 * kMiB), Span(Payload(i, 4 * kMiB))).ok());
  auto lease = s->Acquire("ns", "k0");  // k0 is the oldest, but leased
  ASSERT_TRUE(lease.ok());
  ExpectEntry(s.get(), "k1", 1, 4 * kMiB);  // k1 becomes recent; k2 is now coldest unleased
  ASSERT_TRUE(s->Put("ns", "k3", Bf16(4 * kMiB), Span(Payload(3, 4 * kMiB))).ok());
  ASSERT_TRUE(s->Put("ns", "k4", Bf16(4 * kMiB), Span(Payload(4, 4 * kMiB))).ok());
  EXPECT_EQ(s->Lookup("ns", "k0")->tier(), Tier::kPool);
  EXPECT_EQ(s->Lookup("ns", "k2")->tier(), Tier::kDisk);
  EXPECT_EQ(0, std::memcmp(lease->data(), Payload(0, 4 * kMiB).data(), 4 * kMiB));
}

TEST(Store, PutReturnsBusyWhenEverythingIsLeased) {
  TempDir dir;
  Options o = Small(8 * kMiB);
  o.put_wait = std::chrono::milliseconds(300);
  auto s = OpenOrDie(dir.path(), o);
  ASSERT_TRUE(s->Put("ns", "a", Bf16(4 * kMiB), Span(Payload(1, 4 * kMiB))).ok());
  ASSERT_TRUE(s->Put("ns", "b", Bf16(4 * kMiB), Span(Payload(2, 4 * kMiB))).ok());
  auto la = s->Acquire("ns", "a");
  auto lb = s->Acquire("ns", "b");
  ASSERT_TRUE(la.ok() && lb.ok());
  Status st = s->Put("ns", "c", Bf16(4 * kMiB), Span(Payload(3, 4 * kMiB)));
  EXPECT_TRUE(st.IsBusy()) << st.ToString();
  EXPECT_NE(st.message().find("leased"), std::string::npos);
  *lb = ReadLease();
  EXPECT_TRUE(s->Put("ns", "c", Bf16(4 * kMiB), Span(Payload(3, 4 * kMiB))).ok());
  ExpectEntry(s.get(), "a", 1, 4 * kMiB);
}

TEST(Store, ReopenAfterCleanCloseFindsEveryEntry) {
  TempDir dir;
  {
    auto s = OpenOrDie(dir.path(), Small(16 * kMiB));
    for (int i = 0; i < 12; ++i)
      ASSERT_TRUE(
          s->Put("ns", "k" + std::to_string(i), Bf16(2 * kMiB), Span(Payload(i, 2 * kMiB))).ok());
    ASSERT_TRUE(s->Erase("ns", "k5").ok());
    ExpectEntry(s.get(), "k3", 3, 2 * kMiB);
    ASSERT_TRUE(s->Close().ok());
  }
  auto s = OpenOrDie(dir.path(), Small(16 * kMiB));
  EXPECT_EQ(s->List()->size(), 11u);
  for (int i = 0; i < 12; ++i) {
    if (i == 5) {
      EXPECT_TRUE(s->Lookup("ns", "k5").status().IsNotFound());
      continue;
    }
    ExpectEntry(s.get(), "k" + std::to_string(i), i, 2 * kMiB);
  }
  EXPECT_GE(s->Lookup("ns", "k3")->hits, 1u);  // access stats persist
}

TEST(Store, SecondOpenOfTheSameDirectoryIsRefused) {
  TempDir dir;
  auto s = OpenOrDie(dir.path(), Small());
  auto again = Store::Open(dir.path(), Small());
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(again.status().IsBusy());
  EXPECT_NE(again.status().message().find("in use by another process"), std::string::npos);
}

std::string OnlySegment(const std::string& dir) {
  for (auto& f : std::filesystem::directory_iterator(dir + "/segments")) return f.path();
  return "";
}

TEST(Store, FlippedByteIsCorruptionAndTheEntryIsDropped) {
  TempDir dir;
  {
    auto s = OpenOrDie(dir.path(), Small());
    ASSERT_TRUE(s->Put("ns", "a", Bf16(kMiB), Span(Payload(1, kMiB))).ok());
    ASSERT_TRUE(s->Put("ns", "b", Bf16(kMiB), Span(Payload(2, kMiB))).ok());
    ASSERT_TRUE(s->Close().ok());
  }
  // Records are laid out a then b: flip one payload byte of the first record.
  std::string seg = OnlySegment(dir.path());
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096 + 1000);
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(4096 + 1000);
    f.write(&c, 1);
  }
  auto s = OpenOrDie(dir.path(), Small());
  std::vector<uint8_t> buf(kMiB);
  std::string first = "a", second = "b";
  auto r = s->Get("ns", first, {buf.data(), buf.size()});
  if (r.ok()) std::swap(first, second), r = s->Get("ns", first, {buf.data(), buf.size()});
  ASSERT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  EXPECT_TRUE(s->Lookup("ns", first).status().IsNotFound());
  EXPECT_EQ(s->Stats()->corrupt_dropped, 1u);
  ExpectEntry(s.get(), second, second == "a" ? 1 : 2, kMiB);
  ASSERT_TRUE(s->Close().ok());
  auto again = OpenOrDie(dir.path(), Small());
  EXPECT_TRUE(again->Lookup("ns", first).status().IsNotFound());  // stays dropped
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// One flipped byte in a record header mid-segment costs that record only: repair and the
// next open go on at the next valid record and never cut the file there.
TEST(Store, DamagedHeaderMidSegmentLosesOnlyThatRecord) {
  TempDir dir;
  {
    auto s = OpenOrDie(dir.path(), Small());
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(s->Put("ns", "k" + std::to_string(i), Bf16(kMiB), Span(Payload(i, kMiB))).ok());
    ASSERT_TRUE(s->Close().ok());
  }
  const std::string seg = OnlySegment(dir.path());
  const uint64_t size = std::filesystem::file_size(seg);
  const uint64_t record = 4096 + kMiB;
  FlipByte(seg, record + 200);  // the second record's header (its key bytes)
  Options repair = Small();
  repair.rebuild_index = true;
  std::string lost;
  {
    auto s = OpenOrDie(dir.path(), repair);
    EXPECT_EQ(s->List()->size(), 3u);
    EXPECT_EQ(s->Stats()->corrupt_dropped, 1u);
    for (int i = 0; i < 4; ++i) {
      std::string k = "k" + std::to_string(i);
      if (*s->Contains("ns", k))
        ExpectEntry(s.get(), k, i, kMiB);
      else
        lost = k;
    }
    auto rep = s->Verify(nullptr);
    ASSERT_TRUE(rep.ok());
    ASSERT_EQ(rep->corrupt.size(), 1u);  // verify reports the damaged header
    EXPECT_NE(rep->corrupt[0].find("header"), std::string::npos) << rep->corrupt[0];
    ASSERT_TRUE(s->Close().ok());
  }
  EXPECT_EQ(std::filesystem::file_size(seg), size) << "the segment was cut at the damage";
  auto s = OpenOrDie(dir.path(), Small());
  EXPECT_EQ(s->List()->size(), 3u);
  EXPECT_FALSE(*s->Contains("ns", lost));
  for (int i = 0; i < 4; ++i)  // which record was second depends on the order Close spilled in
    if ("k" + std::to_string(i) != lost) ExpectEntry(s.get(), "k" + std::to_string(i), i, kMiB);
}

void SqlOrDie(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

// Damaged index rows (records intact on disk): a wrong checksum, offset or length in a row
// never tombstones the record nor over-reads; the record's own header wins, and a row that
// cannot be matched is dropped without touching the data, which repair brings back.
TEST(Store, DamagedIndexRowsNeverCostIntactRecords) {
  TempDir dir;
  {
    auto s = OpenOrDie(dir.path(), Small());
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(s->Put("ns", "k" + std::to_string(i), Bf16(kMiB), Span(Payload(i, kMiB))).ok());
    ASSERT_TRUE(s->Close().ok());
  }
  const std::string db = dir.path() + "/index.sqlite";
  SqlOrDie(db,
           "UPDATE entries SET checksum = checksum + 1 WHERE key = 'k0';"
           "UPDATE entries SET offset = (SELECT offset FROM entries WHERE key = 'k3')"
           " WHERE key = 'k1';"
           "UPDATE entries SET raw_len = raw_len * 4, stored_len = stored_len * 4"
           " WHERE key = 'k2';"
           "UPDATE entries SET seq = seq + 1000 WHERE key = 'k3';");
  {
    auto s = OpenOrDie(dir.path(), Small());
    std::vector<uint8_t> got(8 * kMiB);
    for (int i = 0; i < 3; ++i) {
      auto info = s->Get("ns", "k" + std::to_string(i), {got.data(), got.size()});
      ASSERT_TRUE(info.ok()) << i << ": " << info.status().ToString();
      EXPECT_EQ(info->bytes, kMiB);
      EXPECT_EQ(0, std::memcmp(got.data(), Payload(i, kMiB).data(), kMiB)) << i;
    }
    auto lost = s->Get("ns", "k3", {got.data(), got.size()});
    EXPECT_TRUE(lost.status().IsNotFound()) << lost.status().ToString();
    EXPECT_NE(lost.status().message().find("repair"), std::string::npos);
    EXPECT_EQ(s->Stats()->corrupt_dropped, 0u);
    ASSERT_TRUE(s->Close().ok());
  }
  Options repair = Small();
  repair.rebuild_index = true;
  auto s = OpenOrDie(dir.path(), repair);
  EXPECT_EQ(s->List()->size(), 4u);
  for (int i = 0; i < 4; ++i) ExpectEntry(s.get(), "k" + std::to_string(i), i, kMiB);
}

int CountFilesStartingWith(const std::string& dir, const std::string& prefix) {
  int n = 0;
  for (auto& f : std::filesystem::directory_iterator(dir))
    n += f.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

// A broken index.sqlite (random bytes, or one damaged page) is moved aside and rebuilt from
// the segments, by a plain open and by repair; no entry is lost.
TEST(Store, BrokenIndexFileIsSetAsideAndRebuilt) {
  for (int damage : {0, 1, 2}) {
    SCOPED_TRACE(damage);
    TempDir dir;
    {
      auto s = OpenOrDie(dir.path(), Small());
      for (int i = 0; i < 40; ++i)
        ASSERT_TRUE(
            s->Put("ns", "k" + std::to_string(i), Bf16(64 << 10), Span(Payload(i, 64 << 10))).ok());
      ASSERT_TRUE(s->Close().ok());
    }
    const std::string db = dir.path() + "/index.sqlite";
    const uint64_t size = std::filesystem::file_size(db);
    {
      std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
      std::vector<char> junk(damage == 0 ? size : 4096);
      for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 131 + 7);
      // 0: the whole file; 1: the entries table's root page; 2: the last page.
      f.seekp(damage == 0 ? 0 : damage == 1 ? 4096 : static_cast<std::streamoff>(size - 4096));
      f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    }
    Options o = Small();
    o.rebuild_index = damage == 2;  // repair
    auto s = OpenOrDie(dir.path(), o);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->List()->size(), 40u);
    for (int i = 0; i < 40; i += 13) ExpectEntry(s.get(), "k" + std::to_string(i), i, 64 << 10);
    EXPECT_EQ(CountFilesStartingWith(dir.path(), "index.sqlite.broken-"), 1);
  }
}

TEST(Store, VerifyFindsAndDropsCorruptRecords) {
  TempDir dir;
  {
    auto s = OpenOrDie(dir.path(), Small());
    ASSERT_TRUE(s->Put("ns", "a", Bf16(kMiB), Span(Payload(1, kMiB))).ok());
    ASSERT_TRUE(s->Close().ok());
  }
  {
    std::fstream f(OnlySegment(dir.path()), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 77);
    f.put('\x55');
  }
  auto s = OpenOrDie(dir.path(), Small());
  uint64_t last = 0;
  auto rep = s->Verify([&](uint64_t done, uint64_t) { last = done; });
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->checked, 1u);
  ASSERT_EQ(rep->corrupt.size(), 1u);
  EXPECT_EQ(last, 1u);
  EXPECT_TRUE(s->Lookup("ns", "a").status().IsNotFound());
}

// A corrupt disk copy of an entry whose pool copy is sound costs only the disk copy: the
// pool copy stays served and is written again, and survives a rebuild from the segments.
TEST(Store, VerifyKeepsASoundPoolCopyWhenTheDiskCopyIsCorrupt) {
  TempDir dir;
  auto s = OpenOrDie(dir.path(), Small());
  ASSERT_TRUE(s->Put("ns", "a", Bf16(kMiB), Span(Payload(1, kMiB))).ok());
  ASSERT_TRUE(s->Flush().ok());
  {
    std::fstream f(OnlySegment(dir.path()), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 77);
    f.put('\x55');
  }
  auto rep = s->Verify(nullptr);
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->corrupt.size(), 1u);
  EXPECT_NE(rep->corrupt[0].find("pool copy kept"), std::string::npos) << rep->corrupt[0];
  ExpectEntry(s.get(), "a", 1, kMiB);
  ASSERT_TRUE(s->Close().ok());
  Options o = Small();
  o.rebuild_index = true;
  auto again = OpenOrDie(dir.path(), o);
  ExpectEntry(again.get(), "a", 1, kMiB);
}

// An entry that cannot fit in the disk quota is refused at Put; Flush and Close finish.
TEST(Store, EntryLargerThanTheDiskQuotaIsRefusedAtPut) {
  TempDir dir;
  Options o = Small();
  o.disk_quota_bytes = 4 * kMiB;
  auto s = OpenOrDie(dir.path(), o);
  ASSERT_TRUE(s->Put("ns", "fits", Bf16(kMiB), Span(Payload(1, kMiB))).ok());
  Status st = s->Put("ns", "big", Bf16(5 * kMiB), Span(Payload(2, 5 * kMiB)));
  EXPECT_TRUE(st.IsNoSpace()) << st.ToString();
  EXPECT_NE(st.message().find("disk quota"), std::string::npos) << st.message();
  EXPECT_FALSE(*s->Contains("ns", "big"));
  ASSERT_TRUE(s->Flush().ok());
  ASSERT_TRUE(s->Close().ok());
  auto again = OpenOrDie(dir.path(), o);
  ExpectEntry(again.get(), "fits", 1, kMiB);
}

TEST(Store, DiskQuotaEvictsColdestDiskEntries) {
  TempDir dir;
  Options o = Small(8 * kMiB);
  o.disk_quota_bytes = 20 * kMiB;
  auto s = OpenOrDie(dir.path(), o);
  for (int i = 0; i < 12; ++i)
    ASSERT_TRUE(
        s->Put("ns", "k" + std::to_string(i), Bf16(2 * kMiB), Span(Payload(i, 2 * kMiB))).ok());
  ASSERT_TRUE(s->Flush().ok());
  StoreStats st = *s->Stats();
  EXPECT_GT(st.disk().evictions, 0u);
  EXPECT_LE(st.disk().bytes, 20 * kMiB);
  EXPECT_TRUE(s->Lookup("ns", "k0").status().IsNotFound());  // coldest went
  ExpectEntry(s.get(), "k11", 11, 2 * kMiB);
  for (const EntryInfo& e : *s->List()) {
    uint64_t seed = std::stoull(e.key.substr(1));
    ExpectEntry(s.get(), e.key, seed, 2 * kMiB);  // whatever survived is intact
  }
}

// Past a few thousand disk entries the quota ranks a random sample, not every entry: the
// victims still come from the coldest part, and the hottest survive.
TEST(Store, ALargeDiskTierTakesItsQuotaVictimsFromItsColdestPart) {
  TempDir dir;
  Options o = Small(8 * kMiB);
  // Not a test of waiting: a spill's fdatasync can stall past 1.5 s while other tests load
  // this VM's disk (a Put then answered Busy under ctest -j2).
  o.put_wait = std::chrono::seconds(30);
  constexpr int kN = 6000, kMore = 600;
  o.disk_quota_bytes = (kN + 64) * 8 * kKiB;  // each record: a 4 KiB header + 4 KiB
  auto s = OpenOrDie(dir.path(), o);
  auto put = [&](int i) {
    Status st = s->Put("ns", "k" + std::to_string(i), Bf16(4 * kKiB), Span(Payload(i, 4 * kKiB)));
    ASSERT_TRUE(st.ok()) << st.ToString();
  };
  for (int i = 0; i < kN; ++i) put(i);
  ASSERT_TRUE(s->Flush().ok());
  for (int i = kN; i < kN + kMore; ++i) put(i);
  ASSERT_TRUE(s->Flush().ok());
  StoreStats st = *s->Stats();
  EXPECT_GE(st.disk().evictions, static_cast<uint64_t>(kMore) / 2);
  int gone_old = 0, gone_new = 0;
  for (int i = 0; i < kN; ++i) {
    const bool gone = s->Lookup("ns", "k" + std::to_string(i)).status().IsNotFound();
    (i < kN / 2 ? gone_old : gone_new) += gone;
  }
  EXPECT_GE(gone_old, kMore / 2);
  EXPECT_EQ(gone_new, 0) << "an entry from the newer half was evicted";
  for (int i = kN; i < kN + kMore; ++i) ExpectEntry(s.get(), "k" + std::to_string(i), i, 4 * kKiB);
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t n = 0;
  for (auto& f : std::filesystem::directory_iterator(dir)) n += f.file_size();
  return n;
}

// The quota bounds the files, not just the live bytes: overwrites and erases leave dead
// records, and those are compacted away before the files pass the quota.
TEST(Store, DiskQuotaBoundsTheSegmentFiles) {
  TempDir dir;
  Options o = Small(8 * kMiB);
  o.disk_quota_bytes = 16 * kMiB;
  auto s = OpenOrDie(dir.path(), o);
  for (int round = 0; round < 12; ++round) {
    for (int i = 0; i < 6; ++i)  // the same keys again and again: the old records die
      ASSERT_TRUE(
          s->Put("ns", "k" + std::to_string(i), Bf16(kMiB), Span(Payload(round * 10 + i, kMiB)))
              .ok());
    ASSERT_TRUE(s->Flush().ok());
    EXPECT_LE(s->Stats()->disk().used, 16 * kMiB) << "round " << round;
    EXPECT_LE(DirBytes(dir.path() + "/segments"), 16 * kMiB) << "round " << round;
  }
  for (int i = 0; i < 6; ++i) ExpectEntry(s.get(), "k" + std::to_string(i), 110 + i, kMiB);
}

TEST(Store, CompactionReclaimsDeadSpaceAndKeepsLiveEntries) {
  TempDir dir;
  Options o = Small(8 * kMiB);
  o.segment_bytes = 8 * kMiB;
  auto s = OpenOrDie(dir.path(), o);
  for (int i = 0; i < 16; ++i)
    ASSERT_TRUE(s->Put("ns", "k" + std::to_string(i), Bf16(kMiB), Span(Payload(i, kMiB))).ok());
  ASSERT_TRUE(s->Flush().ok());
  for (int i = 0; i < 16; i += 2) ASSERT_TRUE(s->Erase("ns", "k" + std::to_string(i)).ok());
  uint64_t before = s->Stats()->disk().used;
  ASSERT_TRUE(s->Compact(1.0).ok());
  StoreStats st = *s->Stats();
  EXPECT_GT(st.compactions, 0u);
  EXPECT_LT(st.disk().used, before);
  for (int i = 1; i < 16; i += 2) ExpectEntry(s.get(), "k" + std::to_string(i), i, kMiB);
  ASSERT_TRUE(s->Close().ok());
  // Repair after compaction must not bring the erased entries back.
  std::filesystem::remove(dir.path() + "/index.sqlite");
  std::filesystem::remove(dir.path() + "/index.sqlite-wal");
  std::filesystem::remove(dir.path() + "/index.sqlite-shm");
  auto again = OpenOrDie(dir.path(), Small(8 * kMiB));
  EXPECT_EQ(again->List()->size(), 8u);
  for (int i = 1; i < 16; i += 2) ExpectEntry(again.get(), "k" + std::to_string(i), i, kMiB);
}

// After a reopen every entry is a compact row in the keydir (store/cold_row.h): each
// operation works on rows as on entries -- lookup, list, get, erase, overwrite, compaction
// moving them, verify -- and hits on them outlive the next reopen.
TEST(Store, EntriesReopenedAsCompactRowsServeEveryOperation) {
  TempDir dir;
  auto key = [](int i) { return "k" + std::to_string(i); };
  {
    Options o = Small(8 * kMiB);
    o.segment_bytes = 8 * kMiB;
    auto s = OpenOrDie(dir.path(), o);
    for (int i = 0; i < 16; ++i)
      ASSERT_TRUE(s->Put("ns", key(i), Bf16(kMiB), Span(Payload(i, kMiB))).ok());
    ASSERT_TRUE(s->Close().ok());
  }
  Options o = Small(8 * kMiB);
  o.segment_bytes = 8 * kMiB;
  auto s = OpenOrDie(dir.path(), o);
  EXPECT_EQ(s->Stats()->keydir_entries, 16u);
  EXPECT_EQ(s->Stats()->keydir_compact_rows, 16u) << "recovery makes rows";
  auto info = s->Lookup("ns", key(3));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->bytes, kMiB);
  EXPECT_TRUE(info->tiers.has(Tier::kDisk));
  EXPECT_EQ(s->List()->size(), 16u);
  ASSERT_TRUE(s->Erase("ns", key(0)).ok());
  ASSERT_TRUE(s->Erase("ns", key(4)).ok());
  ASSERT_TRUE(s->Put("ns", key(1), Bf16(kMiB), Span(Payload(101, kMiB))).ok());
  EXPECT_EQ(s->Stats()->keydir_compact_rows, 13u) << "k0 and k4 erased, k1 in the pool";
  for (int n = 0; n < 3; ++n) ExpectEntry(s.get(), key(2), 2, kMiB);
  EXPECT_EQ(s->Stats()->keydir_compact_rows, 12u) << "k2, read, was promoted to the pool";
  ASSERT_TRUE(s->Flush().ok());
  ASSERT_TRUE(s->Compact(1.0).ok());  // moves the rows of the segments the erases thinned
  EXPECT_GT(s->Stats()->compactions, 0u);
  auto report = s->Verify(nullptr);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->checked, 14u);
  EXPECT_TRUE(report->corrupt.empty() && report->errors.empty());
  EXPECT_GE(s->Stats()->keydir_compact_rows, 11u) << "verify made each row an entry, then a row";
  ASSERT_TRUE(s->Close().ok());
  s = OpenOrDie(dir.path(), o);
  EXPECT_TRUE(s->Lookup("ns", key(0)).status().IsNotFound());
  EXPECT_TRUE(s->Lookup("ns", key(4)).status().IsNotFound());
  EXPECT_GE(s->Lookup("ns", key(2))->hits, 3u) << "the hits on a row were indexed at close";
  ExpectEntry(s.get(), key(1), 101, kMiB);
  for (int i = 2; i < 16; ++i)
    if (i != 4) ExpectEntry(s.get(), key(i), i, kMiB);
}

// Rows turn into entries and back while other threads read, erase, put, list and verify:
// every read is byte-exact or NotFound, and what stays is intact after a reopen.
TEST(Store, CompactRowsUnderConcurrentReadsErasesListsAndVerify) {
  TempDir dir;
  constexpr int kKeys = 64;
  constexpr uint64_t kBytes = 64 << 10;
  auto key = [](int i) { return "k" + std::to_string(i); };
  Options o = Small(2 * kMiB);  // most entries on disk only: rows
  {
    auto s = OpenOrDie(dir.path(), o);
    for (int i = 0; i < kKeys; ++i)
      ASSERT_TRUE(s->Put("ns", key(i), Bf16(kBytes), Span(Payload(i, kBytes))).ok());
    ASSERT_TRUE(s->Close().ok());
  }
  auto s = OpenOrDie(dir.path(), o);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      std::vector<uint8_t> got(kBytes);
      for (int n = 0; !stop; ++n) {
        const int i = (n * 7 + t * 13) % kKeys;
        auto info = s->Get("ns", key(i), {got.data(), got.size()});
        if (info.ok() ? got != Payload(i, kBytes) : !info.status().IsNotFound()) ++bad;
      }
    });
  threads.emplace_back([&] {  // erases and puts back the same bytes
    for (int n = 0; !stop; ++n) {
      const int i = (n * 5) % kKeys;
      if (!s->Erase("ns", key(i)).ok()) ++bad;
      if (!s->Put("ns", key(i), Bf16(kBytes), Span(Payload(i, kBytes))).ok()) ++bad;
    }
  });
  threads.emplace_back([&] {
    while (!stop) {
      auto all = s->List();
      if (!all.ok() || all->size() > static_cast<size_t>(kKeys)) ++bad;
      auto report = s->Verify(nullptr);
      if (!report.ok() || !report->corrupt.empty() || !report->errors.empty()) ++bad;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(s->Stats()->keydir_compact_rows, 0u);
  ASSERT_TRUE(s->Close().ok());
  s = OpenOrDie(dir.path(), o);
  for (int i = 0; i < kKeys; ++i) {
    std::vector<uint8_t> got(kBytes);
    auto info = s->Get("ns", key(i), {got.data(), got.size()});
    if (info.ok())
      EXPECT_TRUE(got == Payload(i, kBytes)) << key(i);
    else
      EXPECT_TRUE(info.status().IsNotFound()) << info.status().ToString();
  }
  EXPECT_GE(s->List()->size(), static_cast<size_t>(kKeys - 1)) << "at most one erase was left";
}

TEST(Store, RepairRebuildsTheIndexFromSegments) {
  TempDir dir;
  {
    auto s = OpenOrDie(dir.path(), Small(16 * kMiB));
    for (int i = 0; i < 10; ++i)
      ASSERT_TRUE(
          s->Put("ns", "k" + std::to_string(i), Bf16(3 * kMiB), Span(Payload(i, 3 * kMiB))).ok());
    ASSERT_TRUE(s->Put("ns", "k3", Bf16(kMiB), Span(Payload(33, kMiB))).ok());  // overwrite
    ASSERT_TRUE(s->Erase("ns", "k4").ok());
    ASSERT_TRUE(s->Close().ok());
  }
  for (const char* f : {"/index.sqlite", "/index.sqlite-wal", "/index.sqlite-shm"})
    std::filesystem::remove(dir.path() + f);
  auto s = OpenOrDie(dir.path(), Small(16 * kMiB));
  EXPECT_EQ(s->List()->size(), 9u);
  EXPECT_TRUE(s->Lookup("ns", "k4").status().IsNotFound());
  ExpectEntry(s.get(), "k3", 33, kMiB);
  for (int i : {0, 1, 2, 5, 9}) ExpectEntry(s.get(), "k" + std::to_string(i), i, 3 * kMiB);
}

TEST(Store, CompressedEntriesRoundTrip) {
  TempDir dir;
  Options o = Small(8 * kMiB);
  o.compress = true;
  auto s = OpenOrDie(dir.path(), o);
  std::vector<uint8_t> comp(2 * kMiB);
  for (size_t i = 0; i < comp.size(); i += 2) comp[i] = i % 13, comp[i + 1] = 0x3e;
  ASSERT_TRUE(s->Put("ns", "c", Bf16(comp.size()), Span(comp)).ok());
  ASSERT_TRUE(s->Put("ns", "r", Bf16(2 * kMiB), Span(Payload(7, 2 * kMiB))).ok());
  ASSERT_TRUE(s->Close().ok());
  s = OpenOrDie(dir.path(), o);
  EXPECT_LT(s->Stats()->disk().used, 2 * kMiB + 3 * 4096 + 2 * kMiB);
  std::vector<uint8_t> got(comp.size());
  ASSERT_TRUE(s->Get("ns", "c", {got.data(), got.size()}).ok());
  EXPECT_EQ(got, comp);
  ExpectEntry(s.get(), "r", 7, 2 * kMiB);
}

TEST(Store, ConcurrentReadersAndWritersSeeOnlyWholeEntries) {
  TempDir dir;
  auto s = OpenOrDie(dir.path(), Small(24 * kMiB));
  const size_t n = 2 * kMiB;
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> buf(n);
      for (int i = 0; i < 60 && !failed; ++i) {
        int k = (i * 7 + t) % 24;
        std::string key = "k" + std::to_string(k);
        if ((i + t) % 3 == 0) {
          Status st = s->Put("ns", key, Bf16(n), Span(Payload(k, n)));
          if (!st.ok()) failed = true, ADD_FAILURE() << st.ToString();
        } else {
          auto r = s->Get("ns", key, {buf.data(), buf.size()});
          if (r.ok() && buf != Payload(k, n)) failed = true, ADD_FAILURE() << key << " torn read";
          if (!r.ok() && !r.status().IsNotFound())
            failed = true, ADD_FAILURE() << r.status().ToString();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(failed);
  ASSERT_TRUE(s->Close().ok());
}

TEST(Store, UnwritableDirectoryIsAClearError) {
  if (geteuid() == 0) {
    // root ignores permissions; use a path below a regular file instead
    TempDir dir;
    std::ofstream(dir.sub("file")) << "x";
    auto s = Store::Open(dir.sub("file") + "/store", Small());
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("writable store directory"), std::string::npos)
        << s.status().ToString();
    return;
  }
  auto s = Store::Open("/proc/ecstore-nope", Small());
  ASSERT_FALSE(s.ok());
}

}  // namespace
}  // namespace ecstore

namespace ecstore {
namespace {

class RecordingRegistrar : public MemoryRegistrar {
 public:
  explicit RecordingRegistrar(bool fail = false) : fail_(fail) {}
  const char* Name() const override { return "the test device"; }
  Status Register(const MemoryRegion& r) override {
    if (fail_) return Status::Unavailable("no such device");
    ++registered;
    base = r.base;
    size = r.size;
    return Status::Ok();
  }
  void Deregister(const MemoryRegion& r) override {
    EXPECT_EQ(r.base, base);
    ++deregistered;
  }
  int registered = 0, deregistered = 0;
  uint8_t* base = nullptr;
  size_t size = 0;

 private:
  bool fail_;
};

// Registration of the pool goes through one path, once per registrar, and ends at Close.
TEST(Store, RegistrarsRegisterThePoolOnceUntilRemovedOrClosed) {
  testing::TempDir dir;
  auto s = OpenOrDie(dir.path(), Small());
  RecordingRegistrar a, b, bad(true);
  ASSERT_TRUE(s->AddRegistrar(&a).ok());
  ASSERT_TRUE(s->AddRegistrar(&a).ok());  // once only
  EXPECT_EQ(a.registered, 1);
  EXPECT_EQ(a.base, s->pool_region().base);
  EXPECT_EQ(a.size, s->pool_region().size);
  Status st = s->AddRegistrar(&bad);
  EXPECT_TRUE(st.IsUnavailable());
  EXPECT_NE(st.message().find("registering the pool with the test device"), std::string::npos);
  ASSERT_TRUE(s->AddRegistrar(&b).ok());
  s->RemoveRegistrar(&b);
  EXPECT_EQ(b.deregistered, 1);
  ASSERT_TRUE(s->Close().ok());
  EXPECT_EQ(a.deregistered, 1);
  s->RemoveRegistrar(&a);  // after Close: nothing more
  EXPECT_EQ(a.deregistered, 1);
  EXPECT_EQ(b.deregistered, 1);
}

// The pool's memory comes from Options::memory_backend: the factory is called once at Open.
TEST(Store, PoolMemoryComesFromTheBackendFactory) {
  testing::TempDir dir;
  int made = 0;
  Options o = Small();
  o.memory_backend = [&made] {
    ++made;
    return NewSharedHostBackend();
  };
  auto s = OpenOrDie(dir.path(), o);
  EXPECT_EQ(made, 1);
  EXPECT_GE(s->pool_region().shm_fd, 0);  // the memfd-backed pool it asked for
  ASSERT_TRUE(s->Close().ok());
  Options none = Small();
  none.memory_backend = [] { return std::unique_ptr<MemoryBackend>(); };
  auto bad = Store::Open(dir.path() + "/other", none);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("memory_backend"), std::string::npos);
}

// Both host backends fault the whole pool in at Open, in parallel slices, and say how long
// it took: the data path never takes a page fault, and an operator sees what open cost.
TEST(Store, ThePoolIsFaultedInAtOpenAndTheStatsSayHowLong) {
  for (auto make : {NewHostPinnedBackend, NewSharedHostBackend}) {
    auto backend = make();
    auto region = backend->Map(256 << 20);
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    if (!region->hugetlb) {  // reserved huge pages are faulted in by the mapping itself
      EXPECT_GE(region->prefault_threads, 1u);
      EXPECT_GT(region->prefault_seconds, 0.0);
      // Every page is resident: mincore reports each one in memory.
      std::vector<unsigned char> vec(region->size / 4096);
      ASSERT_EQ(mincore(region->base, region->size, vec.data()), 0);
      EXPECT_TRUE(std::all_of(vec.begin(), vec.end(), [](unsigned char c) { return c & 1; }));
    }
    backend->Unmap(*region);
  }
  testing::TempDir dir;
  auto s = OpenOrDie(dir.path(), Small());
  auto st = s->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->pool_prefault_threads, s->pool_region().prefault_threads);
  EXPECT_DOUBLE_EQ(st->pool_prefault_seconds, s->pool_region().prefault_seconds);
}

// An embedded store reads in place, reserves and prefetches; it hands out the memory,
// reservations and admin facets; without a device tier it has no device facet
// (DeviceTier.NeedsAGpuAndSaysSo: what a device put answers); and it has no claims facet, so
// every claim is granted (no one else's are seen).
TEST(Store, AnEmbeddedStoreSaysWhatItDoesItself) {
  TempDir dir;
  Options o;
  o.pool_bytes = 8 << 20;
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Cache& c = **s;
  CacheCapabilities caps = c.capabilities();
  EXPECT_TRUE(caps.in_place_reads && caps.reserve && caps.prefetch);
  EXPECT_FALSE(caps.device_tier || caps.device_puts || caps.device_leases);
  EXPECT_FALSE(caps.prefetch_queued || caps.claims || caps.device_io);
  EXPECT_TRUE(caps.memory && caps.reservations && caps.admin);
  EXPECT_FALSE(caps.memory->host_pool().read_only);
  EXPECT_EQ(caps.memory->host_pool().bytes.size(), o.pool_bytes);
  auto claim = ClaimOrGrant(caps, "ns", "k", std::chrono::milliseconds(100));
  ASSERT_TRUE(claim.ok());
  EXPECT_EQ(claim->outcome, ClaimOutcome::kGranted);
  auto hint = c.Prefetch("ns", {"absent"});
  ASSERT_TRUE(hint.ok() && *hint) << "nothing on disk to bring in: all done";
}

}  // namespace
}  // namespace ecstore
