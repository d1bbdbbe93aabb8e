// Device memory for GPU tests: cudaMalloc'd, freed at scope end, read back whole.
// Thread rules: one test's thread.
#pragma once

#ifdef EC_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cache/cache.h"

namespace ecstore::testing {

struct GpuBuffer {
  explicit GpuBuffer(uint64_t n) : bytes(n) { EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess); }
  ~GpuBuffer() { cudaFree(p); }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> h(bytes);
    EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  // A descriptor of it on device 0, ordered on `stream`.
  BufferDesc Desc(cudaStream_t stream = nullptr) const {
    return BufferDesc::Device(p, bytes, 0, reinterpret_cast<uintptr_t>(stream));
  }
  void* p = nullptr;
  uint64_t bytes;
};

}  // namespace ecstore::testing
#endif
