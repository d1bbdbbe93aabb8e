#include "store/memory_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/mutex.h"

namespace ecstore {

Result<std::unique_ptr<MemoryTier>> MemoryTier::Open(Tier tier,
                                                     std::unique_ptr<MemoryBackend> backend,
                                                     uint64_t bytes, const MemoryTierOptions& o) {
  if (!backend) return Status::InvalidArgument("Options::memory_backend returned no backend");
  auto region = backend->Map(bytes);
  if (!region.ok()) return region.status();
  if (!region->locked)
    spdlog::warn(
        "the {} ({} bytes) could not be locked in memory: RLIMIT_MEMLOCK is below its "
        "size, so it is not pinned and host<->device copies run at pageable speed. Raise the "
        "limit: LimitMEMLOCK=infinity (systemd), `ulimit -l unlimited`, or give the process "
        "CAP_IPC_LOCK",
        tier == Tier::kPool ? "pool" : "device pool", region->size);
  return std::unique_ptr<MemoryTier>(new MemoryTier(tier, std::move(backend), *region, o));
}

MemoryTier::MemoryTier(Tier tier, std::unique_ptr<MemoryBackend> backend,
                       const MemoryRegion& region, const MemoryTierOptions& o)
    : tier_(tier),
      opt_(o),
      backend_(std::move(backend)),
      region_(region),
      alloc_(region.size),
      policy_(NewEvictionPolicy(o.eviction_policy)) {
  counters_.tier = tier;
}

void MemoryTier::Insert(uint64_t id, const EntryRecord& rec) {
  // A pool's miss is a read from the tier below, not a recomputation (RefetchCost).
  policy_->Insert(id, rec.bytes, policy_->UsesCost() ? RefetchCost(rec.bytes) : 0,
                  EntryKeyHash(rec.ns, rec.key));
  ++entries_;
  bytes_ += rec.bytes;
}

void MemoryTier::Remove(uint64_t id, uint64_t bytes, const PoolBlock& b) {
  alloc_.Free(b);
  policy_->Remove(id);
  --entries_;
  bytes_ -= bytes;
}

void MemoryTier::ResetPolicy() {
  policy_ = NewEvictionPolicy(opt_.eviction_policy);
  counters_ = {};
  counters_.tier = tier_;
}

bool MemoryTier::NeedsEviction(uint64_t need_bytes) const {
  double used = static_cast<double>(alloc_.allocated_bytes());
  double cap = static_cast<double>(alloc_.capacity());
  return used > opt_.high_watermark * cap ||
         (need_bytes > 0 && alloc_.largest_free_extent() < need_bytes);
}

bool MemoryTier::EvictionDone(uint64_t need_bytes, uint64_t leaving) const {
  double used = static_cast<double>(alloc_.allocated_bytes() - leaving);
  double cap = static_cast<double>(alloc_.capacity());
  return used <= opt_.low_watermark * cap &&
         (need_bytes == 0 || alloc_.largest_free_extent() >= need_bytes);
}

TierStats MemoryTier::Stats() const {
  TierStats s = counters_;
  s.tier = tier_;
  s.entries = entries_;
  s.bytes = bytes_;
  s.capacity = alloc_.capacity();
  s.used = alloc_.allocated_bytes();
  return s;
}

Status MemoryTier::AddRegistrar(MemoryRegistrar* r) {
  MutexLock l(&registrars_mu_);
  if (closed_) return Status::Unavailable("store is closed");
  if (std::find(registered_.begin(), registered_.end(), r) != registered_.end())
    return Status::Ok();
  Status st = r->Register(region_);
  if (!st.ok())
    return st.WithContext(std::string("registering the ") +
                          (tier_ == Tier::kPool ? "pool" : "device pool") + " with " + r->Name());
  registered_.push_back(r);
  return Status::Ok();
}

void MemoryTier::RemoveRegistrar(MemoryRegistrar* r) {
  MutexLock l(&registrars_mu_);
  auto it = std::find(registered_.begin(), registered_.end(), r);
  if (it == registered_.end()) return;  // never added, or the store closed already
  r->Deregister(region_);
  registered_.erase(it);
}

void MemoryTier::Close() {
  MutexLock l(&registrars_mu_);
  if (closed_) return;
  closed_ = true;
  for (MemoryRegistrar* r : registered_) r->Deregister(region_);
  registered_.clear();
  backend_->Unmap(region_);
  region_ = {};
}

}  // namespace ecstore
