#include "store/device_front.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <string>

namespace ecstore {

Result<std::unique_ptr<DeviceFront>> DeviceFront::Open(int device, uint64_t bytes,
                                                       const MemoryTierOptions& o,
                                                       MemoryTier* host_pool) {
  auto dev = DeviceTier::Open(device, bytes, o);
  if (!dev.ok()) return dev.status();
  std::unique_ptr<DeviceFront> f(new DeviceFront(std::move(dev).value(), host_pool));
  f->cuda_host_ = cuda::NewHostRegistrar();
  Status st = host_pool->AddRegistrar(f->cuda_host_.get());
  if (!st.ok()) spdlog::warn("{}; host<->device copies run at pageable speed", st.ToString());
  return f;
}

// The registration goes before the registrar does (the host pool may outlive this).
DeviceFront::~DeviceFront() { host_pool_->RemoveRegistrar(cuda_host_.get()); }

void DeviceFront::Attach(Keydir* kd, HostEvictor* host_ev, Host* host,
                         std::chrono::milliseconds put_wait) {
  kd_ = kd;
  host_ = host;
  ev_ = std::make_unique<DeviceEvictor>(kd, dev_.get(), host_ev, put_wait);
}

Status DeviceFront::PutFromDevice(std::string_view ns, std::string_view key, const TensorMeta& meta,
                                  const void* src, uint64_t bytes) {
  {
    MutexLock l(&kd_->mu);
    if (kd_->device().RoundUp(bytes) > kd_->device().capacity())
      return Status::NoSpace("entry of " + std::to_string(bytes) +
                             " bytes is larger than the whole device pool; raise "
                             "Options::device_pool_bytes");
  }
  PoolBlock blk;
  EC_RETURN_IF_ERROR(ev_->Allocate(bytes, true, &blk));
  uint8_t* dst = dev_->memory()->Ptr(blk);
  Status st = dev_->Copy(dst, src, bytes, cuda::Direction::kDeviceToDevice);
  if (!st.ok()) {
    MutexLock l(&kd_->mu);
    kd_->device().Free(blk);
    return st.WithContext("copying the entry into the device pool");
  }
  // Hashed when first spilled (device_tier.h says why).
  return host_->Install({.ns = std::string(ns),
                         .key = std::string(key),
                         .meta = meta,
                         .bytes = bytes,
                         .checksummed = false,
                         .tier = Tier::kDevice,
                         .block = blk});
}

Result<EntryInfo> DeviceFront::GetToDevice(std::string_view ns, std::string_view key, void* dst,
                                           uint64_t dst_bytes) {
  std::optional<ReadLease> lease;
  {
    MutexLock l(&kd_->mu);
    auto found = kd_->FindLocked(ns, key, true);
    if (!found.ok()) return found.status();
    const EntryPtr& e = *found;
    if (dst_bytes < e->bytes)
      return Status::InvalidArgument("destination holds " + std::to_string(dst_bytes) +
                                     " bytes but entry '" + e->key + "' has " +
                                     std::to_string(e->bytes) + "; Lookup the size first");
    if (e->device)
      lease.emplace(kd_->LeaseLocked(e, true, MemoryKind::kDevice));
    else if (e->pool)
      lease.emplace(kd_->LeaseLocked(e, true));
  }
  if (!lease) {  // on disk only: into the host pool first (io_uring, verified)
    auto host = host_->Acquire(ns, key);
    if (!host.ok()) return host.status();
    lease.emplace(std::move(host).value());
  }
  const bool on_device = lease->memory_kind() == MemoryKind::kDevice;
  EC_RETURN_IF_ERROR(
      dev_->Copy(dst, lease->data(), lease->size(),
                 on_device ? cuda::Direction::kDeviceToDevice : cuda::Direction::kHostToDevice));
  return lease->info();
}

Result<ReadLease> DeviceFront::AcquireOnDevice(std::string_view ns, std::string_view key) {
  for (bool first = true;; first = false) {
    {
      MutexLock l(&kd_->mu);
      auto found = kd_->FindLocked(ns, key, first);
      if (!found.ok()) return found.status();
      if ((*found)->device)
        return kd_->LeaseLocked(*found, first, MemoryKind::kDevice,
                                first ? std::nullopt : std::optional<Tier>(Tier::kPool));
    }
    auto host = host_->Acquire(ns, key);  // a host lease pins the entry while it is copied up
    if (!host.ok()) return host.status();
    EntryPtr e;
    {
      MutexLock l(&kd_->mu);
      auto found = kd_->FindLocked(ns, key, false);
      if (!found.ok()) return found.status();
      e = *found;
    }
    EC_RETURN_IF_ERROR(ev_->Promote(e, *host));
  }
}

}  // namespace ecstore
