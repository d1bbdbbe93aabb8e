// Keydir: the store's metadata -- every entry by (namespace, key): its record, which tiers
// hold its bytes, its leases and in-flight flags -- and the transitions that keep each tier's
// bookkeeping (MemoryTier, DurableTier) in step with it. It is the DurableTier's Owner and the
// ReadLease releaser. It moves no payload bytes: StoreImpl (requests) and Evictor (eviction,
// spill) do the I/O between its transitions. Its table (KeydirTable) keeps idle disk-only
// entries as compact rows; FindLocked hands out an Entry either way, so the transitions here
// see Entries only, and the disk-side callbacks (quota, compaction, recovery) handle rows
// where they stay rows.
// Thread rules: `mu` is the store's one metadata lock and guards every Entry's fields;
// *Locked methods need it held, the others take it. Only Keydir::Lock takes it: the store's
// requests and the evictors hold one where a transition takes several *Locked calls, and wait
// on the keydir's conditions through it. It is never held across I/O or a payload copy.
// Lock order: DurableTier's append lock -> mu -> DurableTier's accounting lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "cache/cache.h"
#include "store/durable_tier.h"
#include "store/entry.h"
#include "store/entry_hooks.h"
#include "store/keydir_table.h"
#include "store/memory_tier.h"
#include "store/quota_victims.h"

namespace ecstore {

class Keydir;

// The keydir's lock. Annotations name it anywhere (REQUIRES(kd->mu)); only Keydir takes it.
class CAPABILITY("mutex") KeydirMutex {
 private:
  friend class Keydir;
  friend class BasicUniqueLock<KeydirMutex>;
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  Mutex mu_;
};

class Keydir : public DurableTier::Owner, public ReadLease::Releaser {
 public:
  // `device` is null for a store without a device tier. `value_aware`: the disk quota ranks
  // its victims by value (the "gdsf" and "freq" policies), not by last access alone.
  Keydir(Env* env, MemoryTier* pool, MemoryTier* device, DurableTier* durable, bool value_aware)
      : env_(env), pool_(pool), device_(device), durable_(durable), victims_(value_aware) {}

  KeydirMutex mu;

  // Holds mu for its scope. unlock() ... lock() lets go of it in between; the waits below
  // take it.
  class SCOPED_CAPABILITY Lock : public BasicUniqueLock<KeydirMutex> {
   public:
    explicit Lock(Keydir* kd) ACQUIRE(kd->mu) : BasicUniqueLock(&kd->mu) {}
    ~Lock() RELEASE() {}
  };
  // For a function that holds mu through its caller's Lock: lets go of it around I/O or a
  // payload copy (Unlock), then takes it back (Relock).
  void Unlock() RELEASE(mu) { mu.unlock(); }
  void Relock() ACQUIRE(mu) { mu.lock(); }

  // Pool or device space may have been freed: waiting puts and the evictors look again.
  void NotifySpace() { space_cv_.NotifyAll(); }
  // Waits, mu let go meanwhile, until space may have been freed; false once `deadline` passed.
  bool WaitForSpace(Lock& l, std::chrono::steady_clock::time_point deadline) REQUIRES(mu) {
    return space_cv_.WaitUntil(l, deadline);
  }
  // Waits, mu let go meanwhile, until no promotion is reading `e` into the pool.
  void AwaitLoadLocked(Lock& l, const Entry& e) REQUIRES(mu) {
    while (e.loading) load_cv_.Wait(l);
  }
  // A spill ended (AwaitSpill's waiters look again).
  void NotifySpill() { spill_cv_.NotifyAll(); }

  MemoryTier& pool() const REQUIRES(mu) { return *pool_; }
  MemoryTier& device() const REQUIRES(mu) { return *device_; }  // only with a device tier
  MemoryTier* host_tier() const { return pool_; }
  MemoryTier* device_tier() const { return device_; }
  DurableTier& durable() const { return *durable_; }  // thread-safe itself
  // Runs under mu when a lease ends (the evictor may have been waiting for it).
  void OnLeaseEnd(std::function<void()> f) { lease_end_ = std::move(f); }

  // Loads the durable tier's entries (call once, before serving).
  Status Recover() REQUIRES(mu);
  bool closed() const REQUIRES(mu) { return closed_; }
  void CloseLocked() REQUIRES(mu) { closed_ = true; }
  // Asked, under mu, before a new entry is installed (Store::SetAdmission); null admits all.
  void SetAdmissionLocked(Admission admit) REQUIRES(mu) { admit_ = std::move(admit); }
  // Told every copy stored or gone from now on (Store::SetEvents); null tells no one.
  void SetEventsLocked(EntryEvents* events) REQUIRES(mu) { events_ = events; }
  uint64_t misses() const REQUIRES(mu) { return misses_; }
  // Existence checks (Lookup, LookupMany, Contains): found or not.
  void CountLookupLocked(bool found) REQUIRES(mu) { ++(found ? lookup_hits_ : lookup_misses_); }
  uint64_t lookup_hits() const REQUIRES(mu) { return lookup_hits_; }
  uint64_t lookup_misses() const REQUIRES(mu) { return lookup_misses_; }

  // ---- lookups
  // The key's entry (a compact row made an Entry again: see KeydirTable).
  Result<EntryPtr> FindLocked(std::string_view ns, std::string_view key, bool count_miss)
      REQUIRES(mu);
  // The key's metadata, leaving a row a row (Lookup: nothing is read or held).
  Result<EntryInfo> LookupLocked(std::string_view ns, std::string_view key) REQUIRES(mu);
  EntryInfo InfoLocked(const Entry& e) const REQUIRES(mu) { return EntryInfoOf(e); }
  bool ContainsLocked(std::string_view ns, std::string_view key) const REQUIRES(mu) {
    return table_.Peek(ns, key) != nullptr;
  }
  uint64_t cold_rows() const REQUIRES(mu) { return table_.rows(); }
  uint64_t size() const REQUIRES(mu) { return table_.size(); }
  // fn(const EntryPtr&) -> bool (false: stop) for each entry in use -- those that are not
  // compact rows: every entry with a pool or device copy, a lease or a flag is among them.
  template <typename Fn>
  void ForEachLocked(Fn&& fn) REQUIRES(mu) {
    for (const KeydirSlot& s : table_.slots())
      if (!s.cold() && !fn(s.entry_ptr())) break;
  }
  // Store::ListPages: pages of `page_size` entries' metadata from one snapshot taken at the
  // call (pointers only; each page's metadata copied under mu, let go between pages), until
  // on_page returns false.
  Status ListPages(size_t page_size, const std::function<bool(std::vector<EntryInfo>&&)>& on_page)
      EXCLUDES(mu);
  // Access statistics that changed since they were indexed go to the index (Close).
  void SaveTouchedLocked() REQUIRES(mu);

  // Every entry now, rows included (ListPages, Verify).
  std::vector<KeydirSlot> Snapshot() EXCLUDES(mu);

  // ---- transitions
  // What a put installs: a new entry whose bytes are complete in `block` of `tier` (kPool or
  // kDevice). checksummed false: hashed by the spill that gives it a disk copy.
  struct FreshEntry {
    std::string ns, key;
    TensorMeta meta;
    uint64_t bytes = 0, checksum = 0;
    bool checksummed = true;
    Tier tier = Tier::kPool;
    PoolBlock block;
  };
  // Makes it (created now, the durable tier's next seq) and inserts it (InsertLocked), the
  // replaced entry in *old. Unavailable once closed, or the admission's refusal where it
  // refuses the key: the block is freed either way.
  Result<EntryPtr> InstallLocked(FreshEntry f, EntryPtr* old, std::optional<Tombstone>* tomb)
      REQUIRES(mu);
  // A new entry (its bytes complete in its pool block) replaces the key's current one, which
  // is returned with the tombstone its disk copy needs.
  EntryPtr InsertLocked(const EntryPtr& e, std::optional<Tombstone>* tomb) REQUIRES(mu);
  // Takes the entry out of the keydir and detaches it (see DetachLocked).
  std::optional<Tombstone> RemoveLocked(Entry* e) REQUIRES(mu);
  void FreePoolLocked(Entry* e) REQUIRES(mu);
  void FreeDeviceLocked(Entry* e) REQUIRES(mu);
  void FreeCopiesLocked(Entry* e) REQUIRES(mu);  // pool and device blocks
  void DropDiskLocked(Entry* e) REQUIRES(mu);
  Tombstone ForgetDiskCopyLocked(Entry* e) REQUIRES(mu);
  std::optional<Tombstone> DetachLocked(Entry* e) REQUIRES(mu);
  // A lease on the host copy, or with kDevice on the device copy (which must exist).
  // served_from: the tier the acquire promoted the bytes from (none: the leased one).
  ReadLease LeaseLocked(const EntryPtr& e, bool count_hit = true,
                        MemoryKind kind = MemoryKind::kHost,
                        std::optional<Tier> served_from = std::nullopt) REQUIRES(mu);
  // A pin without a ReadLease (a copy in flight reads the entry's blocks): every copy stays.
  void PinLocked(Entry* e) REQUIRES(mu) {
    ++e->leases;
    ++leases_;
  }
  uint64_t leases() const REQUIRES(mu) { return leases_; }  // held now, pins included
  // ---- an entry's copies as the evictors move them (the payload copies are theirs)
  // Its bytes are being written to disk: its blocks stay until EndSpill or Spilled.
  void BeginSpillLocked(Entry* e) REQUIRES(mu) { e->spilling = true; }
  // Its spill ended without a disk copy (failed, too big, or erased meanwhile): an erased
  // entry nothing leases gives its blocks back now.
  void EndSpillLocked(Entry* e) REQUIRES(mu);
  // Its spill wrote a durable copy at `loc`, which the durable tier now accounts.
  void SpilledLocked(Entry* e, const DiskLocation& loc) REQUIRES(mu);
  // The checksum of its bytes, computed by the spill that wrote them (entries put from device
  // memory are hashed then).
  void SetChecksumLocked(Entry* e, uint64_t checksum) REQUIRES(mu) {
    e->checksum = checksum;
    e->checksummed = true;
  }
  // A promotion from disk is reading it into a pool block.
  void BeginLoadLocked(Entry* e) REQUIRES(mu) { e->loading = true; }
  // That promotion ended (load waiters told): with `blk`, its bytes are complete there and the
  // block is its pool copy.
  void EndLoadLocked(Entry* e, std::optional<PoolBlock> blk) REQUIRES(mu);
  // Its pool copy was moved to `to` (the old block is the caller's to free).
  void MovePoolCopyLocked(Entry* e, const PoolBlock& to) REQUIRES(mu) { e->pool = to; }
  // A copy made in the other memory tier (device -> host demotion, host -> device promotion),
  // complete in `blk` and ranked there.
  void AddCopyLocked(Entry* e, Tier tier, const PoolBlock& blk) REQUIRES(mu);
  void UnpinLocked(Entry* e) REQUIRES(mu);
  ReadLease QuietLeaseLocked(const EntryPtr& e) REQUIRES(mu);
  // Whether (ns, key) holds an entry now (not erased).
  bool Holds(std::string_view ns, std::string_view key) EXCLUDES(mu);
  // Whether (ns, key) already holds exactly these bytes: the same meta and checksum, and a
  // pool copy byte-equal to `data` (compared outside the mutex, under a quiet lease). If so the
  // entry stands in the pool's order as a new put of it would, and a Put keeps it instead of
  // replacing it: a replacement would cost a durable tombstone for the written-back copy (one
  // fdatasync) and a second write of the same bytes.
  // `compared`: the pool copy a PutReservation already found byte-equal to data as its parts
  // landed (its lease pinned that block, so the same address is the same entry); no second
  // comparison then.
  bool HoldsIdentical(std::string_view ns, std::string_view key, const TensorMeta& meta,
                      const uint8_t* data, uint64_t size, uint64_t checksum,
                      const uint8_t* compared = nullptr) EXCLUDES(mu);
  // A quiet lease on the pool copy of (ns, key) where it holds an entry of this size and
  // meta (what a put of the same bytes would find identical); nullopt otherwise.
  std::optional<ReadLease> QuietLeaseIfHolds(std::string_view ns, std::string_view key,
                                             const TensorMeta& meta, uint64_t size) EXCLUDES(mu);
  void TouchLocked(Entry* e) REQUIRES(mu);
  void AwaitSpill(const EntryPtr& e) EXCLUDES(mu);

  // ---- reads that lease what memory holds (DeviceFront, BatchReads): one lookup under mu
  // The key's entry, a miss not counted.
  Result<EntryPtr> Find(std::string_view ns, std::string_view key) EXCLUDES(mu);
  // A lease on the key's device copy, else on its host copy; nullopt when only the disk holds
  // it. InvalidArgument when `room` bytes cannot hold it. The hit (or miss) is counted.
  Result<std::optional<ReadLease>> LeaseInMemory(std::string_view ns, std::string_view key,
                                                 uint64_t room) EXCLUDES(mu);
  // A lease on the key's device copy; nullopt without one. `promoted`: the caller has just
  // copied it up from the pool, its hit counted then (the lease says it came from the pool).
  Result<std::optional<ReadLease>> LeaseDeviceCopy(std::string_view ns, std::string_view key,
                                                   bool promoted) EXCLUDES(mu);
  // Leases on the keys' pool copies (those that fit their buffer, given `dsts`); a key that
  // is absent, bad, or not in the pool gets none. Without `only`: pool hits, counted as Get
  // counts them. With it: only the keys it marks, just promoted (their hits were counted as
  // disk hits).
  std::vector<std::optional<ReadLease>> LeasePoolCopies(std::string_view ns,
                                                        const std::vector<std::string>& keys,
                                                        const std::vector<std::span<uint8_t>>* dsts,
                                                        const std::vector<bool>* only) EXCLUDES(mu);
  // Each key's size where its entry has no pool copy (what reading it into the pool takes);
  // 0 where it has one, is absent, or skip[i] is set.
  std::vector<uint64_t> UnpooledBytes(std::string_view ns, const std::vector<std::string>& keys,
                                      const std::vector<bool>& skip) EXCLUDES(mu);

  // ---- a whole-store pass (VerifyStore)
  // The entry in `slot` of a Snapshot; null if erased since. A row is made an Entry for the
  // pass, and a row again a few entries later.
  EntryPtr EntryForPass(const KeydirSlot& slot) EXCLUDES(mu);
  // What a check of an entry reads: a quiet lease on its pool copy (none without one), whether
  // its checksum is known, and its disk copy. nullopt: erased.
  struct Copies {
    std::optional<ReadLease> pool;
    bool checksummed = true;
    std::optional<DiskLocation> disk;
  };
  std::optional<Copies> CopiesOf(const EntryPtr& e) EXCLUDES(mu);

  // ---- disk copies that turned out wrong (durable I/O, never under mu)
  Status FixStaleRow(const EntryPtr& e, const DiskLocation& loc, const Status& why) EXCLUDES(mu);
  Status DropCorrupt(const EntryPtr& e, const Status& why) EXCLUDES(mu);
  void DropDiskCopy(const EntryPtr& e, const DiskLocation& loc) EXCLUDES(mu);

 private:
  void Release(void* token) override;
  Result<EntryPtr> FindRecordLocked(const EntryRecord& rec, const DiskLocation& at) REQUIRES(mu);

  // DurableTier::Owner. Recovery runs inside Recover, with mu held; the rest take mu.
  void Recovered(IndexRow&& row) override REQUIRES(mu);
  uint64_t RecoveredSeq(const std::string& ns, const std::string& key) override REQUIRES(mu);
  void RecoveredTombstone(const std::string& ns, const std::string& key,
                          uint64_t target_seq) override REQUIRES(mu);
  void RecoveryRestarts() override REQUIRES(mu);
  void RecoveryExpects(uint64_t entries) override REQUIRES(mu);
  bool YieldForQuota(uint64_t incoming, std::vector<Tombstone>* tombs) override EXCLUDES(mu);
  std::vector<IndexRow> RecordsIn(uint32_t segment) override EXCLUDES(mu);
  void Relocate(const EntryRecord& rec, const DiskLocation& from, const DiskLocation& to) override
      EXCLUDES(mu);
  void RecordCorrupt(const EntryRecord& rec, const DiskLocation& at, const Status& why) override
      EXCLUDES(mu);

  CondVar space_cv_;  // pool space may have been freed (waiting Puts, the evictor)
  CondVar load_cv_;   // a promotion ended
  CondVar spill_cv_;  // a spill ended
  Env* const env_;
  MemoryTier* const pool_;
  MemoryTier* const device_;
  DurableTier* const durable_;
  QuotaVictims victims_ GUARDED_BY(mu);  // the disk quota's choice
  std::function<void()> lease_end_;
  KeydirTable table_ GUARDED_BY(mu);
  void MaybeIdleLocked(Entry* e) REQUIRES(mu);  // queues a disk-only entry to become a row
  void YieldRowLocked(ColdRow* r, std::vector<Tombstone>* tombs) REQUIRES(mu);
  uint64_t misses_ GUARDED_BY(mu) = 0;
  uint64_t lookup_hits_ GUARDED_BY(mu) = 0;
  uint64_t lookup_misses_ GUARDED_BY(mu) = 0;
  uint64_t leases_ GUARDED_BY(mu) = 0;
  bool closed_ GUARDED_BY(mu) = false;
  Admission admit_ GUARDED_BY(mu);
  EntryEvents* events_ GUARDED_BY(mu) = nullptr;
  // Tell events_ of a copy of e stored in / gone from `medium` (nothing for an erased entry:
  // its removals were told when it was erased).
  void StoredLocked(const Entry& e, Tier medium) REQUIRES(mu) {
    if (events_ && !e.erased) events_->Stored(e.ns, e.key, medium, e.bytes);
  }
  void RemovedLocked(const Entry& e, Tier medium) REQUIRES(mu) {
    if (events_ && !e.erased) events_->Removed(e.ns, e.key, medium);
  }
};

}  // namespace ecstore
