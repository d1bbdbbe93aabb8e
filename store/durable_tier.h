// DurableTier: the store's durable side -- the segment files (DiskTier) and the SQLite index,
// the disk quota's accounting (its owner picks what goes), tombstones, recovery (the scan
// itself is RecoveryScan, store/recovery_scan.h),
// the spill append and compaction. It knows records and where they are; the keydir, the
// pools and the leases stay with its Owner (StoreImpl), which it asks whenever a decision
// needs an entry's live state (is it leased? is its record still at this location?).
//
//   DurableTier::Open(dir, env, options) -> Recover(rebuild, owner) under the owner's lock
//   spill:    Spill(items, install)        -- quota, one append (one fdatasync), install
//   erase:    WriteTombstones(tombs)       -- durable before the erase returns
//   read:     Read(record, loc, dst, ...)  -- header checked against the record, checksum
//   maintain: MaybeCompact(), Compact(threshold)
//
// Thread rules: thread-safe. Its locks, always taken in this order:
//   append_mu_ (one spill or compaction at a time: they share the segment tail)
//   -> the owner's lock (Owner callbacks run with append_mu_ held and never with mu_)
//   -> the disk accounting's lock (DiskAccounting, taken inside the owner's lock by
//      Track/Untrack...) and mu_ (tombstones a full disk held back): leaves.
// Leaf locks below those: DiskTier's, Index's, IoService's.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/entry_record.h"
#include "base/env.h"
#include "base/log_limiter.h"
#include "base/mutex.h"
#include "cache/cache.h"
#include "disk/aligned_buffer.h"
#include "disk/disk_tier.h"
#include "index/index.h"
#include "store/compaction_picker.h"
#include "store/disk_accounting.h"

namespace ecstore {

// A durable delete: every record of (ns, key) with seq <= target_seq is dead. hides_segment
// is the segment holding the record it kills (the entry's disk copy): the tombstone is
// needed only while that segment exists.
struct Tombstone {
  std::string ns, key;
  uint64_t target_seq;
  uint32_t hides_segment;
};

struct DurableOptions {
  uint64_t quota_bytes = 64ull << 30;
  uint64_t segment_bytes = 256ull << 20;
  unsigned queue_depth = 32;
  uint64_t io_chunk_bytes = 1ull << 20;
  unsigned io_read_window = 12;
  bool compress = false;
  double min_compression_saving = 0.10;
  double compact_live_ratio = 0.5;
  bool read_only = false;
  std::string read_only_reason;  // "as asked", "its disk was full"
  bool rebuild_index = false;    // asked for: the index is rebuilt from the segments
  unsigned file_mode = 0600;     // of the files it creates (segments, the index)
};

class DurableTier {
 public:
  // What the tier asks of the keydir's owner. The recovery calls come from Recover, which
  // the owner calls holding its own lock; the others come with append_mu_ held, and the
  // owner takes its lock inside them.
  class Owner {
   public:
    virtual ~Owner() = default;
    // Recovery: a live record found in the index or a segment; it replaces an older entry
    // of the key. RecoveredSeq is the seq of the key's entry so far (0: none). A tombstone
    // removes the key's entry if its seq <= target_seq.
    virtual void Recovered(IndexRow&& row) = 0;
    virtual uint64_t RecoveredSeq(const std::string& ns, const std::string& key) = 0;
    virtual void RecoveredTombstone(const std::string& ns, const std::string& key,
                                    uint64_t target_seq) = 0;
    // The index turned out damaged part way: forget everything Recovered so far (the
    // recovery starts again from the segments alone).
    virtual void RecoveryRestarts() = 0;
    virtual void RecoveryExpects(uint64_t entries) = 0;  // a hint, before the index loads
    // Quota: the owner gives up disk copies, coldest first by its own ranking (then
    // Untrack), until OverQuota(incoming) is false, and appends their tombstones to *tombs.
    // False when none could go (all leased or in flight).
    virtual bool YieldForQuota(uint64_t incoming, std::vector<Tombstone>* tombs) = 0;
    // Compaction: the live records in `segment`; a record moved (the owner ignores it when
    // the entry changed meanwhile); a record that failed its checksum.
    virtual std::vector<IndexRow> RecordsIn(uint32_t segment) = 0;
    virtual void Relocate(const EntryRecord& rec, const DiskLocation& from,
                          const DiskLocation& to) = 0;
    virtual void RecordCorrupt(const EntryRecord& rec, const DiskLocation& at,
                               const Status& why) = 0;
  };

  static Result<std::unique_ptr<DurableTier>> Open(const std::string& dir, Env* env,
                                                   const DurableOptions& options);
  ~DurableTier();

  // Loads the index and indexes what the segments hold past it (applying tombstones,
  // cutting a torn tail), handing every live entry to the owner. A damaged index is set
  // aside and rebuilt from the segments. Call once, before serving, with the owner's lock.
  Status Recover(Owner* owner);

  // A new version number (Puts and tombstones share the sequence).
  uint64_t NextSeq() { return next_seq_++; }
  Status CheckWritable() const;
  // Unavailable when the store's directory is gone or was replaced since Open (its segments
  // folder is no longer the one this tier writes to): nothing more can be made durable.
  Status CheckDirectory() const;

  // ---- accounting: called under the owner's lock, as its entries gain or lose disk copies
  // An entry's record is at `loc`: its bytes count against the quota and its segment.
  // bytes: the entry's raw payload
  void Track(uint64_t bytes, const DiskLocation& loc) { acct_.Track(bytes, loc); }
  void Untrack(uint64_t bytes, const DiskLocation& loc) { acct_.Untrack(bytes, loc); }
  void Track(uint32_t segment, const DiskAccounting::Tally& records) {
    acct_.Track(segment, records);
  }
  // Track, and the index learns the row; `spilled` counts it as a spill.
  void Adopt(const EntryRecord& rec, const DiskLocation& loc, bool spilled);
  // Compaction moved the entry's record (Owner::Relocate calls it); the index learns it.
  void Moved(const EntryRecord& rec, const DiskLocation& from, const DiskLocation& to);
  void NoteHit() { acct_.Hit(); }           // a read served from disk
  void NoteCorrupt() { acct_.Corrupt(1); }  // a corrupt record dropped
  void SaveAccess(const EntryRecord& rec);  // access statistics to the index
  void Forget(const EntryRecord& rec);      // the index forgets the row (no tombstone)
  bool OverQuota(uint64_t incoming) const { return acct_.OverQuota(incoming); }

  // ---- I/O: never under the owner's lock
  struct SpillItem {
    uint64_t id;
    EntryRecord rec;
    const uint8_t* payload;  // 4 KiB aligned, readable up to RoundUpBlock(rec.bytes)
  };
  // Per item: where it was written (nullopt when the append failed: the Status passed to
  // install says why), or too_big: larger than the quota, it can never be durable.
  struct SpillOutcome {
    std::optional<DiskLocation> loc;
    bool too_big = false;
  };
  using InstallFn = std::function<void(const Status&, const std::vector<SpillOutcome>&)>;
  // Makes room under the quota, then appends the records with the tombstones of what the
  // quota evicted in one append (one fdatasync). `install` runs before the append lock is
  // let go, so no compaction moves a record the owner has not installed yet.
  Status Spill(const std::vector<SpillItem>& items, const InstallFn& install);
  // Appends the tombstones (one append) and drops their rows from the index. Tombstones that
  // could not be written (a full disk) are kept and go with the next append that succeeds
  // (a spill, an erase, Flush): until then a crash may bring their entries back.
  Status WriteTombstones(std::vector<Tombstone> tombs) EXCLUDES(append_mu_);
  // Reads the record's header with its payload and checks that the header is the entry's
  // own before a payload byte is used. A mismatch sets *stale_row and returns NotFound; a
  // checksum failure is Corruption.
  Status Read(const EntryRecord& rec, const DiskLocation& loc, uint8_t* dst, uint64_t dst_cap,
              bool* stale_row);
  // Several entries' records in one batch, all reads in flight together (a get of many disk
  // entries, a prefetch). Per item as Read; an item that cannot go straight into its
  // destination (compressed, unaligned), or a batch that fails, is read on its own.
  struct ReadItem {
    const EntryRecord* rec;
    DiskLocation loc;
    uint8_t* dst;
    uint64_t dst_cap;
    Status status;
    bool stale_row = false;
    // GetMany's destination: the payload is copied there too as it lands (DiskTier's tee);
    // teed says it holds the checked payload (false: read on its own, or failed).
    uint8_t* tee = nullptr;
    bool teed = false;
    // A watched read: told how much of dst has landed as the pieces do (DiskTier's
    // `landed`, capped at the entry's bytes); `streamed` says dst's checked payload is the
    // bytes it was told of (false: read again on its own, or failed).
    std::function<void(uint64_t landed)> landed = nullptr;
    bool streamed = false;
  };
  // `meanwhile` (if any) runs on this thread while the batch is in flight -- unless no read
  // went into the batch: the caller runs it afterwards then.
  void ReadMany(std::vector<ReadItem>& items, const IoMeanwhile& meanwhile = nullptr);
  // The record of (ns, key, seq) in `segment`, found by its self-checked header.
  std::optional<std::pair<RecordInfo, DiskLocation>> FindRecord(const EntryRecord& rec,
                                                                uint32_t segment);
  // Every segment's headers: damaged ones to *corrupt, I/O errors to *errors.
  void VerifyHeaders(std::vector<std::string>* corrupt, std::vector<std::string>* errors);

  void MaybeCompact();
  Status Compact(double threshold);
  // Writes the tombstones still owed (see WriteTombstones), then the index.
  Status Flush();
  // Waits for the index to commit what is enqueued; where it cannot (a full disk) it keeps
  // and retries the changes, and the segments hold them: logged, not an error.
  void FlushIndex();

  void FillStats(TierStats* disk, uint64_t* segments, uint64_t* compactions,
                 uint64_t* corrupt) const;

 private:
  static Status CheckPayload(const EntryRecord& e, const DiskLocation& loc, const uint8_t* dst,
                             const PayloadHasher* hash);
  DurableTier(std::string dir, Env* env, DurableOptions o)
      : dir_(std::move(dir)), env_(env), opt_(std::move(o)), acct_(opt_.quota_bytes) {}
  Status RecoverOnce(bool rebuild, Owner* owner);
  void KeepPrivate() const;  // the index's files and segments/ get the store's modes

  struct Plan;
  Plan PlanSpill(const std::vector<SpillItem>& items);
  std::vector<Tombstone> EnforceQuota(uint64_t incoming) REQUIRES(append_mu_);
  DiskTier::WriteItem TombstoneItem(const Tombstone& t);
  std::vector<Tombstone> TakeUnwritten() EXCLUDES(mu_);
  void KeepUnwritten(std::vector<Tombstone> tombs) EXCLUDES(mu_);
  Status ReclaimFileSpace(uint64_t incoming) REQUIRES(append_mu_);
  Status CompactSegment(uint32_t seg, bool oldest) REQUIRES(append_mu_);
  // Each segment's size and live bytes, for the choice (store/compaction_picker.h).
  std::vector<SegmentUse> Uses(const std::vector<uint32_t>& segs);
  Status MoveRecords(std::vector<IndexRow>& live, std::vector<RecordInfo>& tombs)
      REQUIRES(append_mu_);

  const std::string dir_;
  Env* const env_;
  const DurableOptions opt_;
  std::string index_path_;
  bool index_existed_ = false;
  bool index_damaged_ = false;
  LogLimiter compaction_warnings_, tombstone_warnings_, index_lag_warnings_;
  dev_t segments_dev_ = 0;  // the segments folder at Open (CheckDirectory)
  ino_t segments_ino_ = 0;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<Index> index_;
  Owner* owner_ = nullptr;
  std::atomic<uint64_t> next_seq_{1};

  Mutex append_mu_;  // one spill or compaction at a time (they share the segment tail)

  DiskAccounting acct_;  // what the segments hold, against the quota: a leaf lock

  Mutex mu_;  // unwritten_: a leaf
  // Tombstones a full disk kept from being written (their index rows are already gone):
  // the next append that succeeds carries them.
  std::vector<Tombstone> unwritten_ GUARDED_BY(mu_);
};

}  // namespace ecstore
