// GetManyToDevice: a step's entries copied into GPU memory from any Cache -- an embedded
// store, or a same-host client of a daemon -- each host->device copy enqueued as the entry's
// bytes become readable in the pool (Cache::AcquireMany with a watch), not after the last
// disk read: a pool hit's copy runs while the step's disk reads are in flight, and each disk
// read's pieces go up as they land.
//
//   std::vector<std::span<uint8_t>> dsts = ...;  // device memory, one per key (>= its size)
//   auto got = GetManyToDevice(*cache, "qwen2.5-vl", {h1, h2}, dsts, /*device=*/0, stream);
//
// The copies run on the caller's stream (a cudaStream_t as an integer: torch's current
// stream), ordered after the work already queued there; the call returns once that stream
// has run them, and only then are the leases released.
// Thread rules: as the Cache's (a Client: one thread at a time). Needs a CUDA build; without
// one every key answers Unavailable "built without CUDA".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache.h"

namespace ecstore {

// The InvalidArgument of a device buffer of `room` bytes for an entry of `bytes`.
Status DeviceBufferTooSmall(const std::string& key, const EntryInfo& entry, uint64_t room);

// Result i: keys[i]'s info once its bytes are in dsts[i], or why not (NotFound where absent,
// InvalidArgument where dsts[i] is smaller than the entry).
std::vector<Result<EntryInfo>> GetManyToDevice(Cache& cache, std::string_view ns,
                                               const std::vector<std::string>& keys,
                                               const std::vector<std::span<uint8_t>>& dsts,
                                               int device, uintptr_t stream);

}  // namespace ecstore
