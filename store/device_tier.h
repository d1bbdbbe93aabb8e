// DeviceTier: the GPU pool above the host pool (Options::device_pool_bytes > 0). Its memory
// is one cudaMalloc at Open (cuda::NewDeviceBackend), carved by the same allocator as the
// host pool (a MemoryTier). Entries Put from device memory land here with a device-to-device
// copy; its DeviceEvictor demotes the coldest to the host pool over a CUDA stream (the
// evictor's thread waits on an event, never a caller's), where they are checksummed and,
// when the host pool needs room, spilled to disk as today.
// Checksums: an entry put from device memory is hashed (xxh3, on its pinned host copy) when
// it is first spilled to disk: there the disk, at 1-2 GB/s, sets the pace, where hashing at
// demotion (~10-15 GB/s on one core) would hold a 54 GB/s PCIe copy to a fifth. A GPU hash
// would cost a kernel per Put on the GPU the encoder is using, for memory that no disk can
// corrupt; the disk tier, which can, always gets the checksum first.
// Thread rules: thread-safe. Copy() takes a stream from a small pool (one per concurrent
// caller), so copies of different callers overlap on the device. A subclass may copy another
// way (store/device_tier_test.cc: host memory standing in for the GPU's, memcpy for CUDA).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "base/mutex.h"
#include "cuda/cuda.h"
#include "store/evictor.h"

namespace ecstore {

class DeviceTier {
 public:
  static Result<std::unique_ptr<DeviceTier>> Open(int device, uint64_t bytes,
                                                  const MemoryTierOptions& o);
  virtual ~DeviceTier() = default;
  MemoryTier* memory() const { return memory_.get(); }
  int device() const { return device_; }
  // One copy, on a pooled stream of this device; returns once it is complete.
  virtual Status Copy(void* dst, const void* src, size_t bytes, cuda::Direction d);
  // The GPU whose memory `p` is (-1: not device memory).
  virtual int DeviceOf(const void* p) const;
  // Into another GPU's memory, complete on return: from this tier's memory by a peer copy
  // (once cuda::PeerRoutes has enabled the pair), on a pooled stream of this device; from
  // host memory, on a stream of dst_device's own.
  virtual Status CopyToPeer(void* dst, int dst_device, const void* src, size_t bytes);
  virtual Status CopyUpTo(void* dst, int dst_device, const void* host_src, size_t bytes);

 protected:
  DeviceTier(int device, std::unique_ptr<MemoryTier> m) : device_(device), memory_(std::move(m)) {}

 private:
  // op on a pooled stream of this device, then the stream given back.
  Status OnStream(const std::function<Status(cuda::CopyStream&)>& op);

  const int device_;
  bool only_gpu_ = false;  // the one GPU this process sees (set by Open)
  std::unique_ptr<MemoryTier> memory_;
  Mutex streams_mu_;  // a leaf: nothing is taken under it
  std::vector<std::unique_ptr<cuda::CopyStream>> free_streams_ GUARDED_BY(streams_mu_);
};

// Keeps the device pool below its high watermark by demoting to the host pool: an entry
// that already has a host copy just leaves the device; the others are copied device->host
// into a host block (waiting for the host evictor when the host pool is full), checksummed,
// and then leave the device.
class DeviceEvictor : public Evictor {
 public:
  DeviceEvictor(Keydir* kd, DeviceTier* tier, HostEvictor* host, std::chrono::milliseconds put_wait)
      : Evictor(kd, tier->memory(), put_wait), dev_(tier), host_(host) {}
  // Gives every device-only entry a host copy (Flush and Close: the host copy is what is
  // spilled). The device copies stay.
  Status DemoteAll() EXCLUDES(kd_->mu);
  // Gives a device-only entry a host copy (a host read of it); Ok also when it has changed
  // meanwhile (the caller looks again).
  Status CopyToHost(const EntryPtr& e) EXCLUDES(kd_->mu);
  // Gives an entry a device copy from the host copy `host` leases (host->device); Ok also
  // when the entry changed meanwhile (the caller looks again).
  Status Promote(const EntryPtr& e, const ReadLease& host) EXCLUDES(kd_->mu);

 private:
  bool EvictSomeLocked() override REQUIRES(kd_->mu);
  // Copies a pinned device entry into a new host block and installs it there; with `drop`,
  // the device copy then goes (unless someone else holds a lease). Unpins the entry.
  Status Demote(const EntryPtr& e, bool drop) EXCLUDES(kd_->mu);

  DeviceTier* const dev_;
  HostEvictor* const host_;
};

}  // namespace ecstore
