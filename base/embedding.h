// Synthetic encoder outputs for the bench, the demo and codec tests: normally distributed
// floats rounded (to nearest even) to bf16, as a vision encoder emits them. Never zeros or
// constants, which would flatter compression and caches.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace ecstore {

inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

inline std::vector<uint8_t> SyntheticEmbedding(size_t elems, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<uint8_t> out(elems * 2);
  for (size_t i = 0; i < elems; ++i) {
    uint16_t h = FloatToBf16(dist(rng));
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

}  // namespace ecstore
