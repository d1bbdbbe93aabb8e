#include "store/pool_allocator.h"

#include <algorithm>
#include <cassert>

namespace ecstore {

PoolAllocator::PoolAllocator(uint64_t capacity, uint64_t alignment, uint64_t small_threshold)
    : capacity_(capacity / alignment * alignment),
      alignment_(alignment),
      small_threshold_(small_threshold) {
  if (capacity_ > 0) InsertFree(0, capacity_);
}

void PoolAllocator::InsertFree(uint64_t offset, uint64_t length) {
  by_offset_.emplace(offset, length);
  by_size_.emplace(length, offset);
}

void PoolAllocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  by_offset_.erase(it);
}

std::optional<PoolBlock> PoolAllocator::Allocate(uint64_t bytes) {
  uint64_t need = RoundUp(bytes == 0 ? 1 : bytes);
  if (need < small_threshold_) {
    // The free-extent count stays small (tens), so a scan from the top is cheap.
    for (auto it = by_offset_.rbegin(); it != by_offset_.rend(); ++it) {
      if (it->second < need) continue;
      uint64_t off = it->first, len = it->second;
      EraseFree(by_offset_.find(off));
      if (len > need) InsertFree(off, len - need);
      allocated_ += need;
      return PoolBlock{off + len - need, need};
    }
    return std::nullopt;
  }
  auto it = by_size_.lower_bound({need, 0});
  if (it == by_size_.end()) return std::nullopt;
  uint64_t len = it->first, off = it->second;
  EraseFree(by_offset_.find(off));
  if (len > need) InsertFree(off + need, len - need);
  allocated_ += need;
  return PoolBlock{off, need};
}

void PoolAllocator::Free(const PoolBlock& block) {
  assert(block.length % alignment_ == 0);
  uint64_t off = block.offset, len = block.length;
  allocated_ -= len;
  auto next = by_offset_.lower_bound(off);
  if (next != by_offset_.end() && off + len == next->first) {
    len += next->second;
    EraseFree(next);
  }
  auto after = by_offset_.lower_bound(off);
  if (after != by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(off, len);
}

std::optional<PoolAllocator::Span> PoolAllocator::CheapestSpan(std::vector<Candidate> cands,
                                                               uint64_t need) const {
  for (const auto& [off, len] : by_offset_) cands.push_back({{off, len}, 0, 0});  // free: id 0
  std::sort(cands.begin(), cands.end(),
            [](const Candidate& a, const Candidate& b) { return a.block.offset < b.block.offset; });
  // Two pointers over each run of adjacent pieces: for every start, the shortest window from
  // it that is long enough (costs are never negative, so a longer one costs no less).
  double best = -1;
  size_t best_lo = 0, best_hi = 0;
  uint64_t span = 0;
  double cost = 0;
  for (size_t lo = 0, hi = 0; lo < cands.size(); ++lo) {
    if (hi <= lo) hi = lo, span = 0, cost = 0;
    while (span < need && hi < cands.size() &&
           (hi == lo ||
            cands[hi - 1].block.offset + cands[hi - 1].block.length == cands[hi].block.offset)) {
      span += cands[hi].block.length;
      cost += cands[hi].cost;
      ++hi;
    }
    if (span >= need && (best < 0 || cost < best)) best = cost, best_lo = lo, best_hi = hi;
    if (hi > lo) {  // slide: drop the window's first piece
      span -= cands[lo].block.length;
      cost -= cands[lo].cost;
    }
  }
  if (best < 0) return std::nullopt;
  Span out;
  out.range.offset = cands[best_lo].block.offset;
  const PoolBlock& last = cands[best_hi - 1].block;
  out.range.length = last.offset + last.length - out.range.offset;
  for (size_t i = best_lo; i < best_hi; ++i)
    if (cands[i].id != 0) out.ids.push_back(cands[i].id);
  return out;
}

std::vector<PoolBlock> PoolAllocator::TakeFreeWithin(const PoolBlock& range) {
  const uint64_t lo = range.offset, hi = range.offset + range.length;
  std::vector<PoolBlock> taken;
  auto it = by_offset_.upper_bound(lo);
  if (it != by_offset_.begin()) --it;  // an extent that starts before lo may reach into it
  while (it != by_offset_.end() && it->first < hi) {
    const uint64_t off = it->first, end = off + it->second;
    auto next = std::next(it);
    if (end > lo) {
      EraseFree(it);
      const uint64_t a = std::max(off, lo), b = std::min(end, hi);
      if (off < a) InsertFree(off, a - off);
      if (b < end) InsertFree(b, end - b);
      taken.push_back({a, b - a});
      allocated_ += b - a;
    }
    it = next;
  }
  return taken;
}

uint64_t PoolAllocator::largest_free_extent() const {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

uint64_t PoolAllocator::StrandedBytes(uint64_t min_useful) const {
  uint64_t n = 0;
  for (const auto& [len, _] : by_size_) {
    if (len >= min_useful) break;
    n += len;
  }
  return n;
}

double PoolAllocator::ExternalFragmentation() const {
  if (capacity_ == 0) return 0;
  return static_cast<double>(free_bytes() - largest_free_extent()) / static_cast<double>(capacity_);
}

}  // namespace ecstore
