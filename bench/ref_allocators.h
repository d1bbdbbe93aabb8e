// Reference allocators for the `alloc` workload: the designs peer connectors use.
//  - BuddyAllocator: power-of-two blocks (a Mooncake-based connector's choice).
//  - FirstFitAllocator: address-ordered first fit with coalescing (the merged Mooncake EC
//    connector's slab).
// Thread rules: single-threaded.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace ecstore::bench {

struct RefBlock {
  uint64_t offset;
  uint64_t length;
};

class RefAllocator {
 public:
  virtual ~RefAllocator() = default;
  virtual const char* Name() const = 0;
  virtual std::optional<RefBlock> Allocate(uint64_t bytes) = 0;
  virtual void Free(const RefBlock& b) = 0;
  virtual uint64_t allocated() const = 0;  // bytes handed out (block sizes)
  virtual uint64_t largest_free() const = 0;
  // Free bytes in extents smaller than min_useful.
  virtual uint64_t stranded(uint64_t min_useful) const = 0;
};

class BuddyAllocator : public RefAllocator {
 public:
  BuddyAllocator(uint64_t capacity, uint64_t min_block = 4096);
  const char* Name() const override { return "buddy"; }
  std::optional<RefBlock> Allocate(uint64_t bytes) override;
  void Free(const RefBlock& b) override;
  uint64_t allocated() const override { return allocated_; }
  uint64_t largest_free() const override;
  uint64_t stranded(uint64_t min_useful) const override;

 private:
  int OrderFor(uint64_t bytes) const;
  uint64_t min_;
  int max_order_;
  std::vector<std::set<uint64_t>> free_;  // per order: free block offsets
  uint64_t allocated_ = 0;
};

class FirstFitAllocator : public RefAllocator {
 public:
  FirstFitAllocator(uint64_t capacity, uint64_t align = 4096);
  const char* Name() const override { return "first-fit"; }
  std::optional<RefBlock> Allocate(uint64_t bytes) override;
  void Free(const RefBlock& b) override;
  uint64_t allocated() const override { return allocated_; }
  uint64_t largest_free() const override;
  uint64_t stranded(uint64_t min_useful) const override;

 private:
  uint64_t align_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length
  uint64_t allocated_ = 0;
};

}  // namespace ecstore::bench
