// A DeviceTier on host memory standing in for the GPU's, whose copies are memcpy (and fail
// when told): the device tier's eviction and requests (DeviceEvictor, DeviceFront) tested on
// any machine.
// Thread rules: Copy from any thread; FailWith from the test's.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

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
      std::lock_guard<std::mutex> l(mu_);
      if (!fail_.ok()) return fail_;
    }
    std::memcpy(dst, src, bytes);
    ++(d == cuda::Direction::kDeviceToHost   ? down
       : d == cuda::Direction::kHostToDevice ? up
                                             : across);
    return Status::Ok();
  }
  void FailWith(Status st) {
    std::lock_guard<std::mutex> l(mu_);
    fail_ = std::move(st);
  }
  // Copies made: device->host, host->device, device->device.
  std::atomic<int> down{0}, up{0}, across{0};

 private:
  explicit HostDeviceTier(std::unique_ptr<MemoryTier> m) : DeviceTier(0, std::move(m)) {}
  std::mutex mu_;
  Status fail_;
};

}  // namespace ecstore::testing
