// Gets into and puts from BufferDescs (cache/cache.h) through any Cache: host or device
// memory, one call. Each Cache moves what it can itself -- a device tier copies to and from
// device memory, a store read in place has its pool copied up as each entry's bytes land, a
// same-host daemon copies device memory out itself -- and the rest is staged here through a
// host buffer, with the copy to or from the device on the descriptor's stream.
//
//   std::vector<BufferDesc> dsts = {BufferDesc::Device(t0, n0, 0, stream),  // a CUDA tensor
//                                   BufferDesc::Host(host_span)};            // a host buffer
//   auto got = GetIntoBuffers(*cache, "qwen2.5-vl", {h0, h1}, dsts);
//   EC_RETURN_IF_ERROR(PutFromBuffer(*cache, "qwen2.5-vl", h2, meta,
//                                    BufferDesc::Device(src, n2, 0, stream)));
//
// Device memory is written (gets) or read (puts) after the work already queued on the
// descriptor's stream, and both calls return once their copies are complete.
// Thread rules: as the Cache's (a Client: one thread at a time).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cache/cache.h"

namespace ecstore {

// Result i: keys[i]'s info once its bytes are in dsts[i], or why not (NotFound where absent,
// InvalidArgument where dsts[i] is smaller than the entry). Host descriptors are one GetMany;
// device descriptors, by the cache's capabilities: GetToDevice from a device tier; a
// device->device copy from a same-host daemon's device pool where it holds the entry
// (AcquireOnDevice, over CUDA IPC); else GetManyToDevice from a pool read in place
// (cache/device_load.h), else one GetMany into a host staging buffer and a host->device copy
// of each entry.
std::vector<Result<EntryInfo>> GetIntoBuffers(Cache& cache, std::string_view ns,
                                              const std::vector<std::string>& keys,
                                              const std::vector<BufferDesc>& dsts);

// How PutFromBuffer moves device memory (host memory is always one Put).
struct BufferPutOptions {
  // Hashed by the first spill instead of now (Cache::PutFromDevice's): the entry is
  // readable as soon as its bytes are in.
  bool checksum_when_spilled = false;
  // Let the cache copy the device memory itself where it can (PutFromDevice).
  bool device_puts = true;
  // A large put into a same-host daemon's landing block, its pieces marked as they land.
  bool landing = true;
};
// A landing block (BufferPutOptions::landing) is taken from this size: below it, the hand-over
// to a committing thread cost more than the overlap gained (`python -m ecstore.bench`: landing
// piece by piece made a save ready later at 2.87 and 10.6 MB, sooner at 57.8 MB).
inline constexpr uint64_t kLandingMinBytes = 32ull << 20;
// The way a put went, for a caller's counters.
enum class PutRoute : uint8_t {
  kHost,       // host memory: one Put
  kCacheCopy,  // the cache copied the device memory itself (PutFromDevice)
  kSlot,       // device->host straight into a reserved block (PutSlot), then committed
  kLanding,    // ... a landing block: committed at once, its pieces marked as they land
  kStaged,     // device->host into a staging buffer, then one Put
};
// "host", "cache", "slot", "landing", "staged".
const char* PutRouteName(PutRoute route);

// Puts src's bytes under (ns, key), after the work queued on src's stream. Device memory:
// the cache copies it itself where it can (PutFromDevice: a device tier, or a same-host
// daemon that can open this process's memory); else a device->host copy straight into a
// block the cache reserves (an embedded pool, a same-host daemon's put arena: one copy, and
// from 32 MiB through a daemon a landing block, the daemon copying each piece out as it
// lands); elsewhere -- TCP, RDMA, a cluster -- through a host staging buffer and one Put.
// Reserved blocks and staging copies run at pinned speed where the memory is registered
// with CUDA (Cache.register_with_cuda in Python, RegisterPutMemoryWith).
Status PutFromBuffer(Cache& cache, std::string_view ns, std::string_view key,
                     const TensorMeta& meta, const BufferDesc& src,
                     const BufferPutOptions& options = {}, PutRoute* route = nullptr);

// One item of PutManyFromBuffers.
struct BufferPut {
  std::string key;
  TensorMeta meta;
  BufferDesc src;
};

// PutFromBuffer of each item, a step's saves in one call; result i is items[i]'s, and
// (*routes)[i] its way where routes is given. Device memory goes together: to a cache that
// copies it itself, in one call (DeviceIo::PutManyFromDevice: through a same-host daemon one
// request, its copies enqueued together and waited for once); into reserved blocks, every
// device->host copy enqueued, then one wait per stream and the commits. Each item's source
// is read after the work queued on its stream, as PutFromBuffer's.
std::vector<Status> PutManyFromBuffers(Cache& cache, std::string_view ns,
                                       const std::vector<BufferPut>& items,
                                       const BufferPutOptions& options = {},
                                       std::vector<PutRoute>* routes = nullptr);

}  // namespace ecstore
