// Gets into and puts from BufferDescs (store/cache.h) through any Cache: host or device
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

#include "store/cache.h"

namespace ecstore {

// Result i: keys[i]'s info once its bytes are in dsts[i], or why not (NotFound where absent,
// InvalidArgument where dsts[i] is smaller than the entry). Host descriptors are one GetMany;
// device descriptors, by the cache's capabilities: GetToDevice from a device tier; a
// device->device copy from a same-host daemon's device pool where it holds the entry
// (AcquireOnDevice, over CUDA IPC); else GetManyToDevice from a pool read in place
// (store/device_load.h), else one GetMany into a host staging buffer and a host->device copy
// of each entry.
std::vector<Result<EntryInfo>> GetIntoBuffers(Cache& cache, std::string_view ns,
                                              const std::vector<std::string>& keys,
                                              const std::vector<BufferDesc>& dsts);

// Puts src's bytes under (ns, key). Device memory: the cache copies it itself where it can
// (PutFromDevice: a device tier, or a same-host daemon that can open this process's memory);
// elsewhere -- or where a daemon refuses this memory -- it is copied to a host staging buffer
// and put from there. checksum_when_spilled as Cache::PutFromDevice's (host puts hash).
Status PutFromBuffer(Cache& cache, std::string_view ns, std::string_view key,
                     const TensorMeta& meta, const BufferDesc& src,
                     bool checksum_when_spilled = false);

}  // namespace ecstore
