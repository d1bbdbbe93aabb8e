// PoolAllocator: variable-size allocator over one region [0, capacity) with immediate
// coalescing of neighbours. Large requests take the best-fitting extent from its low end;
// small ones (< small_threshold) are packed from the top of the highest extent that holds
// them. Keeping the two apart means a freed small block is refilled by small blocks instead
// of leaving slivers between large ones (bench `alloc`: 1.2% lost vs 2.8% for plain best fit).
// Every block starts and ends on `alignment` (4 KiB), so the disk tier can write and read pool
// memory directly with O_DIRECT. Out of memory is a returned value (std::nullopt), never an
// exception. Thread rules: not synchronized; the owner (Store) guards it with its metadata mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace ecstore {

struct PoolBlock {
  uint64_t offset = 0;
  uint64_t length = 0;  // rounded up to the alignment
};

class PoolAllocator {
 public:
  explicit PoolAllocator(uint64_t capacity, uint64_t alignment = 4096,
                         uint64_t small_threshold = 8ull << 20);

  std::optional<PoolBlock> Allocate(uint64_t bytes);
  void Free(const PoolBlock& block);

  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t allocated_bytes() const { return allocated_; }
  uint64_t free_bytes() const { return capacity_ - allocated_; }
  uint64_t largest_free_extent() const;
  size_t free_extents() const { return by_offset_.size(); }
  // Free bytes stranded outside the largest free extent, as a fraction of capacity.
  double ExternalFragmentation() const;
  // Free bytes in extents smaller than `min_useful`: space no entry of that size can use.
  uint64_t StrandedBytes(uint64_t min_useful) const;
  // Where to make room for a block of `need` bytes that no free extent holds: the cheapest
  // run of adjacent free extents and candidate blocks (each with a cost: what evicting or
  // moving its entry costs) at least `need` long, with the ids of the candidates in it; or
  // nothing when no such run exists (what lies between the candidates is pinned). Evicting
  // coldest first until an extent happens to form instead frees blocks all over the pool: in
  // the bench's mixed workload the pool then held only 72-78% of its budget on average.
  struct Candidate {
    PoolBlock block;
    double cost = 0;
    uint64_t id = 0;  // not 0
  };
  struct Span {
    PoolBlock range;
    std::vector<uint64_t> ids;
  };
  std::optional<Span> CheapestSpan(std::vector<Candidate> candidates, uint64_t need) const;
  // Allocates whatever is free inside `range` (so nothing else lands there while the blocks
  // in it are moved out); Free each returned block to give it back.
  std::vector<PoolBlock> TakeFreeWithin(const PoolBlock& range);
  uint64_t RoundUp(uint64_t bytes) const {
    return (bytes + alignment_ - 1) / alignment_ * alignment_;
  }

 private:
  void InsertFree(uint64_t offset, uint64_t length);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t small_threshold_;
  uint64_t allocated_ = 0;
  std::map<uint64_t, uint64_t> by_offset_;           // offset -> length
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (length, offset)
};

}  // namespace ecstore
