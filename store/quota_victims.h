// QuotaVictims: which disk copies the disk quota gives up first. It ranks entries by what
// the keydir's table already holds for each -- no per-entry structure of its own (an LRU
// list node cost 64 B an entry, the most of any part of a large disk tier's index). Up to
// 4096 entries it ranks them all; beyond, a random sample of 16 per victim wanted, as Redis's
// approximated LRU does: the victims come from the coldest few percent. LRU ranks by last
// access; the value-aware ranking by hits x recompute cost per MiB / age (hyperbolic caching,
// which needs no priority queue and scores as GDSF does in the policy bench).
// Private to store/.
// Thread rules: the keydir's; Coldest runs under its mu (the table's and the entries' guard),
// which also guards the sampler's state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "store/keydir_table.h"

namespace ecstore {

class QuotaVictims {
 public:
  // `value_aware`: the "gdsf" and "freq" policies; else last access alone.
  explicit QuotaVictims(bool value_aware) : value_aware_(value_aware) {}

  // Up to `max` entries with a disk copy that nothing holds (no lease, load or spill; a row
  // is never held), the coldest first, as of `now_us`. Copies: the slots move as the caller
  // erases.
  std::vector<KeydirSlot> Coldest(const KeydirTable& table, uint64_t now_us, size_t max);

 private:
  // Lower goes first.
  double Coldness(uint64_t now_us, uint64_t last_access_us, uint64_t hits, uint64_t bytes,
                  const TensorMeta& meta) const;

  const bool value_aware_;
  uint64_t sample_state_ = 0x9e3779b97f4a7c15ull;
};

}  // namespace ecstore
