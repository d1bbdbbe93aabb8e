// DiskAccounting: what the disk tier holds, as its quota and compaction choose by -- the
// record bytes still referenced in each segment file, the live total against the quota, and
// the tier's counters (entries, payload bytes, spills, hits, evictions, compactions, corrupt
// records dropped). The DurableTier owns one and tells it every record it adopts, moves or
// drops; the compaction picker reads each segment's live bytes from it.
//
//   DiskAccounting acct(quota);
//   acct.Track(rec.bytes, loc);           // a record now referenced (recovery, spill)
//   if (acct.OverQuota(incoming)) ...     // the owner evicts until it is not
//   acct.Moved(from, to);                 // compaction moved a record
//   acct.Compacted(seg);                  // the segment file is gone
//
// Thread rules: thread-safe; mu_ is a leaf (taken inside the store's lock, never around
// another call).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "base/mutex.h"
#include "cache/cache.h"
#include "disk/record.h"
#include "store/compaction_picker.h"

namespace ecstore {

class DiskAccounting {
 public:
  explicit DiskAccounting(uint64_t quota_bytes) : quota_(quota_bytes) { Reset(); }

  // Records of one segment counted together (recovery counts each segment's once).
  struct Tally {
    uint64_t entries = 0, bytes = 0, record_bytes = 0;
    void Add(uint64_t entry_bytes, const DiskLocation& loc) {
      ++entries, bytes += entry_bytes, record_bytes += loc.record_bytes();
    }
  };

  void Reset() EXCLUDES(mu_);  // recovery starts over
  // A record referenced by the keydir (bytes: the entry's raw payload), and no longer.
  void Track(uint64_t bytes, const DiskLocation& loc) EXCLUDES(mu_);
  void Untrack(uint64_t bytes, const DiskLocation& loc) EXCLUDES(mu_);
  void Track(uint32_t segment, const Tally& records) EXCLUDES(mu_);
  void Moved(const DiskLocation& from, const DiskLocation& to) EXCLUDES(mu_);
  void Compacted(uint32_t segment) EXCLUDES(mu_);  // its file deleted
  void Spilled() EXCLUDES(mu_);
  void Hit() EXCLUDES(mu_);                      // a read served from disk
  void Corrupt(uint64_t records) EXCLUDES(mu_);  // corrupt records dropped
  void Evicted(uint64_t entries) EXCLUDES(mu_);  // dropped for the quota

  bool OverQuota(uint64_t incoming) const EXCLUDES(mu_);
  uint64_t live_bytes() const EXCLUDES(mu_);  // record bytes referenced, all segments
  // Each segment's live bytes beside its size (as given), for the compaction picker.
  std::vector<SegmentUse> Uses(const std::vector<std::pair<uint32_t, uint64_t>>& sizes) const
      EXCLUDES(mu_);
  // The counters; disk->capacity is the quota, disk->used is left to the caller.
  void Fill(TierStats* disk, uint64_t* compactions, uint64_t* corrupt) const EXCLUDES(mu_);

 private:
  const uint64_t quota_;
  mutable Mutex mu_;
  std::map<uint32_t, uint64_t> segment_live_ GUARDED_BY(mu_);  // record bytes referenced
  uint64_t record_bytes_ GUARDED_BY(mu_) = 0;                  // of live records
  TierStats stats_ GUARDED_BY(mu_);
  uint64_t compactions_ GUARDED_BY(mu_) = 0;
  uint64_t corrupt_ GUARDED_BY(mu_) = 0;
};

}  // namespace ecstore
