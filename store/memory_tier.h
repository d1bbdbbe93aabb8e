// MemoryTier: one pool of memory that entries live in -- the pinned host pool or the GPU
// device pool -- with everything that belongs to it: the backend and the
// region it mapped once, the allocator carving it, its eviction policy and watermarks, its
// accounting and counters, and the registrars (RDMA, CUDA) its region is registered with.
// The keydir stays with the owner (StoreImpl), which says which entries live here.
//
//   auto t = MemoryTier::Open(Tier::kPool, NewHostPinnedBackend(), bytes, opts);
//   auto b = t->Allocate(n);  ... t->Insert(id, rec, *b) ... t->Remove(id, rec.bytes, *b)
//
// Thread rules: registration (AddRegistrar, RemoveRegistrar, Close) is thread-safe under
// its own leaf lock. Everything else is not synchronized: the owner calls it under its
// metadata lock. region() and Ptr() are constant from Open to Close.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/entry_record.h"
#include "base/memory_backend.h"
#include "base/mutex.h"
#include "cache/cache.h"
#include "store/eviction_policy.h"
#include "store/pool_allocator.h"

namespace ecstore {

struct MemoryTierOptions {
  std::string eviction_policy = "lru";
  double high_watermark = 0.98;  // the evictor starts above this fraction of the capacity
  double low_watermark = 0.95;   // and stops at this one (Options says why)
};

class MemoryTier {
 public:
  // Maps `bytes` of the backend's memory, once.
  static Result<std::unique_ptr<MemoryTier>> Open(Tier tier, std::unique_ptr<MemoryBackend> backend,
                                                  uint64_t bytes, const MemoryTierOptions& o);
  ~MemoryTier() { Close(); }

  Tier tier() const { return tier_; }
  const MemoryRegion& region() const { return region_; }
  uint8_t* Ptr(const PoolBlock& b) const { return region_.base + b.offset; }

  // ---- blocks
  std::optional<PoolBlock> Allocate(uint64_t bytes) { return alloc_.Allocate(bytes); }
  void Free(const PoolBlock& b) { alloc_.Free(b); }  // a block no entry holds (yet)
  uint64_t RoundUp(uint64_t bytes) const { return alloc_.RoundUp(bytes); }
  uint64_t capacity() const { return alloc_.capacity(); }
  uint64_t largest_free_extent() const { return alloc_.largest_free_extent(); }

  // ---- entries: the bytes of entry `id` (described by `rec`) are now in block `b` / leave it
  void Insert(uint64_t id, const EntryRecord& rec);
  void Remove(uint64_t id, uint64_t bytes, const PoolBlock& b);  // frees the block
  void Unrank(uint64_t id) { policy_->Remove(id); }  // no longer a candidate (leased, gone)
  void Touch(uint64_t id) { policy_->Touch(id); }
  // A request for a key this tier does not hold (a miss, a read from disk): the "freq"
  // policy counts it.
  void Requested(std::string_view ns, std::string_view key) {
    policy_->Requested(EntryKeyHash(ns, key));
  }
  std::vector<uint64_t> Coldest(size_t max) const { return policy_->Coldest(max); }
  std::optional<PoolAllocator::Span> CheapestSpan(std::vector<PoolAllocator::Candidate> c,
                                                  uint64_t need) const {
    return alloc_.CheapestSpan(std::move(c), need);
  }
  std::vector<PoolBlock> TakeFreeWithin(const PoolBlock& range) {
    return alloc_.TakeFreeWithin(range);
  }
  uint64_t free_bytes() const { return alloc_.free_bytes(); }
  void ResetPolicy();  // forget every ranking (a recovery that starts again)
  void Reserve(size_t entries) { policy_->Reserve(entries); }

  // ---- watermarks: need_bytes is a waiting Put's block size (0: none)
  bool NeedsEviction(uint64_t need_bytes) const;
  // Done once at most the low watermark is used (after `leaving` more bytes go) and a block
  // of need_bytes fits.
  bool EvictionDone(uint64_t need_bytes, uint64_t leaving = 0) const;

  TierStats& counters() { return counters_; }  // hits, misses, evictions, spills, promotions
  TierStats Stats() const;                     // the counters with the gauges
  double fragmentation() const { return alloc_.ExternalFragmentation(); }

  // ---- registration of the whole region, once per registrar
  Status AddRegistrar(MemoryRegistrar* r);
  void RemoveRegistrar(MemoryRegistrar* r);
  void Close();  // deregisters everywhere and unmaps; later AddRegistrar calls fail

 private:
  MemoryTier(Tier tier, std::unique_ptr<MemoryBackend> backend, const MemoryRegion& region,
             const MemoryTierOptions& o);

  const Tier tier_;
  const MemoryTierOptions opt_;
  std::unique_ptr<MemoryBackend> backend_;
  MemoryRegion region_;
  PoolAllocator alloc_;
  std::unique_ptr<EvictionPolicy> policy_;
  uint64_t entries_ = 0;
  uint64_t bytes_ = 0;  // payload bytes of the entries here
  TierStats counters_;
  Mutex registrars_mu_;  // a leaf: nothing is taken under it
  std::vector<MemoryRegistrar*> registered_ GUARDED_BY(registrars_mu_);
  bool closed_ GUARDED_BY(registrars_mu_) = false;
};

}  // namespace ecstore
