// ec-store's public API: an encoder-cache store with a pinned host pool over a disk tier.
//
//   auto store = ecstore::Store::Open("/var/cache/ec", options);
//   store.value()->Put("qwen2.5-vl", mm_hash, {DType::kBF16, {400, 3584}}, bytes);
//   auto meta = store.value()->Get("qwen2.5-vl", mm_hash, dst);      // copy out
//   auto lease = store.value()->Acquire("qwen2.5-vl", mm_hash);       // zero copy
//
// Thread rules: every Store method is thread-safe and may be called from any number of
// threads at once, except Close (call once, after other calls have returned). A ReadLease
// may be moved between threads; its bytes stay valid and unchanged until it is destroyed.
// Internally: one metadata mutex (never held across I/O or copies), one evictor thread, the
// disk tier's io_uring owner thread and the index's SQLite writer thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/memory_backend.h"
#include "base/status.h"
#include "base/tensor_meta.h"

namespace ecstore {

struct Options {
  uint64_t pool_bytes = 256ull << 20;
  uint64_t disk_quota_bytes = 16ull << 30;
  // Background eviction starts above high * pool and stops at low * pool.
  double high_watermark = 0.90;
  double low_watermark = 0.80;
  std::string eviction_policy = "lru";
  bool promote_on_get = true;  // copy disk hits back into the pool
  bool compress = false;       // per-entry LZ4 on the disk tier
  double min_compression_saving = 0.10;
  uint64_t segment_bytes = 256ull << 20;
  unsigned io_queue_depth = 32;
  uint64_t io_chunk_bytes = 1ull << 20;
  double compact_live_ratio = 0.5;  // sealed segments below this are compacted
  // How long Put waits for the evictor when the pool is full before returning Busy.
  std::chrono::milliseconds put_wait{5000};
  bool rebuild_index = false;   // ignore SQLite and rebuild it from the segments
  bool shareable_pool = false;  // back the pool by a memfd that same-host readers map
  // Open without writing anything: reads work; Put, Erase, Flush and Compact fail with
  // NoSpace. Chosen automatically when the store's filesystem has less than 1 MiB free.
  bool read_only = false;
  Env* env = nullptr;                        // nullptr = Env::Default()
  std::vector<MemoryRegistrar*> registrars;  // called once for the pool region
};

enum class Tier { kPool, kDisk };
const char* TierName(Tier t);  // "pool" / "disk"

struct EntryInfo {
  std::string ns;
  std::string key;
  Tier tier = Tier::kDisk;  // the fastest tier holding it
  bool on_disk = false;     // a durable copy exists
  uint64_t bytes = 0;
  TensorMeta meta;
  uint64_t created_us = 0;
  uint64_t last_access_us = 0;
  uint64_t hits = 0;
  uint64_t checksum = 0;
};

struct TierStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t spills = 0;
  uint64_t promotions = 0;
};

struct StoreStats {
  TierStats pool;
  TierStats disk;
  uint64_t pool_capacity = 0;
  uint64_t pool_allocated = 0;    // block bytes, including 4 KiB rounding
  double pool_fragmentation = 0;  // free bytes outside the largest free extent / capacity
  bool pool_huge_pages = false;
  bool pool_locked = false;
  uint64_t disk_quota = 0;
  uint64_t disk_file_bytes = 0;
  uint64_t segments = 0;
  uint64_t corrupt_dropped = 0;
  uint64_t spill_errors = 0;
  uint64_t compactions = 0;
  uint64_t misses = 0;
};

struct VerifyReport {
  uint64_t checked = 0;
  uint64_t bytes = 0;
  std::vector<std::string> corrupt;  // "ns/key: reason"; those entries were dropped
  // "ns/key: reason": entries that could not be read (an I/O error, not a checksum
  // mismatch). They are kept: check the device and verify again.
  std::vector<std::string> errors;
};

struct ReadOptions {
  // false: the read leaves no trace -- no hit or miss counted, no LRU touch, no promotion of
  // a disk entry into the pool (export and other bulk readers).
  bool record_access = true;
};

// A zero-copy read of pool memory. While it lives the entry is never evicted or overwritten.
class ReadLease {
 public:
  ReadLease() = default;
  ReadLease(ReadLease&& o) noexcept;
  ReadLease& operator=(ReadLease&& o) noexcept;
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;
  ~ReadLease();
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const TensorMeta& meta() const { return meta_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  friend class StoreImpl;
  class Releaser {
   public:
    virtual ~Releaser() = default;
    virtual void Release(void* token) = 0;
  };
  ReadLease(Releaser* r, void* token, const uint8_t* d, uint64_t n, TensorMeta m)
      : releaser_(r), token_(token), data_(d), size_(n), meta_(std::move(m)) {}
  void Reset();
  Releaser* releaser_ = nullptr;
  void* token_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  TensorMeta meta_;
};

// A pool block reserved for one Put and filled in place by the caller (a socket read, a
// device copy) before Store::Commit -- no staging buffer. Dropped uncommitted, the block
// goes back to the pool. Move-only; one thread fills it at a time.
class PutReservation {
 public:
  PutReservation() = default;
  PutReservation(PutReservation&& o) noexcept;
  PutReservation& operator=(PutReservation&& o) noexcept;
  PutReservation(const PutReservation&) = delete;
  PutReservation& operator=(const PutReservation&) = delete;
  ~PutReservation();
  std::span<uint8_t> bytes() const { return {data_, size_}; }

 private:
  friend class StoreImpl;
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void Abandon(void* token) = 0;
  };
  PutReservation(Owner* o, void* token, uint8_t* d, uint64_t n)
      : owner_(o), token_(token), data_(d), size_(n) {}
  void Reset();
  Owner* owner_ = nullptr;
  void* token_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

class Store {
 public:
  // Opens (creating if needed) the store in `dir`. Fails with a clear message if another
  // process has the directory open, or the directory cannot be written.
  static Result<std::unique_ptr<Store>> Open(const std::string& dir, const Options& options);
  virtual ~Store() = default;

  // Stores bytes under (ns, key), replacing an older entry. Returns once the bytes are in the
  // pool; they become durable when spilled, or at Flush/Close. Busy if the pool stays full
  // (every entry leased) for options.put_wait.
  virtual Status Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
                     std::span<const uint8_t> bytes) = 0;
  // Put in two steps: reserve pool space for `size` bytes (validating the key and meta as Put
  // does, and waiting for space as Put does), fill reservation.bytes(), then Commit.
  virtual Result<PutReservation> Reserve(std::string_view ns, std::string_view key,
                                         const TensorMeta& meta, uint64_t size) = 0;
  virtual Status Commit(PutReservation reservation) = 0;
  // Copies the entry into dst (at least its size) and returns its metadata.
  virtual Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst,
                                const ReadOptions& options) = 0;
  Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst) {
    return Get(ns, key, dst, ReadOptions{});
  }
  // Pins the entry in the pool (promoting it from disk if needed) for zero-copy reading.
  virtual Result<ReadLease> Acquire(std::string_view ns, std::string_view key) = 0;
  virtual Result<EntryInfo> Lookup(std::string_view ns, std::string_view key) = 0;
  virtual bool Contains(std::string_view ns, std::string_view key) = 0;
  virtual Status Erase(std::string_view ns, std::string_view key) = 0;
  // Erases every listed (namespace, key) that exists -- a missing one is skipped -- with all
  // their tombstones in one durable write (one fdatasync, not one per entry). erased[i] says
  // whether entry i was there.
  virtual Status EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                           std::vector<bool>* erased) = 0;
  virtual std::vector<EntryInfo> List() = 0;
  virtual StoreStats Stats() = 0;
  // Writes every pool-only entry to disk and commits the index: afterwards a crash loses
  // nothing that was Put before the call.
  virtual Status Flush() = 0;
  // Reads every entry and checks its checksum; corrupt entries are dropped and reported.
  // An entry whose read fails with an I/O error is reported in `errors` and kept.
  virtual Result<VerifyReport> Verify(
      const std::function<void(uint64_t done, uint64_t total)>& progress) = 0;
  // Rewrites live records of sealed segments whose live ratio is below the threshold
  // (threshold 1.0 compacts every sealed segment with any dead bytes).
  virtual Status Compact(double live_ratio_threshold) = 0;
  // Persists the pool (as Flush) and stops the background threads.
  virtual Status Close() = 0;
  // The pool's region: a lease's data() - base is its offset; shm_fd >= 0 when shareable.
  virtual MemoryRegion pool_region() const = 0;
};

}  // namespace ecstore
