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
  std::unique_ptr<DeviceFront> f(
      new DeviceFront(std::move(dev).value(), host_pool, &cuda::PeerRoutes::Process()));
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
  PoolBlock blk;
  EC_RETURN_IF_ERROR(ev_->Allocate(bytes, true, &blk));
  uint8_t* dst = dev_->memory()->Ptr(blk);
  Status st = dev_->Copy(dst, src, bytes, cuda::Direction::kDeviceToDevice);
  if (!st.ok()) {
    ev_->Free(blk);
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
  auto resident = kd_->LeaseInMemory(ns, key, dst_bytes);
  if (!resident.ok()) return resident.status();
  std::optional<ReadLease> lease = std::move(resident).value();
  if (!lease) {  // on disk only: into the host pool first (io_uring, verified)
    auto host = host_->Acquire(ns, key);
    if (!host.ok()) return host.status();
    lease.emplace(std::move(host).value());
  }
  const int dst_device = dev_->DeviceOf(dst);
  EC_RETURN_IF_ERROR(CopyOut(ns, key, *lease, dst, dst_device < 0 ? dev_->device() : dst_device));
  return lease->info();
}

Status DeviceFront::CopyOut(std::string_view ns, std::string_view key, const ReadLease& lease,
                            void* dst, int dst_device) {
  const bool on_device = lease.memory_kind() == MemoryKind::kDevice;
  if (dst_device == dev_->device())
    return dev_->Copy(
        dst, lease.data(), lease.size(),
        on_device ? cuda::Direction::kDeviceToDevice : cuda::Direction::kHostToDevice);
  if (!on_device) return dev_->CopyUpTo(dst, dst_device, lease.data(), lease.size());
  const cuda::CrossGpu way = routes_->Route(dst_device, dev_->device());
  if (way == cuda::CrossGpu::kPeer) {
    EC_RETURN_IF_ERROR(dev_->CopyToPeer(dst, dst_device, lease.data(), lease.size()));
  } else {  // the host copy (made now for a device-only entry), up to the other GPU
    auto host = host_->Acquire(ns, key);
    if (!host.ok())
      return host.status().WithContext("the host path to GPU " + std::to_string(dst_device));
    if (host->size() != lease.size() || host->info().created_us != lease.info().created_us)
      return Status::Busy("'" + std::string(key) +
                          "' was replaced while being read; read it again");
    EC_RETURN_IF_ERROR(dev_->CopyUpTo(dst, dst_device, host->data(), host->size()));
  }
  routes_->Count(way, lease.size());
  return Status::Ok();
}

Result<ReadLease> DeviceFront::AcquireOnDevice(std::string_view ns, std::string_view key) {
  for (bool first = true;; first = false) {
    auto on_device = kd_->LeaseDeviceCopy(ns, key, !first);
    if (!on_device.ok()) return on_device.status();
    if (*on_device) return std::move(**on_device);
    auto host = host_->Acquire(ns, key);  // a host lease pins the entry while it is copied up
    if (!host.ok()) return host.status();
    auto e = kd_->Find(ns, key);
    if (!e.ok()) return e.status();
    EC_RETURN_IF_ERROR(ev_->Promote(*e, *host));
  }
}

}  // namespace ecstore
