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
#include "cache/cache.h"
#include "store/entry_hooks.h"

namespace ecstore {

struct Options {
  uint64_t pool_bytes = 256ull << 20;
  uint64_t disk_quota_bytes = 16ull << 30;
  // Background eviction starts above high * pool and stops at low * pool; Puts and reads
  // that find no room evict clean entries (already on disk) at once, so the pool runs nearly
  // full. High marks keep more of the working set in memory: in `bench mixed --watermarks`
  // 0.98/0.95 read the least back from disk and ran fastest, 0.9/0.8 the slowest.
  double high_watermark = 0.98;
  double low_watermark = 0.95;
  // "freq" (recent requests per key, misses included, x what a miss costs / size), "lru" or
  // "gdsf" (hits x what a miss costs / size), for the memory pools, where a miss is a read
  // back from disk (RefetchCost, so they rank by requests); the disk quota ranks by recompute
  // cost x hits / size / age, or with lru by last access (store/eviction_policy.h,
  // store/quota_victims.h). freq is the default: in the bench it saved 16 % more
  // encoder time than LRU at 10 % of the working set (policy; 24 % without drift) and read
  // 17-18 % less back from disk (mixed, 2.37-2.40 vs LRU's 2.89 MB/op; 2.78-2.81 when the
  // pools weighed recompute cost too).
  std::string eviction_policy = "freq";
  bool promote_on_get = true;  // copy disk hits back into the pool
  // Spill new pool entries to disk in the background as they come, keeping them in the pool
  // (write-back), so that eviction never waits on a write and can pick any span of the pool.
  // Off: an entry is written when it is evicted, or by Flush.
  bool write_back = true;
  bool compress = false;  // per-entry LZ4 on the disk tier
  double min_compression_saving = 0.10;
  uint64_t segment_bytes = 256ull << 20;
  unsigned io_queue_depth = 32;
  uint64_t io_chunk_bytes = 1ull << 20;
  // A get's disk read keeps at most this many pieces in flight (0: io_queue_depth), so its
  // pieces land in waves that the checksum and the copy-out follow instead of all at the end
  // (disk/io_queue.h, IoService::Start, has the measurements).
  unsigned io_read_window = 12;
  double compact_live_ratio = 0.5;  // sealed segments below this are compacted
  // How long Put waits for the evictor when the pool is full before returning Busy.
  std::chrono::milliseconds put_wait{5000};
  bool rebuild_index = false;  // ignore SQLite and rebuild it from the segments
  // Makes the pool's memory (called once, at Open). nullptr = NewHostPinnedBackend();
  // NewSharedHostBackend backs it by a sealed memfd that same-host readers map (serving over
  // shared memory needs that); a device backend plugs in here.
  std::function<std::unique_ptr<MemoryBackend>()> memory_backend;
  // Open without writing anything: reads work; Put, Erase, Flush and Compact fail with
  // NoSpace. Chosen automatically when the store's filesystem has less than 1 MiB free.
  bool read_only = false;
  // A new store directory is made 0700 and its files 0600 (entries are other users'
  // images); group_access makes them 0750/0640, for a group of operators or readers.
  bool group_access = false;
  // The device tier: a pool of GPU memory above the host pool, allocated once at Open on GPU
  // `device` (0 bytes: none). Needs a CUDA build and that GPU; the host pool is then
  // registered with CUDA too. Entries put from device memory land there.
  int device = 0;
  uint64_t device_pool_bytes = 0;
  // The device pool's watermarks (the host pool's are above). They keep more headroom: an
  // entry put from device memory has no host copy, so it leaves the device pool only by a
  // device->host copy, and a burst of device puts waits for those copies once the headroom
  // is gone (the host pool's entries have disk copies and leave at once).
  double device_high_watermark = 0.90;
  double device_low_watermark = 0.80;
  Env* env = nullptr;  // nullptr = Env::Default()
};

class PayloadHasher;  // disk/record.h

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
  // The caller has filled bytes()[0, n) and will not change them: the store checksums the
  // new part now, while it is still in cache (a socket read calls it after each piece lands,
  // so the checksum overlaps the transfer), and Commit hashes only what is left. Bytes are
  // hashed from the block itself, never taken on trust; n at or below what was hashed
  // before is ignored.
  void Filled(uint64_t n);
  // Commit installs the entry without hashing it: it is checksummed when first spilled (in
  // the background, by write-back), as an entry put from device memory is, so it is readable
  // as soon as its bytes are in (a device->host copy lands at PCIe speed, and hashing 58 MB
  // on the CPU takes several times that). Until then its checksum is 0 and `verify` has
  // nothing to hold its pool copy to. Where the key already holds an entry, Commit hashes
  // anyway, to keep that entry if the bytes are the same.
  void ChecksumWhenSpilled() { checksum_when_spilled_ = true; }

 private:
  friend class StoreImpl;
  uint64_t Checksum();  // of all size_ bytes: what Filled hashed, then the rest
  // The pool copy of the entry the key held at Reserve with this size and meta, while every
  // byte filled so far matches it; nullptr otherwise (or until all bytes are compared).
  const uint8_t* KnownSame() const { return same_ && hashed_ == size_ ? same_->data() : nullptr; }
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void Abandon(void* token) = 0;
  };
  PutReservation(Owner* o, void* token, uint8_t* d, uint64_t n);
  void Reset();
  Owner* owner_ = nullptr;
  void* token_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::unique_ptr<PayloadHasher> hasher_;  // bytes [0, hashed_) hashed by Filled
  uint64_t hashed_ = 0;
  bool checksum_when_spilled_ = false;
  // Where the key already holds an entry of this size and meta in the pool, a quiet lease on
  // it: Filled compares each new part with it while the part is still in cache, so a put of
  // the bytes the store holds is known to be one when its last piece lands, instead of after
  // another pass over both. Dropped at the first part that differs.
  std::optional<ReadLease> same_;
};

// Store is a Cache with every facet but claims (no one else's claims are seen here): device
// I/O where it has a device tier, memory (its pool as host_pool()), reservations, admin.
class Store : public Cache,
              public DeviceIo,
              public MemoryRegistration,
              public Reservations,
              public Admin {
 public:
  // Opens (creating if needed) the store in `dir`. Fails with a clear message if another
  // process has the directory open, or the directory cannot be written.
  static Result<std::unique_ptr<Store>> Open(const std::string& dir, const Options& options);
  ~Store() override = default;
  const char* transport() const override { return "local"; }

  // Stores bytes under (ns, key), replacing an older entry. Returns once the bytes are in the
  // pool; they become durable when spilled, or at Flush/Close. Busy if the pool stays full
  // (every entry leased) for options.put_wait. A put of the bytes and meta the key already
  // holds in the pool keeps that entry (compared byte by byte): nothing is written again.
  Status Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
             std::span<const uint8_t> bytes) override = 0;
  // Put in two steps: reserve pool space for `size` bytes (validating the key and meta as Put
  // does, and waiting for space as Put does), fill reservation.bytes(), then Commit.
  virtual Result<PutReservation> Reserve(std::string_view ns, std::string_view key,
                                         const TensorMeta& meta, uint64_t size) = 0;
  virtual Status Commit(PutReservation reservation) = 0;
  // Reserve and Commit as a PutSlot (Reservations::ReserveSlot); `landing` is ignored (a
  // block of the pool is filled, then committed).
  Result<std::unique_ptr<PutSlot>> ReserveSlot(std::string_view ns, std::string_view key,
                                               const TensorMeta& meta, uint64_t bytes,
                                               bool landing) override;
  // Copies the entry into dst (at least its size) and returns its metadata.
  virtual Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst,
                                const ReadOptions& options) = 0;
  Result<EntryInfo> Get(std::string_view ns, std::string_view key,
                        std::span<uint8_t> dst) override {
    return Get(ns, key, dst, ReadOptions{});
  }
  // Lookup counts a lookup hit or miss in the stats unless options.record_access is false
  // (a server's own bookkeeping lookups are not its clients').
  virtual Result<EntryInfo> Lookup(std::string_view ns, std::string_view key,
                                   const ReadOptions& options) = 0;
  Result<EntryInfo> Lookup(std::string_view ns, std::string_view key) override {
    return Lookup(ns, key, ReadOptions{});
  }
  // Acquire pins the entry in the pool (promoting it from disk if needed); Pin does the same.
  Result<ReadLease> Pin(std::string_view ns, std::string_view key) override;
  // Brings the listed entries that are only on disk into the pool ahead of use, their reads
  // all in flight together (a hint: absent keys are skipped). A prefetch evicts nothing: it
  // takes the pool's free room (the evictor keeps 2-5 % of it free), and answers Busy for
  // entries that do not fit there now. GetMany does this first for its keys, evicting clean
  // entries where it must.
  // True when every listed disk entry is now in the pool; false where some did not fit.
  Result<bool> Prefetch(std::string_view ns, const std::vector<std::string>& keys) override = 0;
  // AcquireMany with a watch (Cache::LandingWatch): a server streams what it tells to a
  // same-host client, who copies each piece out while the rest are read (server/server.h).
  // (A store that cannot watch its reads answers as AcquireMany, streamed all false.)
  using Cache::AcquireMany;
  // EraseMany writes all the tombstones in one durable write (one fdatasync, not one per
  // entry). ListPages pages through one snapshot taken at the call.
  // Writes every entry without a disk copy to disk (device entries through the host pool)
  // and commits the index: afterwards a crash loses nothing that was Put before the call.
  Status Flush() override = 0;
  // Verify and Compact as Admin's: Verify tells progress as it goes; Compact reports the
  // disk bytes used before and after (Stats().disk().used).
  // ---- device memory (a CUDA build; the first three need Options::device_pool_bytes > 0)
  // Stores `bytes` bytes at device pointer `src` into the device tier (device->device). The
  // copy runs on the store's own non-blocking stream, which waits for no other: src must be
  // written already (synchronize the stream that wrote it; a cudaMemcpy from pageable memory
  // may return before its bytes have landed).
  // (An entry put from device memory is checksummed at its first spill either way.)
  Status PutFromDevice(std::string_view ns, std::string_view key, const TensorMeta& meta,
                       const void* src, uint64_t bytes,
                       bool checksum_when_spilled = false) override = 0;
  // Copies the entry to device memory at `dst` (dst_bytes at least its size) from whichever
  // tier holds it: device->device, pinned host->device, or disk -> host pool -> device. The
  // copy runs on the store's own stream: no work queued on another stream may still use dst
  // (a caching allocator's fresh block can be; Python's get(device=...) waits for the
  // current stream first).
  Result<EntryInfo> GetToDevice(std::string_view ns, std::string_view key, void* dst,
                                uint64_t dst_bytes) override = 0;
  // The entry's device copy, leased (memory_kind() kDevice): promoted host->device first if
  // it has none. Leased device entries are never demoted or overwritten.
  Result<ReadLease> AcquireOnDevice(std::string_view ns, std::string_view key) override = 0;
  // In-place reads, reserve and prefetch; with a device tier, device puts and leases too.
  CacheCapabilities capabilities() override {
    const bool dev = device_region().base != nullptr;
    return {.device_tier = dev,
            .device_puts = dev,
            .device_leases = dev,
            .in_place_reads = true,
            .reserve = true,
            .prefetch = true,
            .device_io = dev ? this : nullptr,
            .memory = this,
            .reservations = this,
            .admin = this};
  }
  // The device pool's region (base null without a device tier), and its GPU.
  virtual MemoryRegion device_region() const = 0;
  virtual int device_ordinal() const = 0;
  // Ok while the store can serve and persist what it is given: open, its directory still
  // in place and writable, and moves out of the pools not failing (the last error if they
  // are: a full or failing disk). What a health check (/healthz) reports.
  virtual Status Health() = 0;
  // Every put, device put and commit from now on asks `admit` (null: admit all) before its
  // entry is installed; a refusal frees the reservation and is the put's status. Entries
  // already held stay. A put installed before this returns was admitted by the old one.
  virtual void SetAdmission(Admission admit) = 0;
  // Tells `events` (null: no one) every change from now on; it must outlive the store or
  // be replaced first. Entries held already are not told: list them (ListPages) after.
  virtual void SetEvents(EntryEvents* events) = 0;
  // Persists the pool (as Flush) and stops the background threads.
  Status Close() override = 0;
  // The pool's region: a lease's data() - base is its offset; shm_fd >= 0 when shareable.
  virtual MemoryRegion pool_region() const = 0;
  HostPoolView host_pool() const override {
    MemoryRegion r = pool_region();
    return {{r.base, r.size}, false};
  }
  // Nothing here lands through a bounce buffer: registration is a no-op.
  Status RegisterMemory(const BufferDesc&) override { return Status::Ok(); }
  void UnregisterMemory(const BufferDesc&) override {}
  // Registers the pool with a transport or device once (an RDMA memory region, CUDA host
  // registration): r->Register(pool_region()) now, r->Deregister at RemoveRegistrar or Close.
  // `r` must outlive that.
  virtual Status AddRegistrar(MemoryRegistrar* r) = 0;
  virtual void RemoveRegistrar(MemoryRegistrar* r) = 0;
};

}  // namespace ecstore
