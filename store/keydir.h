// Keydir: the store's metadata -- every entry by (namespace, key): its record, which tiers
// hold its bytes, its leases and in-flight flags -- and the transitions that keep each tier's
// bookkeeping (MemoryTier, DurableTier) in step with it. It is the DurableTier's Owner and the
// ReadLease releaser. It moves no payload bytes: StoreImpl (requests) and Evictor (eviction,
// spill) do the I/O between its transitions.
// Thread rules: `mu` is the store's one metadata lock and guards every Entry's fields;
// *Locked methods need it held, the others take it. It is never held across I/O or a payload
// copy. Lock order: DurableTier's append lock -> mu -> DurableTier's accounting lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/flat_set.h"
#include "base/mutex.h"
#include "store/cache.h"
#include "store/durable_tier.h"
#include "store/memory_tier.h"
#include "store/store.h"

namespace ecstore {

// One entry: its record and where its bytes are (device block, host pool block, disk
// record: any of them). Fields are guarded by Keydir::mu. A lease pins every copy.
struct Entry : EntryRecord {
  std::optional<PoolBlock> device;  // in the GPU pool
  // False for an entry put from device memory until it is first spilled: its xxh3 is
  // computed then, where the disk (not PCIe) sets the pace. Until then checksum is 0.
  bool checksummed = true;
  std::optional<PoolBlock> pool;  // set once the bytes in the block are complete
  std::optional<DiskLocation> disk;
  int leases = 0;
  bool spilling = false;
  bool loading = false;
  bool erased = false;
  bool touched = false;  // access info changed since it was last indexed
  uint64_t id() const { return reinterpret_cast<uintptr_t>(this); }

 private:
  friend class EntryPtr;
  std::atomic<uint32_t> refs_{0};  // EntryPtrs to it (the keydir's slot holds one)
};

// A counted reference to an Entry, the count inside the entry: 8 B, so the keydir's slot is a
// pointer and its hash, and an entry needs no separate control block (shared_ptr's cost 32 B
// an entry). Copies may be made and dropped on any thread.
class EntryPtr {
 public:
  EntryPtr() = default;
  explicit EntryPtr(Entry* e) : e_(e) {
    if (e_) e_->refs_.fetch_add(1, std::memory_order_relaxed);
  }
  EntryPtr(const EntryPtr& o) : EntryPtr(o.e_) {}
  EntryPtr(EntryPtr&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  EntryPtr& operator=(EntryPtr o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  ~EntryPtr() { reset(); }
  void reset() {
    Entry* e = std::exchange(e_, nullptr);
    if (e && e->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete e;
  }
  Entry* get() const { return e_; }
  Entry* operator->() const { return e_; }
  Entry& operator*() const { return *e_; }
  explicit operator bool() const { return e_ != nullptr; }
  bool operator==(const EntryPtr& o) const { return e_ == o.e_; }
  // References held now; 1 = only the holder asking (used under Keydir::mu, where no new
  // reference can be taken from the keydir).
  uint32_t use_count() const { return e_ ? e_->refs_.load(std::memory_order_acquire) : 0; }

 private:
  Entry* e_ = nullptr;
};
inline EntryPtr NewEntry() { return EntryPtr(new Entry()); }

// The keydir is a set of entries found by their own (ns, key): each key is stored once, in
// its entry, and a lookup builds no string. (A map keyed by a copy of "ns\0key" cost 112 B
// and an allocation per entry, and a string per lookup.)
struct EntryKey {
  std::string_view ns, key;
};
struct EntryKeyHash {
  using is_transparent = void;
  size_t operator()(const EntryKey& k) const;
  size_t operator()(const EntryPtr& e) const { return (*this)(EntryKey{e->ns, e->key}); }
};
struct EntryKeyEq {
  using is_transparent = void;
  static EntryKey Of(const EntryKey& k) { return k; }
  static EntryKey Of(const EntryPtr& e) { return {e->ns, e->key}; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    const EntryKey x = Of(a), y = Of(b);
    return x.key == y.key && x.ns == y.ns;
  }
};

class Keydir : public DurableTier::Owner, public ReadLease::Releaser {
 public:
  // `device` is null for a store without a device tier. `value_aware`: the disk quota ranks
  // its victims by value (the "gdsf" policy), not by last access alone.
  Keydir(Env* env, MemoryTier* pool, MemoryTier* device, DurableTier* durable, bool value_aware)
      : env_(env), pool_(pool), device_(device), durable_(durable), value_aware_(value_aware) {}

  Mutex mu;
  CondVar space_cv;  // pool space may have been freed (waiting Puts, the evictor)
  CondVar load_cv;   // a promotion ended
  CondVar spill_cv;  // a spill ended

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
  uint64_t misses() const REQUIRES(mu) { return misses_; }
  // Existence checks (Lookup, LookupMany, Contains): found or not.
  void CountLookupLocked(bool found) REQUIRES(mu) { ++(found ? lookup_hits_ : lookup_misses_); }
  uint64_t lookup_hits() const REQUIRES(mu) { return lookup_hits_; }
  uint64_t lookup_misses() const REQUIRES(mu) { return lookup_misses_; }

  // ---- lookups
  Result<EntryPtr> FindLocked(std::string_view ns, std::string_view key, bool count_miss)
      REQUIRES(mu);
  EntryInfo InfoLocked(const Entry& e) const REQUIRES(mu);
  bool ContainsLocked(std::string_view ns, std::string_view key) const REQUIRES(mu) {
    return map_.find(EntryKey{ns, key}) != map_.end();
  }
  template <typename Fn>
  void ForEachLocked(Fn&& fn) REQUIRES(mu) {
    for (const EntryPtr& e : map_)
      if (!fn(e)) break;
  }
  std::vector<EntryPtr> Snapshot() EXCLUDES(mu);

  // ---- transitions
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
  void UnpinLocked(Entry* e) REQUIRES(mu);
  ReadLease QuietLeaseLocked(const EntryPtr& e) REQUIRES(mu);
  void TouchLocked(Entry* e) REQUIRES(mu);
  void AwaitSpill(const EntryPtr& e) EXCLUDES(mu);
  // Up to `max` entries with a disk copy that nothing holds (no lease, load or spill), the
  // coldest first: the disk quota's victims. See keydir.cc for the ranking.
  std::vector<Entry*> ColdestOnDiskLocked(size_t max) REQUIRES(mu);

  // Reads every entry's copies and checks their checksums (Store::Verify).
  Result<VerifyReport> Verify(const std::function<void(uint64_t, uint64_t)>& progress) EXCLUDES(mu);

  // ---- disk copies that turned out wrong (durable I/O, never under mu)
  Status FixStaleRow(const EntryPtr& e, const DiskLocation& loc, const Status& why) EXCLUDES(mu);
  Status DropCorrupt(const EntryPtr& e, const Status& why) EXCLUDES(mu);
  void DropDiskCopy(const EntryPtr& e, const DiskLocation& loc) EXCLUDES(mu);

 private:
  void Release(void* token) override;
  Status VerifyEntry(const EntryPtr& e, VerifyReport* report) EXCLUDES(mu);
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

  Env* const env_;
  MemoryTier* const pool_;
  MemoryTier* const device_;
  DurableTier* const durable_;
  const bool value_aware_;
  uint64_t sample_state_ GUARDED_BY(mu) = 0x9e3779b97f4a7c15ull;  // ColdestOnDiskLocked's
  std::function<void()> lease_end_;
  FlatSet<EntryPtr, EntryKeyHash, EntryKeyEq> map_ GUARDED_BY(mu);
  // An entry's place in map_ (absent: end()).
  auto FindIn(std::string_view ns, std::string_view key) const REQUIRES(mu) {
    return map_.find(EntryKey{ns, key});
  }
  uint64_t misses_ GUARDED_BY(mu) = 0;
  uint64_t lookup_hits_ GUARDED_BY(mu) = 0;
  uint64_t lookup_misses_ GUARDED_BY(mu) = 0;
  uint64_t leases_ GUARDED_BY(mu) = 0;
  bool closed_ GUARDED_BY(mu) = false;
};

}  // namespace ecstore
