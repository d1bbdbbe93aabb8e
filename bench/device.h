// The `device` workload (GPU machine): the device tier's copies against the same copies done
// the simplest way in the same run -- cudaMemcpy between a pinned host buffer and device
// memory (host<->device), and a raw device-to-device copy -- for the same entry sizes.
// Thread rules: RunDevice from one thread; it starts and stops its own server process.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/remote.h"  // Sample

namespace ecstore::bench {

struct DeviceRow {
  std::string workload, system, note;
  Sample s;
};

// Rows to report, or one row saying why it did not run (no GPU, a build without CUDA).
std::vector<DeviceRow> RunDevice(const std::vector<std::span<const uint8_t>>& values, int rounds,
                                 const std::string& dir);

}  // namespace ecstore::bench
