// ecstore::Cache: the one consumer interface, implemented by the embedded Store
// (store/store.h) and by the remote net::Client (net/client.h). Code written against a
// Cache -- the CLI, the Python package -- works the same on a local directory and through
// a server.
//
//   std::unique_ptr<Cache> c = ...;  // Store::Open(dir, opt) or net::Client::Connect(uri)
//   c->Put("qwen2.5-vl", mm_hash, {DType::kBF16, {400, 3584}}, bytes);
//   auto info = c->Get("qwen2.5-vl", mm_hash, dst);              // copy out
//   auto lease = c->Acquire("qwen2.5-vl", mm_hash);              // read in place, RAII
//   auto leases = c->AcquireMany("qwen2.5-vl", {h1, h2});        // a step's items at once
//   auto found = c->LookupMany("qwen2.5-vl", {h1, h2});          // one round trip
//
// Thread rules: a Store is thread-safe; a Client is used by one thread at a time (see each
// header). A ReadLease may be moved between threads; its bytes stay valid and unchanged
// until it is destroyed, and it must not outlive the Cache that made it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/entry_record.h"
#include "base/status.h"
#include "base/tensor_meta.h"

namespace ecstore {

class MemoryRegistrar;  // base/memory_backend.h

// The tiers, fastest first. kDevice is the GPU pool, kPool the pinned host pool.
enum class Tier : uint8_t { kDevice = 0, kPool = 1, kDisk = 2 };
inline constexpr Tier kAllTiers[] = {Tier::kDevice, Tier::kPool, Tier::kDisk};
const char* TierName(Tier t);  // "device" / "pool" / "disk"

// Where a copy of an entry is (Cache::Locate): the node -- a cluster member's id, "" for
// the cache asked -- and the fastest medium it has there.
struct Location {
  std::string node;
  Tier medium = Tier::kPool;
  bool operator==(const Location&) const = default;
};

// Which tiers hold a copy of an entry.
class TierSet {
 public:
  TierSet() = default;
  static TierSet FromBits(uint8_t bits) { return TierSet(bits & 7); }
  uint8_t bits() const { return bits_; }
  bool has(Tier t) const { return bits_ & Bit(t); }
  void add(Tier t) { bits_ |= Bit(t); }
  void remove(Tier t) { bits_ &= static_cast<uint8_t>(~Bit(t)); }
  bool empty() const { return bits_ == 0; }
  // The fastest tier holding a copy (kDisk when empty).
  Tier fastest() const;

 private:
  explicit TierSet(uint8_t b) : bits_(b) {}
  static uint8_t Bit(Tier t) { return static_cast<uint8_t>(1u << static_cast<unsigned>(t)); }
  uint8_t bits_ = 0;
};

struct EntryInfo {
  std::string ns;
  std::string key;
  TierSet tiers;  // every tier holding a copy; disk means a durable copy exists
  uint64_t bytes = 0;
  TensorMeta meta;
  uint64_t created_us = 0;
  uint64_t last_access_us = 0;
  uint64_t hits = 0;
  uint64_t checksum = 0;
  Tier tier() const { return tiers.fastest(); }  // where a read is served from
  bool on_disk() const { return tiers.has(Tier::kDisk); }
  // What a consumer sees of the store's record of an entry held by `tiers`.
  static EntryInfo Of(const EntryRecord& r, TierSet tiers);
};

struct TierStats {
  Tier tier = Tier::kPool;
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t spills = 0;
  uint64_t promotions = 0;
  uint64_t capacity = 0;  // pool: bytes of memory; disk: the quota
  uint64_t used = 0;      // pool: block bytes, 4 KiB rounding included; disk: file bytes
};

// The namespace the CLI uses when none is given, and the Python package's
// DEFAULT_NAMESPACE: one default for every front end.
inline constexpr char kDefaultNamespace[] = "default";

// What Admin::Verify reports.
struct VerifyReport {
  uint64_t checked = 0;
  uint64_t bytes = 0;
  std::vector<std::string> corrupt;  // "ns/key: reason"; those entries were dropped
  // "ns/key: reason": entries that could not be read (an I/O error, not a checksum
  // mismatch). They are kept: check the device and verify again.
  std::vector<std::string> errors;
};

// One schema locally and remotely (cache/stats_json.h writes and reads it).
struct StoreStats {
  std::vector<TierStats> tiers;       // the tiers this store has, fastest first
  double pool_fragmentation = 0;      // free bytes outside the largest free extent / capacity
  bool pool_huge_pages = false;       // every page of the pool is a huge one
  uint64_t pool_huge_page_bytes = 0;  // what the kernel granted (MemoryRegion::huge_page_bytes)
  bool pool_locked = false;
  double pool_prefault_seconds = 0;  // faulting the pool in at open (MemoryRegion)
  unsigned pool_prefault_threads = 0;
  uint64_t segments = 0;
  uint64_t corrupt_dropped = 0;
  uint64_t spill_errors = 0;
  uint64_t compactions = 0;
  uint64_t misses = 0;  // gets of entries in no tier
  // Existence checks (Lookup, LookupMany, Contains) that found the entry, or not.
  uint64_t lookup_hits = 0, lookup_misses = 0;
  std::string version;        // of the library (the server's, remotely)
  double uptime_seconds = 0;  // since the store was opened
  // Through a server: its client connections and the leases they hold (0 locally).
  uint64_t connections = 0, client_leases = 0;
  uint64_t leases = 0;  // held now: zero-copy readers, pins, copies in flight
  // The keydir's entries, and those of them it keeps as compact rows (idle, disk only:
  // store/cold_row.h); the rest are full entries in use.
  uint64_t keydir_entries = 0, keydir_compact_rows = 0;
  // The tier's counters; added (zeroed) when absent.
  TierStats& at(Tier t);
  // The tier's counters, or zeroes for a tier this store does not have.
  TierStats of(Tier t) const;
  TierStats pool() const { return of(Tier::kPool); }
  TierStats disk() const { return of(Tier::kDisk); }
};

struct ReadOptions {
  // false: the read leaves no trace -- no hit or miss counted, no LRU touch, no promotion of
  // a disk entry into the pool (export and other bulk readers). Local stores only.
  bool record_access = true;
};

enum class MemoryKind : uint8_t { kHost, kDevice };

// Where bytes live, as a value (NIXL-style): host or device memory, the CUDA device, the
// bytes, and for device memory the CUDA stream (a cudaStream_t as an integer; 0: the legacy
// default stream) that copies into or out of it are ordered after. The memory stays the
// caller's. Registration is the Cache's (RegisterMemory): a transport that needs it finds
// a descriptor's registration by its address.
struct BufferDesc {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // kDevice: the CUDA ordinal
  uint8_t* data = nullptr;
  uint64_t size = 0;
  uintptr_t stream = 0;  // kDevice only
  static BufferDesc Host(std::span<uint8_t> m) {
    return {.kind = MemoryKind::kHost, .data = m.data(), .size = m.size()};
  }
  static BufferDesc Device(void* p, uint64_t n, int device, uintptr_t stream = 0) {
    return {MemoryKind::kDevice, device, static_cast<uint8_t*>(p), n, stream};
  }
  bool on_device() const { return kind == MemoryKind::kDevice; }
  std::span<uint8_t> span() const { return {data, size}; }
};

// How this process's gets landed (Cache::transfer_stats): straight into the caller's memory
// by the NIC, or through a bounce buffer and a copy out of it (RDMA verbs; memory not
// registered with RegisterMemory). Zero where no transport of this cache bounces.
struct TransferStats {
  uint64_t direct_reads = 0, direct_bytes = 0;
  uint64_t bounced_reads = 0, bounced_bytes = 0;
};

// The host pool as this process sees it (Cache::host_pool): an embedded store's own, or a
// same-host client's read-only mapping of its server's. Empty where there is none here.
struct HostPoolView {
  std::span<const uint8_t> bytes;
  bool read_only = true;
};

// A zero-copy read: while it lives, the bytes it points at stay valid and unchanged (a
// local entry is never evicted or overwritten; a remote one is pinned on the server or held
// in a buffer the lease owns). Cache implementations make leases through the constructor
// below; callers only move and read them.
class ReadLease {
 public:
  class Releaser {
   public:
    virtual ~Releaser() = default;
    virtual void Release(void* token) = 0;
  };
  ReadLease() = default;
  ReadLease(Releaser* r, void* token, const uint8_t* d, EntryInfo info,
            MemoryKind kind = MemoryKind::kHost, std::optional<Tier> served_from = std::nullopt)
      : releaser_(r),
        token_(token),
        data_(d),
        info_(std::move(info)),
        kind_(kind),
        served_from_(served_from) {}
  ReadLease(ReadLease&& o) noexcept;
  ReadLease& operator=(ReadLease&& o) noexcept;
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;
  ~ReadLease();
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return info_.bytes; }
  const TensorMeta& meta() const { return info_.meta; }
  const EntryInfo& info() const { return info_; }
  MemoryKind memory_kind() const { return kind_; }
  // The tier the entry's bytes were found in when the acquire began (kDisk: it promoted them).
  Tier served_from() const { return served_from_.value_or(info_.tier()); }
  std::span<const uint8_t> bytes() const { return {data_, info_.bytes}; }

 private:
  void Reset();
  Releaser* releaser_ = nullptr;
  void* token_ = nullptr;
  const uint8_t* data_ = nullptr;
  EntryInfo info_;
  MemoryKind kind_ = MemoryKind::kHost;
  std::optional<Tier> served_from_;
};

// A block reserved for one put (Cache::ReserveSlot), filled in place -- a device->host copy
// straight into it, no staging buffer -- then committed; dropped uncommitted, nothing is
// put and the block goes back. One thread fills it at a time; Commit is a call on its cache
// (under a Client's one-thread rule).
class PutSlot {
 public:
  virtual ~PutSlot() = default;
  virtual std::span<uint8_t> bytes() const = 0;
  // The memory the block lies in where that is not the cache's host_pool() (a same-host
  // client's put arena), to register with CUDA once; empty otherwise.
  virtual std::span<const uint8_t> region() const { return {}; }
  // A landing block (ReserveSlot with `landing`, from a daemon that offers it): Landed(n)
  // says its first n bytes are in (from any thread, never lowered), FailLanding that they
  // will not be, and Commit may go out first -- the daemon copies each piece as it lands.
  // AwaitLanded waits, without the connection, until `at_least` bytes have. Any other block
  // is filled, then committed.
  virtual bool landing() const { return false; }
  virtual void Landed(uint64_t) const {}
  virtual void FailLanding() const {}
  virtual uint64_t landed() const { return 0; }
  virtual Status AwaitLanded(std::chrono::milliseconds, uint64_t) const { return Status::Ok(); }
  // Puts the block's bytes (once). checksum_when_spilled: hashed by the first spill instead
  // of now, so the entry is readable as soon as its bytes are in.
  virtual Status Commit(bool checksum_when_spilled) = 0;
};

// A claim on a key a caller found absent (server/claim_table.h keeps them on a server).
enum class ClaimOutcome : uint8_t {
  kGranted = 0,  // the caller computes and puts the entry
  kHeld = 1,     // another caller is computing it: wait for its put (ms_left at most)
  kPresent = 2,  // the entry is stored: read it
};
struct ClaimAnswer {
  ClaimOutcome outcome = ClaimOutcome::kGranted;
  uint32_t ms_left = 0;  // kHeld: until the holder's claim lapses
};

// What a Cache does beyond host bytes comes as facets: small interfaces that capabilities()
// hands out where the cache has them and leaves null where it has not, so that a caller asks
// once instead of calling and reading an error (NIXL-style capability queries).
//
//   if (DeviceIo* d = cache->capabilities().device_io) d->GetToDevice(ns, key, dst, n);
//   else ...  // load through host leases (cache/device_load.h)
//
// A facet lives as long as its cache, and follows its cache's thread rules.

// One item of DeviceIo::PutManyFromDevice: `bytes` of device memory at `src` under `key`.
struct DeviceSource {
  std::string key;
  TensorMeta meta;
  const void* src = nullptr;
  uint64_t bytes = 0;
};

// Device memory the cache copies itself.
class DeviceIo {
 public:
  virtual ~DeviceIo() = default;
  // `bytes` of this process's device memory at `src` (written, its stream synchronized),
  // copied into the store by the store itself; readable when this returns Ok.
  // checksum_when_spilled: the payload's checksum may wait for its first spill to disk.
  // An error where it cannot (capabilities().device_puts false, or memory it cannot open:
  // InvalidArgument; an embedded store without a device tier: Unavailable): copy to host
  // memory and Put.
  virtual Status PutFromDevice(std::string_view ns, std::string_view key, const TensorMeta& meta,
                               const void* src, uint64_t bytes,
                               bool checksum_when_spilled = false) = 0;
  // A step's items, each as PutFromDevice puts it; result i is items[i]'s. Through a
  // same-host daemon that offers it, one request: one round trip and one wait for all the
  // copies. By default, each item in turn.
  virtual std::vector<Status> PutManyFromDevice(std::string_view ns,
                                                const std::vector<DeviceSource>& items,
                                                bool checksum_when_spilled = false);
  // The entry copied to device memory at `dst` (at least its size) from whichever tier holds
  // it, complete on return. InvalidArgument without a device tier (capabilities().device_tier):
  // load through host leases (cache/device_load.h).
  virtual Result<EntryInfo> GetToDevice(std::string_view ns, std::string_view key, void* dst,
                                        uint64_t dst_bytes) = 0;
  // The entry's device copy, leased (memory_kind() kDevice). InvalidArgument where there is
  // no device pool to lease from (capabilities().device_leases false).
  virtual Result<ReadLease> AcquireOnDevice(std::string_view ns, std::string_view key) = 0;
};

// Memory registration, and the host memory this process shares with the store.
class MemoryRegistration {
 public:
  virtual ~MemoryRegistration() = default;
  // Registers memory that gets will land in, once, so that a transport that needs it (RDMA
  // verbs) writes there directly instead of through its bounce buffer; kept across
  // reconnects until UnregisterMemory or the cache's end, and the memory must stay valid
  // that long. Ok and nothing done where nothing would gain (TCP, shared memory). Device
  // memory: registered where the NIC can reach it (dma-buf or nvidia-peermem), else
  // Unavailable saying why -- gets into it are then staged.
  virtual Status RegisterMemory(const BufferDesc& memory) = 0;
  virtual void UnregisterMemory(const BufferDesc& memory) = 0;
  // Whether GetMany may be given `memory` as a destination: host memory always; device
  // memory where the transport writes it itself (RDMA verbs into device memory registered
  // above), so GetIntoBuffers need not stage it through host memory.
  virtual bool GetsInto(const BufferDesc& memory) const { return !memory.on_device(); }
  virtual TransferStats transfer_stats() const { return {}; }
  // See HostPoolView; empty by default.
  virtual HostPoolView host_pool() const { return {}; }
  // Host memory this process fills for puts and the store copies from (a same-host client's
  // put arenas) is registered with `registrar` from now on (CUDA host registration: device
  // to host copies into it at pinned speed), each piece deregistered before it is unmapped,
  // and prepared now rather than at the first put. False where the cache has none (the
  // default; an embedded store's pool is host_pool(), registered by whoever wants it).
  virtual Result<bool> RegisterPutMemoryWith(std::shared_ptr<MemoryRegistrar>) { return false; }
};

// Puts filled in place.
class Reservations {
 public:
  virtual ~Reservations() = default;
  // A block for one put of `bytes` to fill in place (PutSlot): an embedded store's pool, or
  // a same-host daemon's put arena (with `landing`, a landing block where it offers them).
  virtual Result<std::unique_ptr<PutSlot>> ReserveSlot(std::string_view ns, std::string_view key,
                                                       const TensorMeta& meta, uint64_t bytes,
                                                       bool landing = false) = 0;
};

// Claims seen by every caller of one store (a daemon's, a cluster's). Without this facet no
// one else's claims are seen: compute, as without claims (ClaimOrGrant).
class Claims {
 public:
  virtual ~Claims() = default;
  // A claim on a key this caller found absent: granted (compute and put it), held by another
  // caller (wait for its put), or present.
  virtual Result<ClaimAnswer> Claim(std::string_view ns, std::string_view key,
                                    std::chrono::milliseconds ttl) = 0;
};

// What Admin::Compact did: the disk bytes used before and after.
struct CompactReport {
  uint64_t before = 0, after = 0;
};

// Administration of one store's whole disk tier, run where the store is (an embedded store,
// or a daemon asked through its client); a cluster has none (ask one node).
class Admin {
 public:
  virtual ~Admin() = default;
  // Reads every entry and checks its checksum; corrupt entries are dropped and reported.
  // An entry whose read fails with an I/O error is reported in `errors` and kept. progress
  // (optional) is told (done, total) as it goes; through a daemon, once at the end.
  virtual Result<VerifyReport> Verify(
      const std::function<void(uint64_t done, uint64_t total)>& progress) = 0;
  // Rewrites live records of sealed segments whose live ratio is below the threshold
  // (threshold 1.0 compacts every sealed segment with any dead bytes).
  virtual Result<CompactReport> Compact(double live_ratio_threshold) = 0;
};

// What a Cache does itself beyond host bytes, so that callers choose without asking which
// implementation it is (the rest they stage through host memory: cache/device_load.h does
// for loads to a GPU): flags, and the facets it has (null where it has none).
struct CacheCapabilities {
  bool device_tier = false;       // keeps entries in device memory; GetToDevice serves from it
  bool device_puts = false;       // PutFromDevice copies device memory into the store itself
  bool device_leases = false;     // AcquireOnDevice may lease a device copy (asking tells)
  bool in_place_reads = false;    // a lease reads the store's host memory in place, no copy
  bool reserve = false;           // a put may fill a block in place, then commit (asking tells)
  bool prefetch = false;          // Prefetch acts on its hint
  bool prefetch_queued = false;   // ... queued and answered at once, not done in the call
  DeviceIo* device_io = nullptr;  // set where any of the device flags is
  MemoryRegistration* memory = nullptr;
  Reservations* reservations = nullptr;  // set where reserve is
  Claims* claims = nullptr;              // Claim decided where other callers' claims are seen
  Admin* admin = nullptr;
};

// Claim through caps.claims, or granted where no one else's claims are seen.
Result<ClaimAnswer> ClaimOrGrant(const CacheCapabilities& caps, std::string_view ns,
                                 std::string_view key, std::chrono::milliseconds ttl);

class Cache {
 public:
  virtual ~Cache() = default;
  // How this cache is reached: "local", or the client's transport ("tcp", "shm", "rdma").
  virtual const char* transport() const = 0;

  // Stores bytes under (ns, key), replacing an older entry.
  virtual Status Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
                     std::span<const uint8_t> bytes) = 0;
  // Copies the entry into dst (at least its size) and returns its metadata.
  virtual Result<EntryInfo> Get(std::string_view ns, std::string_view key,
                                std::span<uint8_t> dst) = 0;
  // Gets several entries of one namespace; result i belongs to keys[i] and dsts[i].
  virtual std::vector<Result<EntryInfo>> GetMany(std::string_view ns,
                                                 const std::vector<std::string>& keys,
                                                 const std::vector<std::span<uint8_t>>& dsts) = 0;
  // The entry for zero-copy reading (see ReadLease).
  virtual Result<ReadLease> Acquire(std::string_view ns, std::string_view key) = 0;
  // Several entries of one namespace for zero-copy reading; result i belongs to keys[i]. An
  // embedded store reads the disk-only ones into its pool as one batch, all in flight
  // together.
  std::vector<Result<ReadLease>> AcquireMany(std::string_view ns,
                                             const std::vector<std::string>& keys) {
    return AcquireMany(ns, keys, nullptr);
  }
  // AcquireMany, telling `watch` (if any) of each entry's bytes as they become readable where
  // its lease will lie, so that a reader copies them out (into its buffer, to a GPU) while
  // the rest are read: an embedded store tells of its pool hits at once and of each disk
  // read's pieces as they land; a same-host client relays what its server tells
  // (GET_SHM_STREAM). Told on the calling thread: landed(i, at, n) says [0, n) of key i's
  // entry lies at `at` -- in order, not yet checked; a read redone elsewhere starts again at
  // 0 at another `at`. batch_end (optional) is called where nothing more is told at once, so
  // that what was told together can be acted on together. On return streamed[i] is true
  // where key i's lease is of exactly the bytes told, at `at`, checked (nothing wrote them in
  // between); elsewhere the lease (if any) came another way and is to be read whole.
  struct LandingWatch {
    std::function<void(size_t key, const uint8_t* at, uint64_t landed)> landed;
    std::function<void()> batch_end;
    std::vector<bool> streamed;
  };
  // (By default: Acquire key by key, nothing told, streamed all false.)
  virtual std::vector<Result<ReadLease>> AcquireMany(std::string_view ns,
                                                     const std::vector<std::string>& keys,
                                                     LandingWatch* watch);
  // Keeps the entry resident in memory (never evicted, never overwritten in place) until the
  // returned lease is destroyed, without moving its bytes (a remote pin's data() is null). A
  // scheduler pins what it has promised a worker will find. Remote pins also end when the
  // server's lease TTL passes or the connection closes.
  virtual Result<ReadLease> Pin(std::string_view ns, std::string_view key) = 0;
  // Metadata of one entry: NotFound when absent.
  virtual Result<EntryInfo> Lookup(std::string_view ns, std::string_view key) = 0;
  // Metadata of many entries in one call; nullopt where absent.
  virtual Result<std::vector<std::optional<EntryInfo>>> LookupMany(
      std::string_view ns, const std::vector<std::string>& keys) = 0;
  // Whether entries exist (by default through Lookup / LookupMany).
  virtual Result<bool> Contains(std::string_view ns, std::string_view key);
  virtual Result<std::vector<bool>> ContainsMany(std::string_view ns,
                                                 const std::vector<std::string>& keys);
  // Per key, where it is held, best first (empty: nowhere). One store or daemon answers
  // from its keydir (node ""); a cluster asks each key's places in parallel, batched.
  virtual Result<std::vector<std::vector<Location>>> Locate(std::string_view ns,
                                                            const std::vector<std::string>& keys);
  // NotFound when absent.
  virtual Status Erase(std::string_view ns, std::string_view key) = 0;
  // Erases every listed (namespace, key) that exists -- a missing one is skipped.
  // erased[i] says whether entry i was there.
  virtual Status EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                           std::vector<bool>* erased) = 0;
  // Every entry, handed to on_page a page (at most page_size entries) at a time until
  // on_page returns false. Entries that change while listing may be missed or seen twice.
  virtual Status ListPages(size_t page_size,
                           const std::function<bool(std::vector<EntryInfo>&&)>& on_page) = 0;
  Result<std::vector<EntryInfo>> List();  // every page, collected
  virtual Result<StoreStats> Stats() = 0;

  // What this cache does beyond host bytes: flags and facets (see CacheCapabilities).
  virtual CacheCapabilities capabilities() { return {}; }
  // A hint that `keys` will be read soon: disk-only entries are read into memory ahead of use
  // (by a daemon, on its own thread). False where nothing (or not all of it) was done: no
  // prefetch here, a full queue, no free room now. A bad key is InvalidArgument.
  virtual Result<bool> Prefetch(std::string_view ns, const std::vector<std::string>& keys);
  // Makes what was put durable (an embedded store); Ok and nothing to do elsewhere.
  virtual Status Flush() { return Status::Ok(); }
  // Persists and stops (an embedded store; call once, after other calls have returned); Ok
  // elsewhere, where closing is the object's end.
  virtual Status Close() { return Status::Ok(); }
};

}  // namespace ecstore
