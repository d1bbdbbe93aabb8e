#include "store/device_tier.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <unordered_set>

#include "base/mutex.h"
#include "disk/record.h"

namespace ecstore {
namespace {
constexpr uint64_t kDemoteBatchBytes = 256ull << 20;
}  // namespace

Result<std::unique_ptr<DeviceTier>> DeviceTier::Open(int device, uint64_t bytes,
                                                     const MemoryTierOptions& o) {
  std::string why;
  const int n = cuda::DeviceCount(&why);
  if (n == 0)
    return Status::Unavailable("a device tier needs a GPU: " + why +
                               "; set Options::device_pool_bytes to 0 to run without one");
  if (device < 0 || device >= n)
    return Status::InvalidArgument("GPU " + std::to_string(device) + " does not exist (" +
                                   std::to_string(n) + " visible); choose 0.." +
                                   std::to_string(n - 1));
  auto m = MemoryTier::Open(Tier::kDevice, cuda::NewDeviceBackend(device), bytes, o);
  if (!m.ok()) return m.status();
  std::unique_ptr<DeviceTier> t(new DeviceTier(device, std::move(m).value()));
  t->only_gpu_ = n == 1;
  return t;
}

Status DeviceTier::OnStream(const std::function<Status(cuda::CopyStream&)>& op) {
  std::unique_ptr<cuda::CopyStream> s;
  {
    MutexLock l(&streams_mu_);
    if (!free_streams_.empty()) {
      s = std::move(free_streams_.back());
      free_streams_.pop_back();
    }
  }
  if (!s) {
    auto made = cuda::CopyStream::Create(device_);
    if (!made.ok()) return made.status();
    s = std::move(made).value();
  }
  Status st = op(*s);
  MutexLock l(&streams_mu_);
  free_streams_.push_back(std::move(s));
  return st;
}

Status DeviceTier::Copy(void* dst, const void* src, size_t bytes, cuda::Direction d) {
  return OnStream([&](cuda::CopyStream& s) { return s.Copy(dst, src, bytes, d); });
}

int DeviceTier::DeviceOf(const void* p) const {
  if (only_gpu_) return device_;  // no pointer query on a get where there is no other GPU
  int device = -1;
  return cuda::IsDevicePointer(p, &device) ? device : -1;
}

Status DeviceTier::CopyToPeer(void* dst, int dst_device, const void* src, size_t bytes) {
  return OnStream([&](cuda::CopyStream& s) {
    EC_RETURN_IF_ERROR(
        cuda::EnqueuePeerCopy(dst, dst_device, src, device_, bytes, device_, s.handle()));
    return cuda::WaitForStream(device_, s.handle());
  });
}

Status DeviceTier::CopyUpTo(void* dst, int dst_device, const void* host_src, size_t bytes) {
  // Rare (a pair without peer access): a stream made for the copy, not a pool per GPU.
  auto s = cuda::CopyStream::Create(dst_device);
  if (!s.ok()) return s.status();
  return (*s)->Copy(dst, host_src, bytes, cuda::Direction::kHostToDevice);
}

bool DeviceEvictor::EvictSomeLocked() {
  bool freed = false;
  std::vector<EntryPtr> batch;
  uint64_t batch_bytes = 0;
  for (uint64_t id : tier().Coldest(256)) {
    Entry* e = reinterpret_cast<Entry*>(id);
    if (e->leases > 0 || e->loading || e->erased) continue;
    if (e->pool) {  // a host copy exists: leaving the device costs no copy
      kd_->FreeDeviceLocked(e);
      ++tier().counters().evictions;
      freed = true;
    } else {
      kd_->PinLocked(e);
      batch.push_back(EntryPtr(e));
      batch_bytes += e->device->length;
    }
    // A waiting put's block counts as made once that many bytes are leaving (the next pass
    // looks again if they were not contiguous): the free extent grows only after the copies,
    // so a batch that waited for it demoted the whole batch limit for one block.
    const uint64_t need = batch_bytes >= need_bytes_ ? 0 : need_bytes_;
    if (tier().EvictionDone(need, batch_bytes) || batch_bytes >= kDemoteBatchBytes) break;
  }
  if (batch.empty()) return freed;
  kd_->Unlock();  // never across a copy
  Status first_error;
  size_t moved = 0;
  for (const EntryPtr& e : batch) {
    Status st = Demote(e, true);
    if (st.ok())
      ++moved;
    else if (first_error.ok())
      first_error = st;
  }
  kd_->Relock();
  NoteMoveResultLocked(first_error, batch.size() - moved);
  return freed || moved > 0;
}

Status DeviceEvictor::Demote(const EntryPtr& e, bool drop) {
  PoolBlock hb;
  Status st = host_->Allocate(e->bytes, true, &hb);
  uint8_t* host = nullptr;
  const uint8_t* src = nullptr;
  if (st.ok()) {
    {
      Keydir::Lock l(kd_);
      host = kd_->pool().Ptr(hb);
      src = kd_->device().Ptr(*e->device);
    }
    st = dev_->Copy(host, src, e->bytes, cuda::Direction::kDeviceToHost);
    if (st.ok()) std::memset(host + e->bytes, 0, hb.length - e->bytes);  // spills write blocks
  }
  bool install;
  {
    Keydir::Lock l(kd_);
    install = st.ok() && !e->erased && !e->pool;
    if (install) {
      kd_->AddCopyLocked(e.get(), Tier::kPool, hb);
      ++tier().counters().spills;  // device -> host
      if (drop && e->leases == 1) {
        kd_->FreeDeviceLocked(e.get());
        ++tier().counters().evictions;
      }
    } else if (host) {
      kd_->pool().Free(hb);
      kd_->NotifySpace();
    }
    kd_->UnpinLocked(e.get());
  }
  if (install) host_->QueueWriteBack(e);  // and nudges
  return st;
}

Status DeviceEvictor::CopyToHost(const EntryPtr& e) {
  {
    Keydir::Lock l(kd_);
    if (e->erased || e->pool || !e->device) return Status::Ok();
    kd_->PinLocked(e.get());
  }
  return Demote(e, false);
}

Status DeviceEvictor::Promote(const EntryPtr& e, const ReadLease& host) {
  PoolBlock blk;
  // Without waiting: the entry is readable from the host pool now, and a reader should not
  // stall for the device pool's leases to end (Busy: the caller copies from the host).
  EC_RETURN_IF_ERROR(Allocate(host.size(), false, &blk));
  Status st = dev_->Copy(tier_->Ptr(blk), host.data(), host.size(), cuda::Direction::kHostToDevice);
  Keydir::Lock l(kd_);
  if (st.ok() && !e->erased && !e->device && e->pool && host.data() == kd_->pool().Ptr(*e->pool)) {
    kd_->AddCopyLocked(e.get(), Tier::kDevice, blk);
    ++tier().counters().promotions;
    return Status::Ok();
  }
  tier().Free(blk);
  kd_->NotifySpace();
  return st;
}

// Copies to the host pool every entry whose only copy is on the device, so that the host
// evictor makes it durable. An entry already on disk is durable as it is: demoting it made
// a host copy that the host evictor, finding it clean, dropped at once -- and the next pass
// demoted it again, for ever (a daemon's stop never ended). Each entry goes once per call.
Status DeviceEvictor::DemoteAll() {
  std::unordered_set<const Entry*> demoted;
  for (;;) {
    std::vector<EntryPtr> batch;
    {
      Keydir::Lock l(kd_);
      if (kd_->closed()) return Status::Unavailable("store is closed");
      kd_->ForEachLocked([&](const EntryPtr& e) {
        if (e->device && !e->pool && !e->disk && !e->erased && demoted.insert(e.get()).second)
          batch.push_back(e);
        return batch.size() < 64;
      });
      for (const EntryPtr& e : batch) kd_->PinLocked(e.get());
    }
    if (batch.empty()) return Status::Ok();
    Status first_error;
    for (const EntryPtr& e : batch) {  // every pinned entry is demoted (and unpinned)
      Status st = Demote(e, false);
      if (!st.ok() && first_error.ok()) first_error = st;
    }
    EC_RETURN_IF_ERROR(first_error);
  }
}

}  // namespace ecstore
