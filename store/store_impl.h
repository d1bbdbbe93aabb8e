// StoreImpl: the store behind the Store facade -- the keydir, the host pool and its
// allocator, leases, the evictor, and (for now) the durable side: the disk tier, the SQLite
// index, quota, tombstones, recovery, verify and compaction. Private to store/.
// Thread rules: as Store's. mu_ guards the keydir, the pool allocator, both eviction policies,
// the accounting and every Entry's fields; it is never held across I/O or a payload copy.
// spill_mu_ serializes spills and compactions (they share the segment tail) and is taken
// before mu_, never while holding it. Leaf locks below: DiskTier's, Index's, IoService's.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "disk/disk_tier.h"
#include "index/index.h"
#include "store/eviction_policy.h"
#include "store/pool_allocator.h"
#include "store/store.h"

namespace ecstore {

// One keydir entry: its metadata and where its bytes are (pool block, disk record, or both).
// Fields are guarded by StoreImpl::mu_.
struct Entry : std::enable_shared_from_this<Entry> {
  uint64_t seq = 0;
  std::string ns, key;
  std::string full_key;  // ns '\0' key: the keydir's key points into it
  TensorMeta meta;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  uint64_t created_us = 0;
  uint64_t last_access_us = 0;
  uint64_t hits = 0;
  std::optional<PoolBlock> pool;  // set once the bytes in the block are complete
  std::optional<DiskLocation> disk;
  int leases = 0;
  bool spilling = false;
  bool loading = false;
  bool erased = false;
  bool touched = false;  // access info changed since it was last indexed
  uint64_t id() const { return reinterpret_cast<uintptr_t>(this); }
};
using EntryPtr = std::shared_ptr<Entry>;

// The keydir's key: ns '\0' key.
std::string FullKey(std::string_view ns, std::string_view key);

// A durable delete: every record of (ns, key) with seq <= target_seq is dead.
struct Tombstone {
  std::string ns, key;
  uint64_t target_seq;
};

// The store's own counters (Stats adds the gauges).
struct Counters {
  TierStats pool, disk;
  uint64_t corrupt_dropped = 0;
  uint64_t spill_errors = 0;
  uint64_t compactions = 0;
  uint64_t misses = 0;
};

class StoreImpl : public Store, private ReadLease::Releaser, private PutReservation::Owner {
 public:
  StoreImpl(std::string dir, Options o) : dir_(std::move(dir)), opt_(std::move(o)) {
    env_ = opt_.env ? opt_.env : Env::Default();
  }
  ~StoreImpl() override { Close(); }

  Status Init();
  Status Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
             std::span<const uint8_t> bytes) override;
  Result<PutReservation> Reserve(std::string_view ns, std::string_view key, const TensorMeta& meta,
                                 uint64_t size) override;
  Status Commit(PutReservation reservation) override;
  using Store::Get;
  Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst,
                        const ReadOptions& ro) override;
  Result<ReadLease> Acquire(std::string_view ns, std::string_view key) override;
  std::vector<Result<EntryInfo>> GetMany(std::string_view ns, const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts) override;
  Result<EntryInfo> Lookup(std::string_view ns, std::string_view key) override;
  Result<std::vector<std::optional<EntryInfo>>> LookupMany(
      std::string_view ns, const std::vector<std::string>& keys) override;
  Result<bool> Contains(std::string_view ns, std::string_view key) override;
  Status Erase(std::string_view ns, std::string_view key) override;
  Status EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                   std::vector<bool>* erased) override;
  Status ListPages(size_t page_size,
                   const std::function<bool(std::vector<EntryInfo>&&)>& on_page) override;
  Result<StoreStats> Stats() override;
  Status Flush() override;
  Result<VerifyReport> Verify(const std::function<void(uint64_t, uint64_t)>& progress) override;
  Status Compact(double threshold) override;
  Status Close() override;
  MemoryRegion pool_region() const override { return region_; }
  Status AddRegistrar(MemoryRegistrar* r) override;
  void RemoveRegistrar(MemoryRegistrar* r) override;

 private:
  struct Pending;  // a reserved, not yet committed Put
  void Release(void* token) override;
  void Abandon(void* token) override;
  uint8_t* PoolPtr(const PoolBlock& b) const { return region_.base + b.offset; }
  EntryInfo InfoLocked(const Entry& e) const REQUIRES(mu_);
  Status CheckKey(std::string_view ns, std::string_view key) const;
  Result<EntryPtr> FindLocked(std::string_view ns, std::string_view key, bool count_miss)
      REQUIRES(mu_);

  Status AllocateBlock(uint64_t bytes, bool wait, PoolBlock* out) EXCLUDES(mu_);
  void FreePoolLocked(Entry* e) REQUIRES(mu_);
  std::optional<Tombstone> DetachLocked(Entry* e) REQUIRES(mu_);
  void DropDiskLocked(Entry* e) REQUIRES(mu_);
  Tombstone ForgetDiskCopyLocked(Entry* e) REQUIRES(mu_);
  Status WriteTombstones(std::vector<Tombstone> tombs) EXCLUDES(mu_);
  void AwaitSpill(const EntryPtr& e) EXCLUDES(mu_);
  Status ReadFromDisk(const Entry& e, const DiskLocation& loc, uint8_t* dst, uint64_t dst_cap,
                      bool* stale_row);
  Status FixStaleRow(const EntryPtr& e, const DiskLocation& loc, const Status& why);
  Status DropCorrupt(const EntryPtr& e, const Status& why) EXCLUDES(mu_);
  void DropDiskCopy(const EntryPtr& e, const DiskLocation& loc);
  Status Promote(const EntryPtr& e, bool wait) EXCLUDES(mu_);
  ReadLease LeaseLocked(const EntryPtr& e, bool count_hit = true) REQUIRES(mu_);
  ReadLease QuietLeaseLocked(const EntryPtr& e) REQUIRES(mu_);
  void TouchLocked(Entry* e) REQUIRES(mu_);

  bool NeedsEvictionLocked() const REQUIRES(mu_);
  bool EvictionDoneLocked() const REQUIRES(mu_);
  void EvictorLoop();
  bool EvictSomeLocked() REQUIRES(mu_);
  Status SpillBatch(const std::vector<EntryPtr>& batch, bool drop_from_pool) EXCLUDES(mu_);
  struct SpillPlan {
    std::vector<DiskTier::WriteItem> items;  // one per entry of `written`
    std::vector<AlignedBuffer> compressed;   // payloads the items point into
    std::vector<EntryPtr> written, too_big;
    uint64_t bytes = 0;  // record bytes of the items
  };
  SpillPlan PlanSpill(const std::vector<EntryPtr>& batch);
  Status AppendWithQuota(SpillPlan& plan, std::vector<DiskLocation>* locs);
  void DropUnspillableLocked(Entry* e, bool drop_from_pool) REQUIRES(mu_);
  void InstallSpilledLocked(Entry* e, const DiskLocation& loc, bool drop_from_pool) REQUIRES(mu_);
  void NoteSpillResultLocked(const Status& st, size_t entries) REQUIRES(mu_);
  std::vector<Tombstone> EnforceQuota(uint64_t incoming);
  DiskTier::WriteItem TombstoneItem(const Tombstone& t);
  void MaybeCompact() EXCLUDES(mu_);
  void ReclaimFileSpace(uint64_t incoming);
  Status CheckWritable() const;
  Status CompactSegment(uint32_t seg, bool oldest);
  IndexRow RowLocked(const Entry& e) const REQUIRES(mu_);
  static RecordInfo RecordOf(const Entry& e, const DiskLocation& loc);

  // What recovery carries from the index load through the segment scans.
  struct Recovery {
    uint64_t max_seq = 0;
    std::vector<EntryPtr> loaded;  // to enter the LRU in last-access order
    std::unordered_map<std::string, uint64_t> tomb_targets;
  };
  Status Recover(bool rebuild);
  void InstallLocked(IndexRow&& row, Recovery* rs) REQUIRES(mu_);
  Status LoadIndexLocked(const std::vector<uint32_t>& segs, Recovery* rs) REQUIRES(mu_);
  Status ScanTailLocked(uint32_t seg, uint64_t from, bool rebuild, Recovery* rs, bool* tail_clean)
      REQUIRES(mu_);
  Status OpenIndex(const std::string& path, bool* damaged);
  Status SetIndexAside(const std::string& path, const Status& why);
  void ResetKeydirLocked() REQUIRES(mu_);  // before Recover runs again; nothing is served yet

  std::string dir_;
  Options opt_;
  Env* env_ = nullptr;
  bool read_only_ = false;  // set once at Init
  UniqueFd lock_fd_;
  std::unique_ptr<MemoryBackend> backend_;
  MemoryRegion region_;
  std::mutex registrars_mu_;  // leaf; guards registered_ (Add/Remove/Close)
  std::vector<MemoryRegistrar*> registered_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<Index> index_;

  Mutex spill_mu_;  // one spill/compaction at a time (they share the segment tail)

  // mu_ guards everything below it; never held across I/O or a payload copy.
  Mutex mu_ ACQUIRED_AFTER(spill_mu_);
  CondVar evict_cv_;  // evictor: work may be needed
  CondVar space_cv_;  // Put waiters: space may have been freed
  CondVar load_cv_;   // readers waiting for a promotion
  CondVar spill_cv_;  // Erase/Put waiting for a replaced entry's spill
  std::unique_ptr<PoolAllocator> alloc_ GUARDED_BY(mu_);
  // Keyed by a view of the entry's own full_key, so each key is stored once.
  std::unordered_map<std::string_view, EntryPtr> keydir_ GUARDED_BY(mu_);
  std::unique_ptr<EvictionPolicy> pool_policy_ GUARDED_BY(mu_);
  std::unique_ptr<EvictionPolicy> disk_policy_ GUARDED_BY(mu_);  // entries with a disk copy
  std::map<uint32_t, uint64_t> segment_live_ GUARDED_BY(mu_);    // record bytes still referenced
  uint64_t pool_entries_ GUARDED_BY(mu_) = 0;
  uint64_t pool_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t disk_entries_ GUARDED_BY(mu_) = 0;
  uint64_t disk_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t disk_record_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t need_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t spill_fail_gen_ GUARDED_BY(mu_) = 0;
  int consecutive_spill_failures_ GUARDED_BY(mu_) =
      0;  // a Put gives up on the pool after two in a row
  std::chrono::steady_clock::time_point spill_retry_at_ GUARDED_BY(mu_){};
  Status last_spill_error_ GUARDED_BY(mu_);
  Counters stats_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  bool closed_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> next_seq_{1};

  std::thread evictor_;
};

}  // namespace ecstore
