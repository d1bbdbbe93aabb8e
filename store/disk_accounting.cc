#include "store/disk_accounting.h"

namespace ecstore {

void DiskAccounting::Reset() {
  MutexLock l(&mu_);
  segment_live_.clear();
  record_bytes_ = 0;
  stats_ = {};
  stats_.tier = Tier::kDisk;
  corrupt_ = 0;
}

void DiskAccounting::Track(uint64_t bytes, const DiskLocation& loc) {
  Tally one;
  one.Add(bytes, loc);
  Track(loc.segment, one);
}

void DiskAccounting::Track(uint32_t segment, const Tally& records) {
  MutexLock l(&mu_);
  segment_live_[segment] += records.record_bytes;
  record_bytes_ += records.record_bytes;
  stats_.entries += records.entries;
  stats_.bytes += records.bytes;
}

void DiskAccounting::Untrack(uint64_t bytes, const DiskLocation& loc) {
  MutexLock l(&mu_);
  segment_live_[loc.segment] -= loc.record_bytes();
  record_bytes_ -= loc.record_bytes();
  --stats_.entries;
  stats_.bytes -= bytes;
}

void DiskAccounting::Moved(const DiskLocation& from, const DiskLocation& to) {
  MutexLock l(&mu_);
  segment_live_[from.segment] -= from.record_bytes();
  segment_live_[to.segment] += to.record_bytes();
}

void DiskAccounting::Compacted(uint32_t segment) {
  MutexLock l(&mu_);
  segment_live_.erase(segment);
  ++compactions_;
}

void DiskAccounting::Spilled() {
  MutexLock l(&mu_);
  ++stats_.spills;
}

void DiskAccounting::Hit() {
  MutexLock l(&mu_);
  ++stats_.hits;
}

void DiskAccounting::Corrupt(uint64_t records) {
  MutexLock l(&mu_);
  corrupt_ += records;
}

void DiskAccounting::Evicted(uint64_t entries) {
  MutexLock l(&mu_);
  stats_.evictions += entries;
}

bool DiskAccounting::OverQuota(uint64_t incoming) const {
  MutexLock l(&mu_);
  return record_bytes_ + incoming > quota_;
}

uint64_t DiskAccounting::live_bytes() const {
  MutexLock l(&mu_);
  return record_bytes_;
}

std::vector<SegmentUse> DiskAccounting::Uses(
    const std::vector<std::pair<uint32_t, uint64_t>>& sizes) const {
  std::vector<SegmentUse> uses;
  MutexLock l(&mu_);
  for (auto [seg, size] : sizes) {
    auto live = segment_live_.find(seg);
    uses.push_back({seg, size, live == segment_live_.end() ? 0 : live->second});
  }
  return uses;
}

void DiskAccounting::Fill(TierStats* disk, uint64_t* compactions, uint64_t* corrupt) const {
  MutexLock l(&mu_);
  *disk = stats_;
  disk->capacity = quota_;
  *compactions = compactions_;
  *corrupt = corrupt_;
}

}  // namespace ecstore
