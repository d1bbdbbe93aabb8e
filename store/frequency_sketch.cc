#include "store/frequency_sketch.h"

#include <algorithm>

namespace ecstore {
namespace {
size_t Slot(uint64_t key, size_t row, size_t width_bits) {
  static constexpr uint64_t kOdd[] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                                      0x165667b19e3779f9ull, 0xd6e8feb86659fd93ull};
  return (row << width_bits) | ((key * kOdd[row]) >> (64 - width_bits));
}
}  // namespace

uint32_t FrequencySketch::Raw(uint64_t key) const {
  uint32_t n = UINT16_MAX;
  for (size_t r = 0; r < kRows; ++r) n = std::min<uint32_t>(n, counters_[Slot(key, r, kWidthBits)]);
  return n;
}

double FrequencySketch::Count(uint64_t key) const { return static_cast<double>(Raw(key)) / kOne; }

bool FrequencySketch::Add(uint64_t key, uint64_t period) {
  const uint32_t now = Raw(key);  // conservative update: raise only the lowest
  for (size_t r = 0; r < kRows; ++r) {
    uint16_t& c = counters_[Slot(key, r, kWidthBits)];
    if (c == now && c <= UINT16_MAX - kOne) c += kOne;
  }
  mass_ += 1;
  if (++since_halving_ < std::max<uint64_t>(period, 1)) return false;
  since_halving_ = 0;
  for (uint16_t& c : counters_) c /= 2;
  mass_ /= 2;
  return true;
}

}  // namespace ecstore
