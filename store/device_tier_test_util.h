// A DeviceTier on host memory standing in for the GPU's, whose copies are memcpy (and fail
// when told): the device tier's eviction and requests (DeviceEvictor, DeviceFront) tested on
// any machine.
// Thread rules: Copy and DeviceOf from any thread; FailWith and PlaceOn from the test's.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "base/mutex.h"
#include "store/device_tier.h"

namespace ecstore::testing {

class HostDeviceTier : public DeviceTier {
 public:
  static std::unique_ptr<HostDeviceTier> Make(uint64_t bytes) {
    auto m = MemoryTier::Open(Tier::kDevice, NewHostPinnedBackend(), bytes, {});
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::unique_ptr<HostDeviceTier>(new HostDeviceTier(std::move(m).value()));
  }
  Status Copy(void* dst, const void* src, size_t bytes, cuda::Direction d) override {
    {
      MutexLock l(&mu_);
      if (!fail_.ok()) return fail_;
    }
    std::memcpy(dst, src, bytes);
    ++(d == cuda::Direction::kDeviceToHost   ? down
       : d == cuda::Direction::kHostToDevice ? up
                                             : across);
    return Status::Ok();
  }
  // Another GPU's memory, as DeviceOf tells it: [p, p+n) is on `device`. Memory not placed
  // is on this tier's GPU (0).
  void PlaceOn(const void* p, size_t n, int device) {
    MutexLock l(&mu_);
    placed_[static_cast<const uint8_t*>(p)] = {n, device};
  }
  int DeviceOf(const void* p) const override {
    MutexLock l(&mu_);
    auto it = placed_.upper_bound(static_cast<const uint8_t*>(p));
    if (it != placed_.begin()) {
      --it;
      if (static_cast<const uint8_t*>(p) < it->first + it->second.first) return it->second.second;
    }
    return device();
  }
  Status CopyToPeer(void* dst, int, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    ++peer;
    return Status::Ok();
  }
  Status CopyUpTo(void* dst, int, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    ++up_other;
    return Status::Ok();
  }
  void FailWith(Status st) {
    MutexLock l(&mu_);
    fail_ = std::move(st);
  }
  // Copies made: device->host, host->device, device->device; and into another GPU's
  // memory: by a peer copy, host->device.
  std::atomic<int> down{0}, up{0}, across{0}, peer{0}, up_other{0};

 private:
  explicit HostDeviceTier(std::unique_ptr<MemoryTier> m) : DeviceTier(0, std::move(m)) {}
  mutable Mutex mu_;
  Status fail_;
  std::map<const uint8_t*, std::pair<size_t, int>> placed_;  // start -> (bytes, device)
};

}  // namespace ecstore::testing
