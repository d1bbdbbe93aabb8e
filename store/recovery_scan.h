// RecoveryScan: what the durable tier does at open to find its entries -- every index row
// loaded (a reader thread decoding SQLite rows while the owner builds entries), then each
// segment scanned past its indexed tail for records written but not yet indexed, tombstones
// applied, a torn tail cut off. It carries the scan's state (the highest seq seen, the
// tombstones met, corrupt records, whether the last segment ended whole) from one segment
// to the next; DurableTier decides what to do with the result (a damaged index is set aside
// and the scan run again, from the segments alone).
//
//   RecoveryScan scan(disk, index, owner, read_only);
//   scan.LoadIndex(segments);                       // unless rebuilding
//   for (seg : segments) scan.ScanTail(seg, indexed_tail(seg), rebuild);
//   next_seq = scan.max_seq() + 1;
//
// Thread rules: one thread (the opener's), under the owner's lock; LoadIndex runs one or two
// reader threads of its own and joins them before it returns.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "disk/disk_tier.h"
#include "index/index.h"
#include "store/durable_tier.h"

namespace ecstore {

class RecoveryScan {
 public:
  // From this many rows on, LoadIndex reads the index from both ends at once.
  static constexpr uint64_t kBothEndsRows = 1 << 16;

  RecoveryScan(DiskTier* disk, Index* index, DurableTier::Owner* owner, bool read_only)
      : disk_(disk), index_(index), owner_(owner), read_only_(read_only) {}

  // Hands every index row to the owner; a row pointing at a missing segment is dropped.
  Status LoadIndex(const std::vector<uint32_t>& segments);
  // Indexes what `segment` holds past `from` (0 with `rebuild`: all of it).
  Status ScanTail(uint32_t segment, uint64_t from, bool rebuild);

  uint64_t max_seq() const { return max_seq_; }
  uint64_t corrupt() const { return corrupt_; }    // records failing checksums, bad headers
  bool tail_clean() const { return tail_clean_; }  // the last segment scanned ends whole

 private:
  DiskTier* const disk_;
  Index* const index_;
  DurableTier::Owner* const owner_;
  const bool read_only_;
  uint64_t max_seq_ = 0;
  uint64_t corrupt_ = 0;
  bool tail_clean_ = true;
  std::unordered_map<std::string, uint64_t> tomb_targets_;  // ns '\0' key -> highest target
};

}  // namespace ecstore
