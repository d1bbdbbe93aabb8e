// PUT_DEVICE, the client's half: a same-host client's CUDA memory, copied into the store by the
// server itself (server/device_puts.h says how).
//
// Through a put arena (net/put_arena.h) a saved encoder output crosses host memory twice;
// PUT_DEVICE sends the tensor's CUDA IPC handle instead, and the server copies with the GPU's
// copy engine straight into its pool or device tier. A server offers kFeaturePutDevice only
// where it sees a GPU; a client whose memory it cannot open puts through its arena.
//
//   // the client: the tensor written (its stream synchronized), not freed until this returns
//   EC_RETURN_IF_ERROR(client->PutFromDevice("qwen", mm_hash, meta, tensor_ptr, bytes));
//
// Thread rules: PutDeviceBody is a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/cuda.h"

namespace ecstore::net {

// A server keeps at most this many of a connection's allocations open, so a client keeps
// no more exported handles than that.
inline constexpr size_t kMaxDeviceImports = 32;

// The PUT_DEVICE body: the PUT head (ns, key, meta), then where the bytes are.
std::string PutDeviceBody(const std::string& head, const cuda::DeviceAllocation& a,
                          const std::string& handle, uint64_t offset, uint64_t size, uint8_t flags);

}  // namespace ecstore::net
