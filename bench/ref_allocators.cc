#include "bench/ref_allocators.h"

#include <algorithm>

namespace ecstore::bench {

BuddyAllocator::BuddyAllocator(uint64_t capacity, uint64_t min_block) : min_(min_block) {
  max_order_ = 0;
  while ((min_ << (max_order_ + 1)) <= capacity) ++max_order_;
  free_.resize(static_cast<size_t>(max_order_) + 1);
  free_[static_cast<size_t>(max_order_)].insert(0);
}

int BuddyAllocator::OrderFor(uint64_t bytes) const {
  int o = 0;
  while ((min_ << o) < bytes) ++o;
  return o;
}

std::optional<RefBlock> BuddyAllocator::Allocate(uint64_t bytes) {
  int want = OrderFor(bytes);
  if (want > max_order_) return std::nullopt;
  int o = want;
  while (o <= max_order_ && free_[static_cast<size_t>(o)].empty()) ++o;
  if (o > max_order_) return std::nullopt;
  uint64_t off = *free_[static_cast<size_t>(o)].begin();
  free_[static_cast<size_t>(o)].erase(free_[static_cast<size_t>(o)].begin());
  while (o > want) {  // split, keeping the low half
    --o;
    free_[static_cast<size_t>(o)].insert(off + (min_ << o));
  }
  allocated_ += min_ << want;
  return RefBlock{off, min_ << want};
}

void BuddyAllocator::Free(const RefBlock& b) {
  int o = OrderFor(b.length);
  uint64_t off = b.offset;
  allocated_ -= b.length;
  while (o < max_order_) {
    uint64_t buddy = off ^ (min_ << o);
    auto& set = free_[static_cast<size_t>(o)];
    auto it = set.find(buddy);
    if (it == set.end()) break;
    set.erase(it);
    off = std::min(off, buddy);
    ++o;
  }
  free_[static_cast<size_t>(o)].insert(off);
}

uint64_t BuddyAllocator::largest_free() const {
  for (int o = max_order_; o >= 0; --o)
    if (!free_[static_cast<size_t>(o)].empty()) return min_ << o;
  return 0;
}

uint64_t BuddyAllocator::stranded(uint64_t min_useful) const {
  uint64_t n = 0;
  for (int o = 0; o <= max_order_ && (min_ << o) < min_useful; ++o)
    n += free_[static_cast<size_t>(o)].size() * (min_ << o);
  return n;
}

uint64_t FirstFitAllocator::stranded(uint64_t min_useful) const {
  uint64_t n = 0;
  for (auto& [_, l] : free_)
    if (l < min_useful) n += l;
  return n;
}

FirstFitAllocator::FirstFitAllocator(uint64_t capacity, uint64_t align) : align_(align) {
  free_[0] = capacity / align * align;
}

std::optional<RefBlock> FirstFitAllocator::Allocate(uint64_t bytes) {
  uint64_t need = (bytes + align_ - 1) / align_ * align_;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    uint64_t off = it->first, len = it->second;
    free_.erase(it);
    if (len > need) free_[off + need] = len - need;
    allocated_ += need;
    return RefBlock{off, need};
  }
  return std::nullopt;
}

void FirstFitAllocator::Free(const RefBlock& b) {
  allocated_ -= b.length;
  uint64_t off = b.offset, len = b.length;
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  free_[off] = len;
}

uint64_t FirstFitAllocator::largest_free() const {
  uint64_t m = 0;
  for (auto& [_, l] : free_) m = std::max(m, l);
  return m;
}

}  // namespace ecstore::bench
