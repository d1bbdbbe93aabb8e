#include "store/durable_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "base/test_util.h"
#include "base/units.h"

namespace ecstore {
namespace {

using testing::Payload;
using testing::TempDir;

// A keydir in miniature: what the tier's owner keeps (record, location, leased or not), and
// what the tier asked of it.
class FakeOwner : public DurableTier::Owner {
 public:
  struct Item {
    EntryRecord rec;
    std::optional<DiskLocation> loc;
    bool leased = false;
    uint64_t id() const { return reinterpret_cast<uintptr_t>(this); }
  };
  DurableTier* tier = nullptr;
  std::map<std::string, std::unique_ptr<Item>> items;
  int yields = 0, relocations = 0, corrupt = 0;

  Item* Add(const EntryRecord& rec) {
    auto& it = items[rec.key];
    it = std::make_unique<Item>();
    it->rec = rec;
    return it.get();
  }
  void Recovered(IndexRow&& row) override { Add(row)->loc = row.loc; }
  uint64_t RecoveredSeq(const std::string&, const std::string& key) override {
    auto it = items.find(key);
    return it == items.end() ? 0 : it->second->rec.seq;
  }
  void RecoveredTombstone(const std::string&, const std::string& key, uint64_t target) override {
    auto it = items.find(key);
    if (it != items.end() && it->second->rec.seq <= target) items.erase(it);
  }
  void RecoveryRestarts() override { items.clear(); }
  void RecoveryExpects(uint64_t) override {}
  // After recovery, as StoreImpl does: every recovered record joins the accounting.
  void TrackAll() {
    for (auto& [_, it] : items) tier->Track(it->rec.bytes, *it->loc);
  }
  // Coldest first: the oldest seq (a real owner ranks by last access or value).
  bool YieldForQuota(uint64_t incoming, std::vector<Tombstone>* tombs) override {
    ++yields;
    std::vector<Item*> order;
    for (auto& [_, it] : items)
      if (it->loc && !it->leased) order.push_back(it.get());
    std::sort(order.begin(), order.end(),
              [](const Item* a, const Item* b) { return a->rec.seq < b->rec.seq; });
    for (Item* it : order) {
      tier->Untrack(it->rec.bytes, *it->loc);
      tombs->push_back({it->rec.ns, it->rec.key, it->rec.seq, it->loc->segment});
      items.erase(it->rec.key);
      if (!tier->OverQuota(incoming)) break;
    }
    return !order.empty();
  }
  std::vector<IndexRow> RecordsIn(uint32_t segment) override {
    std::vector<IndexRow> out;
    for (auto& [_, it] : items)
      if (it->loc && it->loc->segment == segment) out.emplace_back(it->rec, *it->loc);
    return out;
  }
  void Relocate(const EntryRecord& rec, const DiskLocation& from, const DiskLocation& to) override {
    auto it = items.find(rec.key);
    if (it == items.end() || !it->second->loc || !(*it->second->loc == from)) return;
    it->second->loc = to;
    tier->Moved(rec, from, to);
    ++relocations;
  }
  void RecordCorrupt(const EntryRecord&, const DiskLocation&, const Status&) override { ++corrupt; }
};

struct Fixture {
  TempDir dir;
  DurableOptions opt;
  std::unique_ptr<DurableTier> tier;
  FakeOwner owner;

  explicit Fixture(uint64_t quota = 64 * kMiB) { opt.quota_bytes = quota; }
  void Open() {
    owner = FakeOwner();
    tier.reset();
    auto t = DurableTier::Open(dir.path(), Env::Default(), opt);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier = std::move(t).value();
    owner.tier = tier.get();
    ASSERT_TRUE(tier->Recover(&owner).ok());
    owner.TrackAll();
  }
  // Spills one entry (bytes from Payload(seed)) and installs it as the owner would.
  void Spill(const std::string& key, uint64_t seed, uint64_t bytes) {
    auto payload = Payload(seed, bytes);
    AlignedBuffer buf(bytes);
    std::memcpy(buf.data(), payload.data(), bytes);
    EntryRecord rec;
    rec.ns = "ns";
    rec.key = key;
    rec.seq = tier->NextSeq();
    rec.meta = {DType::kBF16, {static_cast<int64_t>(bytes / 2)}};
    rec.bytes = bytes;
    rec.checksum = PayloadChecksum(payload.data(), bytes);
    FakeOwner::Item* it = owner.Add(rec);
    Status st = tier->Spill({{it->id(), rec, buf.data()}}, [&](const Status& s, const auto& out) {
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_TRUE(out[0].loc);
      it->loc = out[0].loc;
      tier->Adopt(rec, *out[0].loc, true);
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void ExpectReadable(const std::string& key, uint64_t seed) {
    ASSERT_TRUE(owner.items.count(key)) << key << " is gone";
    FakeOwner::Item* it = owner.items[key].get();
    AlignedBuffer dst(it->rec.bytes);
    bool stale = false;
    Status st = tier->Read(it->rec, *it->loc, dst.data(), dst.size(), &stale);
    ASSERT_TRUE(st.ok()) << key << ": " << st.ToString();
    EXPECT_EQ(std::memcmp(dst.data(), Payload(seed, it->rec.bytes).data(), it->rec.bytes), 0);
  }
};

TEST(DurableTier, SpilledRecordsComeBackAfterReopenWithAndWithoutTheIndex) {
  Fixture f;
  f.Open();
  f.Spill("a", 1, 300 * kKiB);
  f.Spill("b", 2, 1 * kMiB);
  ASSERT_TRUE(f.tier->Flush().ok());
  f.Open();
  ASSERT_EQ(f.owner.items.size(), 2u);
  f.ExpectReadable("a", 1);
  f.ExpectReadable("b", 2);
  TierStats disk;
  uint64_t segs = 0, compactions = 0, corrupt = 0;
  f.tier->FillStats(&disk, &segs, &compactions, &corrupt);
  EXPECT_EQ(disk.entries, 2u);
  EXPECT_EQ(disk.bytes, 300 * kKiB + 1 * kMiB);
  // The segments alone are the source of truth: without the index, the same entries.
  f.tier.reset();
  std::filesystem::remove(f.dir.sub("index.sqlite"));
  f.Open();
  ASSERT_EQ(f.owner.items.size(), 2u);
  f.ExpectReadable("b", 2);
  EXPECT_GT(f.tier->NextSeq(), f.owner.items["b"]->rec.seq);
}

TEST(DurableTier, TombstonesOutliveAnIndexRebuild) {
  Fixture f;
  f.Open();
  f.Spill("gone", 3, 64 * kKiB);
  f.Spill("kept", 4, 64 * kKiB);
  FakeOwner::Item* gone = f.owner.items["gone"].get();
  f.tier->Untrack(gone->rec.bytes, *gone->loc);
  ASSERT_TRUE(f.tier->WriteTombstones({{"ns", "gone", gone->rec.seq, gone->loc->segment}}).ok());
  f.tier.reset();
  std::filesystem::remove(f.dir.sub("index.sqlite"));
  f.Open();
  EXPECT_EQ(f.owner.items.count("gone"), 0u);
  f.ExpectReadable("kept", 4);
}

TEST(DurableTier, TheQuotaAsksTheOwnerForTheColdestAndSkipsLeasedOnes) {
  Fixture f(4 * kMiB);
  f.Open();
  f.Spill("old", 5, 1 * kMiB);
  f.Spill("leased", 6, 1 * kMiB);
  f.Spill("new", 7, 1 * kMiB);
  f.owner.items["old"]->leased = false;
  f.owner.items["leased"]->leased = true;
  f.Spill("newest", 8, 1 * kMiB);  // 4 records + headers exceed 4 MiB: one must go
  EXPECT_GE(f.owner.yields, 1);
  EXPECT_EQ(f.owner.items.count("old"), 0u);
  EXPECT_EQ(f.owner.items.count("leased"), 1u);
  f.ExpectReadable("newest", 8);
  TierStats disk;
  uint64_t segs = 0, compactions = 0, corrupt = 0;
  f.tier->FillStats(&disk, &segs, &compactions, &corrupt);
  EXPECT_EQ(disk.evictions, 1u);
  EXPECT_FALSE(f.tier->OverQuota(0));
}

TEST(DurableTier, CompactionMovesLiveRecordsThroughTheOwner) {
  Fixture f;
  f.opt.segment_bytes = 1 * kMiB;
  f.Open();
  for (int i = 0; i < 6; ++i) f.Spill("k" + std::to_string(i), 10 + i, 400 * kKiB);
  for (int i = 0; i < 6; i += 2) {  // every other entry dies
    FakeOwner::Item* it = f.owner.items["k" + std::to_string(i)].get();
    f.tier->Untrack(it->rec.bytes, *it->loc);
    ASSERT_TRUE(f.tier->WriteTombstones({{"ns", it->rec.key, it->rec.seq, it->loc->segment}}).ok());
    f.owner.items.erase(it->rec.key);
  }
  ASSERT_TRUE(f.tier->Compact(1.0).ok());
  EXPECT_GE(f.owner.relocations, 1);
  for (int i = 1; i < 6; i += 2) f.ExpectReadable("k" + std::to_string(i), 10 + i);
  ASSERT_TRUE(f.tier->Flush().ok());
  f.Open();  // the index learned the new locations
  EXPECT_EQ(f.owner.items.size(), 3u);
  for (int i = 1; i < 6; i += 2) f.ExpectReadable("k" + std::to_string(i), 10 + i);
}

// Churn (put, erase, put, erase...) writes a tombstone per erase. Once the segment holding
// the erased record is compacted away, its tombstone hides nothing and goes too: kept
// forever, they filled a segment that compaction copied again and again (the soak test).
TEST(DurableTier, ATombstoneGoesWithTheRecordItKills) {
  Fixture f;
  f.opt.segment_bytes = 256 * kKiB;
  f.Open();
  f.Spill("anchor", 40, 4 * kKiB);  // long-lived: the oldest segment never empties
  for (int i = 0; i < 400; ++i) {
    const std::string key = "churn" + std::to_string(i);
    f.Spill(key, 41, 4 * kKiB);
    FakeOwner::Item* it = f.owner.items[key].get();
    f.tier->Untrack(it->rec.bytes, *it->loc);
    ASSERT_TRUE(f.tier->WriteTombstones({{"ns", key, it->rec.seq, it->loc->segment}}).ok());
    f.owner.items.erase(key);
  }
  TierStats disk;
  uint64_t segs = 0, compactions = 0, corrupt = 0;
  f.tier->FillStats(&disk, &segs, &compactions, &corrupt);
  ASSERT_GT(disk.used, 400 * 12 * kKiB - 1);  // 400 records and 400 tombstones
  ASSERT_TRUE(f.tier->Compact(1.0).ok());
  ASSERT_TRUE(f.tier->Compact(1.0).ok());  // the tombstones moved by the first pass
  f.tier->FillStats(&disk, &segs, &compactions, &corrupt);
  EXPECT_LT(disk.used, 256 * kKiB) << segs << " segments";
  // Nothing erased comes back, even when the index is rebuilt from the segments alone.
  ASSERT_TRUE(f.tier->Flush().ok());
  f.tier.reset();
  std::filesystem::remove(f.dir.sub("index.sqlite"));
  f.Open();
  ASSERT_EQ(f.owner.items.size(), 1u);
  f.ExpectReadable("anchor", 40);
}

// The quota bounds what the segment files take on disk: the append target's preallocated
// blocks count, and so do tombstone appends of their own (an erase, a replaced entry). Each
// once let the files run a segment or a few blocks past the quota.
TEST(DurableTier, QuotaBoundsPreallocatedBlocksAndTombstoneAppends) {
  Fixture f(8 * kMiB);
  f.opt.segment_bytes = 1 * kMiB;
  f.Open();
  auto dir_bytes = [&] {
    uint64_t n = 0;
    for (auto& e : std::filesystem::directory_iterator(f.dir.sub("segments"))) n += e.file_size();
    return n;
  };
  for (int i = 0; i < 120; ++i) {  // 6 keys over and over: each overwrite leaves a tombstone
    const std::string key = "k" + std::to_string(i % 6);
    if (f.owner.items.count(key)) {
      FakeOwner::Item* old = f.owner.items[key].get();
      f.tier->Untrack(old->rec.bytes, *old->loc);
      ASSERT_TRUE(f.tier->WriteTombstones({{"ns", key, old->rec.seq, old->loc->segment}}).ok());
      f.owner.items.erase(key);
      ASSERT_LE(dir_bytes(), 8 * kMiB) << "after the tombstone of put " << i;
    }
    f.Spill(key, i, 256 * kKiB);
    ASSERT_LE(dir_bytes(), 8 * kMiB) << "after " << i + 1 << " puts";
  }
  for (int k = 0; k < 6; ++k) f.ExpectReadable("k" + std::to_string(k), 114 + k);
}

// The append target is preallocated (extending O_DIRECT writes are the slow kind); a clean
// close gives back what it did not use, and after a crash the zeros past the last record are
// cut off by the recovery scan, losing nothing and counting nothing as corrupt.
TEST(DurableTier, PreallocatedSpaceIsGivenBackAndCutAfterACrash) {
  Fixture f;
  f.opt.segment_bytes = 8 * kMiB;
  f.Open();
  f.Spill("a", 50, 1 * kMiB);
  const std::string seg = f.dir.sub("segments/seg-00000001.ecs");
  const uint64_t data = kBlockSize + 1 * kMiB;
  const bool preallocated = std::filesystem::file_size(seg) == 8 * kMiB;
  if (!preallocated) std::printf("note: this filesystem does not preallocate (fallocate)\n");
  ASSERT_TRUE(f.tier->Flush().ok());
  f.tier.reset();  // a clean close
  EXPECT_EQ(std::filesystem::file_size(seg), data);
  std::filesystem::resize_file(seg, 8 * kMiB);  // as a crash leaves a preallocated segment
  f.Open();
  ASSERT_EQ(f.owner.items.size(), 1u);
  f.ExpectReadable("a", 50);
  TierStats disk;
  uint64_t segs = 0, compactions = 0, corrupt = 0;
  f.tier->FillStats(&disk, &segs, &compactions, &corrupt);
  EXPECT_EQ(corrupt, 0u);
  EXPECT_EQ(disk.used, data);  // the zeros are not counted as data
  f.Spill("b", 51, 1 * kMiB);  // appends go on in the same segment, after its last record
  ASSERT_TRUE(f.tier->Flush().ok());
  f.tier.reset();
  EXPECT_EQ(std::filesystem::file_size(seg), 2 * data);
  f.Open();
  f.ExpectReadable("a", 50);
  f.ExpectReadable("b", 51);
}

TEST(DurableTier, ReadsTellAStaleRowFromACorruptPayload) {
  Fixture f;
  f.Open();
  f.Spill("a", 20, 128 * kKiB);
  FakeOwner::Item* it = f.owner.items["a"].get();
  AlignedBuffer dst(it->rec.bytes);
  bool stale = false;
  EntryRecord wrong = it->rec;
  wrong.seq += 1;  // a row that is not this record's
  EXPECT_TRUE(f.tier->Read(wrong, *it->loc, dst.data(), dst.size(), &stale).IsNotFound());
  EXPECT_TRUE(stale);
  auto found = f.tier->FindRecord(it->rec, it->loc->segment);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->second.offset, it->loc->offset);
  // Damage one payload byte on disk: the header still matches, the checksum does not.
  {
    std::string seg = f.dir.sub("segments");
    auto path = std::filesystem::directory_iterator(seg)->path();
    FILE* fp = fopen(path.c_str(), "r+b");
    ASSERT_NE(fp, nullptr);
    fseek(fp, static_cast<long>(it->loc->offset + kBlockSize + 100), SEEK_SET);
    fputc(0x5a ^ Payload(20, it->rec.bytes)[100], fp);
    fclose(fp);
  }
  Status st = f.tier->Read(it->rec, *it->loc, dst.data(), dst.size(), &stale);
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_FALSE(stale);
}

// A batch read with a tee: each payload also lands in the tee (any alignment) as its pieces
// come in, and teed says so only once the whole payload is checked. A row that is not the
// record's, or a damaged payload, leaves teed false and says why.
TEST(DurableTier, ABatchReadTeesEachPayloadAndSaysOnlyWhenItIsChecked) {
  Fixture f;
  f.Open();
  const uint64_t n = 3 * kMiB + 4 * kKiB;  // several 1 MiB pieces, and a short last one
  f.Spill("a", 30, n);
  f.Spill("b", 31, n);
  f.Spill("c", 32, n);
  std::vector<AlignedBuffer> blocks;
  std::vector<std::vector<uint8_t>> tees(3, std::vector<uint8_t>(n + 1));
  std::vector<DurableTier::ReadItem> items;
  EntryRecord wrong = f.owner.items["c"]->rec;
  wrong.seq += 1;  // a stale row for c
  for (int i = 0; i < 3; ++i) {
    FakeOwner::Item* it = f.owner.items[std::string(1, static_cast<char>('a' + i))].get();
    blocks.emplace_back(RoundUpBlock(n));
    items.push_back({i == 2 ? &wrong : &it->rec, *it->loc, blocks.back().data(),
                     blocks.back().size(), Status(), false, tees[i].data() + 1});  // unaligned
  }
  f.tier->ReadMany(items);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(items[i].status.ok()) << items[i].status.ToString();
    EXPECT_TRUE(items[i].teed);
    EXPECT_EQ(std::memcmp(tees[i].data() + 1, Payload(30 + i, n).data(), n), 0) << i;
  }
  EXPECT_TRUE(items[2].status.IsNotFound()) << items[2].status.ToString();
  EXPECT_TRUE(items[2].stale_row);
  EXPECT_FALSE(items[2].teed);

  // Damage b's payload on disk: its tee gets the bytes, but not the word that they are sound.
  FakeOwner::Item* b = f.owner.items["b"].get();
  {
    auto path = std::filesystem::directory_iterator(f.dir.sub("segments"))->path();
    FILE* fp = fopen(path.c_str(), "r+b");
    ASSERT_NE(fp, nullptr);
    fseek(fp, static_cast<long>(b->loc->offset + kBlockSize + 2 * kMiB), SEEK_SET);
    fputc(0x5a ^ Payload(31, n)[2 * kMiB], fp);
    fclose(fp);
  }
  std::vector<DurableTier::ReadItem> again = {
      {&f.owner.items["a"]->rec, *f.owner.items["a"]->loc, blocks[0].data(), blocks[0].size(),
       Status(), false, tees[0].data() + 1},
      {&b->rec, *b->loc, blocks[1].data(), blocks[1].size(), Status(), false, tees[1].data() + 1}};
  f.tier->ReadMany(again);
  EXPECT_TRUE(again[0].status.ok() && again[0].teed);
  EXPECT_TRUE(again[1].status.IsCorruption()) << again[1].status.ToString();
  EXPECT_FALSE(again[1].teed);
}

TEST(DurableTier, ReadOnlyRefusesWritesAndSaysWhy) {
  Fixture f;
  f.Open();
  f.Spill("a", 30, 64 * kKiB);
  ASSERT_TRUE(f.tier->Flush().ok());
  f.opt.read_only = true;
  f.opt.read_only_reason = "as asked";
  f.Open();
  f.ExpectReadable("a", 30);
  Status st = f.tier->WriteTombstones({{"ns", "a", 1, 0}});
  EXPECT_TRUE(st.IsNoSpace());
  EXPECT_NE(st.message().find("read-only (as asked)"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ecstore
