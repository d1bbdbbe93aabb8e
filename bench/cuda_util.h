// What the GPU workloads share: a CUDA call's error ends the bench with its name.
// Thread rules: any thread.
#pragma once

#ifdef EC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "bench/common.h"

namespace ecstore::bench {

inline void MustCuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) Die(Status::IOError(cudaGetErrorString(err)), what);
}

}  // namespace ecstore::bench
#endif
