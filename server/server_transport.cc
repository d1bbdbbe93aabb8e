#include "server/server_transport.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "cuda/cuda.h"

namespace ecstore::net {

Result<std::unique_ptr<ShmGets>> ShmGets::Listen(Store* store, const std::string& path,
                                                 bool group_access) {
  if (store->pool_region().shm_fd < 0)
    return Status::InvalidArgument(
        "shared-memory serving needs a store whose Options::memory_backend is "
        "NewSharedHostBackend");
  auto fd = ListenUnix(path, group_access ? 0660 : 0600);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<ShmGets>(new ShmGets(store->pool_region(), path, std::move(fd).value()));
}

void ShmGets::Stop() {
  if (fd_.valid()) ::unlink(path_.c_str());
}

Result<std::unique_ptr<RdmaGets>> RdmaGets::Listen(Store* store, const HostPort& at) {
  auto l = rdma::RdmaListener::Start(at);
  if (!l.ok()) return l.status();
  EC_RETURN_IF_ERROR(store->AddRegistrar(l->get()));  // the pool's one memory region
  std::string addr = at.host + ":" + std::to_string((*l)->port());
  std::unique_ptr<RdmaGets> t(new RdmaGets(store, std::move(l).value(), std::move(addr)));
  t->RegisterDevicePool();
  return t;
}

// GPUDirect RDMA: the device pool registered with the NIC once, so RDMA reads of device
// entries take their bytes from GPU memory. Where that cannot be done the reason is logged
// and those reads are staged through the host pool (GET_RDMA leases the host copy).
void RdmaGets::RegisterDevicePool() {
  const MemoryRegion dev = store_->device_region();
  if (!dev.base) return;
  auto fd = cuda::DmaBufFd(dev.base, dev.size);
  Status st = listener_->RegisterDevice(dev, fd.ok() ? *fd : -1);
  if (fd.ok()) ::close(*fd);  // the memory region holds its own reference
  if (!st.ok())
    spdlog::warn(
        "GPUDirect RDMA unavailable ({}{}); remote reads of device entries go "
        "through the host pool",
        fd.ok() ? "" : fd.status().message() + "; ", st.message());
}

// An entry in the device tier is read from GPU memory when the NIC has the device pool
// registered; otherwise its host copy (made now if it has none) is leased.
Result<ReadLease> RdmaGets::Acquire(Store* store, std::string_view ns, std::string_view key) const {
  if (listener_->device_rkey()) {
    // The server's own look, not its client's: not counted as a lookup.
    auto info = store->Lookup(ns, key, ReadOptions{false});
    if (info.ok() && info->tiers.has(Tier::kDevice)) return store->AcquireOnDevice(ns, key);
  }
  return store->Acquire(ns, key);
}

void RdmaGets::Locate(const ReadLease& lease, BodyWriter* w) const {
  w->U64(reinterpret_cast<uint64_t>(lease.data()));  // the address inside the registration
  w->U32(lease.memory_kind() == MemoryKind::kDevice ? listener_->device_rkey() : listener_->rkey());
}

void RdmaGets::Stop() {
  store_->RemoveRegistrar(listener_.get());  // before the listener (and its PD) goes
}

std::unique_ptr<DeviceIpcGets> DeviceIpcGets::Export(Store* store) {
  const MemoryRegion dev = store->device_region();
  if (!dev.base) return nullptr;
  auto h = cuda::ExportIpcHandle(dev.base);
  if (!h.ok()) {
    spdlog::warn("the device pool cannot be shared with other processes: {}",
                 h.status().ToString());
    return nullptr;
  }
  return std::unique_ptr<DeviceIpcGets>(new DeviceIpcGets(dev, std::move(h).value()));
}

std::string DeviceIpcGets::PoolBody(int device) const {
  BodyWriter w;
  w.U32(static_cast<uint32_t>(device));
  w.U64(device_.size);
  w.Str(handle_);
  return w.data();
}

Status DeviceIpcGets::NoPool() {
  return Status::InvalidArgument(
      "this server has no device pool to share (serve with --device-pool-size, on a CUDA build "
      "with a GPU; where it has one, its log says why it cannot be exported)");
}

}  // namespace ecstore::net
