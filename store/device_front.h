// DeviceFront: the store's requests in device memory -- PutFromDevice, GetToDevice,
// AcquireOnDevice -- and what serves them: the GPU pool (DeviceTier), its DeviceEvictor and
// the host pool's one CUDA registration (so every host<->device copy runs at pinned speed).
// StoreImpl holds one only with a device tier (Options::device_pool_bytes > 0); the host
// side it relies on -- a lease on an entry's host copy, promoted from disk if need be, and
// installing a new entry -- comes through its Host.
//
//   auto front = DeviceFront::Open(device, bytes, tier_options, host_pool);  // before the keydir
//   front->Attach(keydir, host_evictor, host, put_wait);                     // then Start()
//
// Private to store/.
// Thread rules: thread-safe after Attach, as Store's methods are. Open, Attach, Start, Stop
// and DemoteAll from the store's owner (Init and Close) only. It takes no lock itself: its
// leases are the keydir's calls, its blocks the DeviceEvictor's.
#pragma once

#include <chrono>
#include <memory>
#include <string_view>

#include "base/memory_backend.h"
#include "cuda/peer.h"
#include "store/device_tier.h"
#include "store/keydir.h"

namespace ecstore {

class DeviceFront {
 public:
  class Host {
   public:
    virtual ~Host() = default;
    // A lease on the entry's host copy, promoting it from disk if it has none.
    virtual Result<ReadLease> Acquire(std::string_view ns, std::string_view key) = 0;
    // Inserts a new entry whose bytes are complete in its block (Keydir::InstallLocked).
    virtual Status Install(Keydir::FreshEntry f) = 0;
  };

  // The GPU pool on `device`, and `host_pool` registered with CUDA (a failed registration is
  // logged: the copies then run at pageable speed).
  static Result<std::unique_ptr<DeviceFront>> Open(int device, uint64_t bytes,
                                                   const MemoryTierOptions& o,
                                                   MemoryTier* host_pool);
  // Over a device tier made elsewhere (store/device_tier_test_util.h's, on host memory),
  // without the host pool's CUDA registration; cross-GPU gets routed by `routes`.
  static std::unique_ptr<DeviceFront> Over(
      std::unique_ptr<DeviceTier> dev, MemoryTier* host_pool,
      cuda::PeerRoutes* routes = &cuda::PeerRoutes::Process()) {
    return std::unique_ptr<DeviceFront>(new DeviceFront(std::move(dev), host_pool, routes));
  }
  ~DeviceFront();
  MemoryTier* memory() const { return dev_->memory(); }
  void Attach(Keydir* kd, HostEvictor* host_ev, Host* host, std::chrono::milliseconds put_wait);
  void Start() { ev_->Start(); }
  void Stop() { ev_->Stop(); }
  // ev_'s keydir is kd_ (Attach), which the analysis cannot see through the pointer.
  void NudgeLocked() REQUIRES(kd_->mu) NO_THREAD_SAFETY_ANALYSIS { ev_->NudgeLocked(); }
  void Nudge() EXCLUDES(kd_->mu) { ev_->Nudge(); }
  // Gives every device-only entry a host copy (Flush and Close: the host copy is spilled).
  Status DemoteAll() EXCLUDES(kd_->mu) { return ev_->DemoteAll(); }
  Status CopyToHost(const EntryPtr& e) EXCLUDES(kd_->mu) { return ev_->CopyToHost(e); }
  uint64_t Errors() const EXCLUDES(kd_->mu) { return ev_->Errors(); }  // failed demotions
  Status Health() const EXCLUDES(kd_->mu) { return ev_->Health(); }
  // One copy on a pooled stream (a device-only entry read into host memory, say).
  Status Copy(void* dst, const void* src, size_t n, cuda::Direction d) {
    return dev_->Copy(dst, src, n, d);
  }

  // Store's device methods; keys, meta and writability checked by the caller. A get into
  // another GPU's memory than the tier's is a peer copy from the device copy where the pair
  // can reach each other, else a host->device copy of the entry's host copy (made if need
  // be); cuda::PeerRoutes counts which.
  Status PutFromDevice(std::string_view ns, std::string_view key, const TensorMeta& meta,
                       const void* src, uint64_t bytes) EXCLUDES(kd_->mu);
  Result<EntryInfo> GetToDevice(std::string_view ns, std::string_view key, void* dst,
                                uint64_t dst_bytes) EXCLUDES(kd_->mu);
  Result<ReadLease> AcquireOnDevice(std::string_view ns, std::string_view key) EXCLUDES(kd_->mu);

 private:
  DeviceFront(std::unique_ptr<DeviceTier> dev, MemoryTier* host_pool, cuda::PeerRoutes* routes)
      : dev_(std::move(dev)), host_pool_(host_pool), routes_(routes) {}
  // A leased copy of an entry into dst, on dst_device (the tier's or another GPU).
  Status CopyOut(std::string_view ns, std::string_view key, const ReadLease& lease, void* dst,
                 int dst_device) EXCLUDES(kd_->mu);

  std::unique_ptr<DeviceTier> dev_;
  MemoryTier* const host_pool_;
  cuda::PeerRoutes* const routes_;
  std::unique_ptr<MemoryRegistrar> cuda_host_;  // registers host_pool_ with CUDA
  Keydir* kd_ = nullptr;                        // set by Attach
  Host* host_ = nullptr;
  std::unique_ptr<DeviceEvictor> ev_;
};

}  // namespace ecstore
