// A count-min sketch of recent requests per key whose counts halve every `period` requests,
// so popularity that moved on fades: 4 rows of 64 Ki 16-bit counters (512 KiB), conservative
// update (a request raises only the lowest of a key's counters), 4 bits of fraction kept
// through the halvings (with whole counts a key seen once dropped to 0 at the first halving:
// 13 % over LRU at 10 % in the policy bench instead of 14 %, with one sketch). Mass() is the
// requests the counts hold, halved with them: Count(key) / Mass() estimates the key's share of
// requests whatever the sketch's age or period.
// Thread rules: not synchronized; its owner (FreqPolicy) is called under the keydir's mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ecstore {

class FrequencySketch {
 public:
  // Counts one request; returns true when this request made the counts halve.
  bool Add(uint64_t key_hash, uint64_t period);
  double Count(uint64_t key_hash) const;  // requests counted for the key (halvings included)
  double Mass() const { return mass_; }   // requests counted for all keys, as they halve

 private:
  uint32_t Raw(uint64_t key_hash) const;  // x kOne
  static constexpr size_t kRows = 4, kWidthBits = 16;
  static constexpr uint16_t kOne = 16;  // one request
  std::vector<uint16_t> counters_ = std::vector<uint16_t>(kRows << kWidthBits);
  uint64_t since_halving_ = 0;
  double mass_ = 0;
};

}  // namespace ecstore
