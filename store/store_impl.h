// StoreImpl: the store behind the Store facade -- the keydir, the host pool and its
// allocator, leases and the evictor. The durable side (segments, index, quota, tombstones,
// recovery, compaction) is the DurableTier it owns (store/durable_tier.h), which asks it
// about entries through DurableTier::Owner. Private to store/.
// Thread rules: as Store's. mu_ guards the keydir, the pool allocator, the pool's eviction
// policy, the accounting and every Entry's fields; it is never held across I/O or a payload
// copy. Lock order: DurableTier's append lock -> mu_ -> DurableTier's accounting lock.
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
#include "store/durable_tier.h"
#include "store/eviction_policy.h"
#include "store/memory_tier.h"
#include "store/pool_allocator.h"
#include "store/store.h"

namespace ecstore {

// One keydir entry: its record and where its bytes are (pool block, disk record, or both).
// Fields are guarded by StoreImpl::mu_.
struct Entry : EntryRecord, std::enable_shared_from_this<Entry> {
  std::string full_key;           // ns '\0' key: the keydir's key points into it
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

// The store's own counters (Stats adds the gauges and the durable tier's).
struct Counters {
  uint64_t spill_errors = 0;
  uint64_t misses = 0;
};

class StoreImpl : public Store,
                  private ReadLease::Releaser,
                  private PutReservation::Owner,
                  private DurableTier::Owner {
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
  MemoryRegion pool_region() const override { return pool_ ? pool_->region() : MemoryRegion{}; }
  Status AddRegistrar(MemoryRegistrar* r) override;
  void RemoveRegistrar(MemoryRegistrar* r) override;

 private:
  struct Pending;  // a reserved, not yet committed Put
  void Release(void* token) override;
  void Abandon(void* token) override;
  // The host pool's allocation, ranking and accounting, under mu_ (its region and
  // registration are not: pool_ itself is set in Init and kept until destruction).
  MemoryTier& pool() const REQUIRES(mu_) { return *pool_; }
  EntryInfo InfoLocked(const Entry& e) const REQUIRES(mu_);
  Status CheckKey(std::string_view ns, std::string_view key) const;
  Result<EntryPtr> FindLocked(std::string_view ns, std::string_view key, bool count_miss)
      REQUIRES(mu_);

  Status AllocateBlock(uint64_t bytes, bool wait, PoolBlock* out) EXCLUDES(mu_);
  void FreePoolLocked(Entry* e) REQUIRES(mu_);
  std::optional<Tombstone> DetachLocked(Entry* e) REQUIRES(mu_);
  void DropDiskLocked(Entry* e) REQUIRES(mu_);
  Tombstone ForgetDiskCopyLocked(Entry* e) REQUIRES(mu_);
  void AwaitSpill(const EntryPtr& e) EXCLUDES(mu_);
  Status FixStaleRow(const EntryPtr& e, const DiskLocation& loc, const Status& why);
  Status DropCorrupt(const EntryPtr& e, const Status& why) EXCLUDES(mu_);
  void DropDiskCopy(const EntryPtr& e, const DiskLocation& loc);
  Status Promote(const EntryPtr& e, bool wait) EXCLUDES(mu_);
  ReadLease LeaseLocked(const EntryPtr& e, bool count_hit = true) REQUIRES(mu_);
  ReadLease QuietLeaseLocked(const EntryPtr& e) REQUIRES(mu_);
  void TouchLocked(Entry* e) REQUIRES(mu_);
  Status CheckWritable() const;
  Status VerifyEntry(const EntryPtr& e, VerifyReport* report);

  bool NeedsEvictionLocked() const REQUIRES(mu_);
  bool EvictionDoneLocked() const REQUIRES(mu_);
  void EvictorLoop();
  bool EvictSomeLocked() REQUIRES(mu_);
  Status SpillBatch(const std::vector<EntryPtr>& batch, bool drop_from_pool) EXCLUDES(mu_);
  void DropUnspillableLocked(Entry* e, bool drop_from_pool) REQUIRES(mu_);
  void InstallSpilledLocked(Entry* e, const DiskLocation& loc, bool drop_from_pool) REQUIRES(mu_);
  void NoteSpillResultLocked(const Status& st, size_t entries) REQUIRES(mu_);
  Result<EntryPtr> FindRecordLocked(const EntryRecord& rec, const DiskLocation& at) REQUIRES(mu_);

  // DurableTier::Owner. Recovery runs in Init with mu_ held; the rest take mu_ themselves.
  void Recovered(IndexRow&& row) override REQUIRES(mu_);
  uint64_t RecoveredSeq(const std::string& ns, const std::string& key) override REQUIRES(mu_);
  void RecoveredTombstone(const std::string& ns, const std::string& key,
                          uint64_t target_seq) override REQUIRES(mu_);
  void RecoveryRestarts() override REQUIRES(mu_);
  void RecoveryExpects(uint64_t entries) override REQUIRES(mu_);
  bool YieldForQuota(uint64_t incoming, std::vector<Tombstone>* tombs) override EXCLUDES(mu_);
  std::vector<IndexRow> RecordsIn(uint32_t segment) override EXCLUDES(mu_);
  void Relocate(const EntryRecord& rec, const DiskLocation& from, const DiskLocation& to) override
      EXCLUDES(mu_);
  void RecordCorrupt(const EntryRecord& rec, const DiskLocation& at, const Status& why) override
      EXCLUDES(mu_);
  Status RecoverLocked() REQUIRES(mu_);

  std::string dir_;
  Options opt_;
  Env* env_ = nullptr;
  bool read_only_ = false;  // set once at Init
  UniqueFd lock_fd_;
  std::unique_ptr<MemoryTier> pool_;  // the pinned host pool
  std::unique_ptr<DurableTier> durable_;

  // mu_ guards everything below it; never held across I/O or a payload copy.
  Mutex mu_;
  CondVar evict_cv_;  // evictor: work may be needed
  CondVar space_cv_;  // Put waiters: space may have been freed
  CondVar load_cv_;   // readers waiting for a promotion
  CondVar spill_cv_;  // Erase/Put waiting for a replaced entry's spill
  // Keyed by a view of the entry's own full_key, so each key is stored once.
  std::unordered_map<std::string_view, EntryPtr> keydir_ GUARDED_BY(mu_);
  uint64_t need_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t spill_fail_gen_ GUARDED_BY(mu_) = 0;
  int consecutive_spill_failures_ GUARDED_BY(mu_) =
      0;  // a Put gives up on the pool after two in a row
  std::chrono::steady_clock::time_point spill_retry_at_ GUARDED_BY(mu_){};
  Status last_spill_error_ GUARDED_BY(mu_);
  Counters stats_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  bool closed_ GUARDED_BY(mu_) = false;
  std::vector<EntryPtr> recovered_ GUARDED_BY(mu_);  // during Init: to rank by last access

  std::thread evictor_;
};

}  // namespace ecstore
