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
// PUT_DEVICE_MANY (a server offering kFeaturePutDeviceMany) carries a step's items in one
// request: the server enqueues every copy on one stream, waits once and commits each, so a
// step of many small items costs one round trip and one wait, not one of each per item.
//
// Thread rules: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/tensor_meta.h"
#include "cuda/cuda.h"

namespace ecstore::net {

// A server keeps at most this many of a connection's allocations open, so a client keeps
// no more exported handles than that.
inline constexpr size_t kMaxDeviceImports = 32;

// The PUT_DEVICE body: the PUT head (ns, key, meta), then where the bytes are.
std::string PutDeviceBody(const std::string& head, const cuda::DeviceAllocation& a,
                          const std::string& handle, uint64_t offset, uint64_t size, uint8_t flags);

class BodyReader;

// One item of a PUT_DEVICE_MANY: its key and meta, and where its bytes lie in the client's
// device memory.
struct DevicePutItem {
  std::string key;
  TensorMeta meta;
  std::string bus_id, handle;
  uint64_t buffer_id = 0, offset = 0, size = 0;
};
// At most this many items in one PUT_DEVICE_MANY (a client sends more in several).
inline constexpr size_t kMaxDevicePutBatch = 128;
struct DevicePutBatch {
  std::string ns;
  uint8_t flags = 0;
  std::vector<DevicePutItem> items;
};
std::string PutDeviceManyBody(const DevicePutBatch& batch);
// InvalidArgument where malformed (the connection is then closed); keys and metas are
// checked by the store, item by item.
Result<DevicePutBatch> ParsePutDeviceManyBody(BodyReader* r);
std::string PutDeviceManyReplyBody(const std::vector<Status>& items);
// Each item's status into *out (n of them); Unavailable where the reply is malformed.
Status ParsePutDeviceManyReply(BodyReader* r, size_t n, std::vector<Status>* out);

}  // namespace ecstore::net
