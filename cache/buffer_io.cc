#include "cache/buffer_io.h"

#include <algorithm>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "cache/device_load.h"
#include "cuda/cuda.h"
#include "cuda/events.h"
#include "cuda/peer.h"

namespace ecstore {
namespace {

using Results = std::vector<Result<EntryInfo>>;

// Indices of the device descriptors, by (device, stream): one wait per stream.
using ByStream = std::map<std::pair<int, uintptr_t>, std::vector<size_t>>;

// Host memory for staged copies, not zeroed (every byte used is written first).
std::unique_ptr<uint8_t[]> Staging(uint64_t bytes) {
  return std::unique_ptr<uint8_t[]>(new uint8_t[bytes > 0 ? bytes : 1]);
}

// From a device tier: each entry copied by the store on its own stream, once the work queued
// on the descriptor's stream (which may still use the memory) is done.
void FromDeviceTier(DeviceIo& cache, std::string_view ns, const std::vector<std::string>& keys,
                    const std::vector<BufferDesc>& dsts, const ByStream& groups, Results* out) {
  for (const auto& [where, idx] : groups) {
    Status waited = cuda::WaitForStream(where.first, where.second);
    for (size_t i : idx)
      (*out)[i] = waited.ok() ? cache.GetToDevice(ns, keys[i], dsts[i].data, dsts[i].size)
                              : Result<EntryInfo>(waited);
  }
}

// From a same-host server's device pool, opened over CUDA IPC: each entry leased there and
// copied device->device on its descriptor's stream -- a peer copy where the descriptor is on
// another GPU that can reach the pool's -- the leases held until the stream ran the copies.
// A key that cannot be leased there (no device pool, or one full of leased entries), or
// whose GPU cannot reach the pool's (cuda/peer.h), goes to *rest, for the next way (the
// server's host pool); an absent key is NotFound at once.
void FromDeviceLeases(DeviceIo& cache, std::string_view ns, const std::vector<std::string>& keys,
                      const std::vector<BufferDesc>& dsts, const ByStream& groups, Results* out,
                      ByStream* rest) {
  cuda::PeerRoutes& routes = cuda::PeerRoutes::Process();
  int pool_device = -2;  // the GPU of the pool, asked of the first lease: every one is in it
  for (const auto& [where, idx] : groups) {
    std::vector<ReadLease> held;
    for (size_t i : idx) {
      auto lease = cache.AcquireOnDevice(ns, keys[i]);
      if (!lease.ok()) {
        if (lease.status().IsNotFound())
          (*out)[i] = lease.status();
        else
          (*rest)[where].push_back(i);
        continue;
      }
      if (lease->size() > dsts[i].size) {
        (*out)[i] = DeviceBufferTooSmall(keys[i], lease->info(), dsts[i].size);
        continue;
      }
      if (pool_device == -2 && !cuda::IsDevicePointer(lease->data(), &pool_device))
        pool_device = where.first;
      const cuda::CrossGpu way = routes.Route(where.first, pool_device);
      if (way == cuda::CrossGpu::kHostPath) {
        (*rest)[where].push_back(i);
        routes.Count(way, lease->size());
        continue;
      }
      Status st =
          way == cuda::CrossGpu::kPeer
              ? cuda::EnqueuePeerCopy(dsts[i].data, where.first, lease->data(), pool_device,
                                      lease->size(), where.first, where.second)
              : cuda::EnqueueCopy(dsts[i].data, lease->data(), lease->size(),
                                  cuda::Direction::kDeviceToDevice, where.first, where.second);
      if (st.ok()) routes.Count(way, lease->size());
      (*out)[i] = st.ok() ? Result<EntryInfo>(lease->info()) : Result<EntryInfo>(st);
      held.push_back(std::move(lease).value());
    }
    if (held.empty()) continue;
    Status st = cuda::WaitForStream(where.first, where.second);  // then the leases end
    if (!st.ok())
      for (size_t i : idx)
        if ((*out)[i].ok()) (*out)[i] = st;
  }
}

// From a pool read in place: cache/device_load.h, one call per stream.
void FromPool(Cache& cache, std::string_view ns, const std::vector<std::string>& keys,
              const std::vector<BufferDesc>& dsts, const ByStream& groups, Results* out) {
  for (const auto& [where, idx] : groups) {
    std::vector<std::string> ks;
    std::vector<std::span<uint8_t>> spans;
    for (size_t i : idx) {
      ks.push_back(keys[i]);
      spans.push_back(dsts[i].span());
    }
    Results got = GetManyToDevice(cache, ns, ks, spans, where.first, where.second);
    for (size_t j = 0; j < idx.size(); ++j) (*out)[idx[j]] = std::move(got[j]);
  }
}

// A landing block's device->host copy: pieces of at least this, at most kMaxPieces (each
// costs an event, a wake-up here and one in the daemon: 1 MiB pieces gained nothing at
// 10.6-16.5 MB).
constexpr uint64_t kMinPiece = 4 << 20;
constexpr uint64_t kMaxPieces = 16;

// The copy into a landing block in pieces, all enqueued at once with an event behind each;
// the commit goes out at once on a thread of its own (the daemon copies each piece out as it
// lands) while this one marks each piece landed as its event completes. A failed copy
// fails the landing: the daemon stores nothing and the commit says so.
Status LandWhileCommitting(PutSlot& slot, const BufferDesc& src, bool checksum_when_spilled) {
  const uint64_t n = src.size;
  const uint64_t step = std::max(kMinPiece, (n + kMaxPieces - 1) / kMaxPieces);
  std::vector<std::pair<uint64_t, uintptr_t>> pieces;  // (end, event)
  Status copied;
  for (uint64_t at = 0; at < n && copied.ok(); at += step) {
    const uint64_t end = std::min(n, at + step);
    copied = cuda::EnqueueCopy(slot.bytes().data() + at, src.data + at, end - at,
                               cuda::Direction::kDeviceToHost, src.device, src.stream);
    if (!copied.ok()) break;
    auto event = cuda::RecordEvent(src.device, src.stream);
    if (event.ok())
      pieces.emplace_back(end, *event);
    else
      copied = event.status();
  }
  if (!copied.ok()) {  // nothing committed: dropping the slot gives its block back
    slot.FailLanding();
    for (const auto& [end, event] : pieces) cuda::WaitEvent(src.device, event);
    cuda::WaitForStream(src.device, src.stream);  // no copy lands once the block is gone
    return copied;
  }
  Status committed;
  std::thread committer([&] { committed = slot.Commit(checksum_when_spilled); });
  Status landed;
  for (const auto& [end, event] : pieces) {  // every event is waited for, failed or not
    Status st = cuda::WaitEvent(src.device, event);
    if (landed.ok() && !st.ok()) {
      landed = st;
      slot.FailLanding();
    }
    if (landed.ok()) slot.Landed(end);
  }
  committer.join();
  return landed.ok() ? committed : landed;
}

// Elsewhere: one GetMany into a host buffer, then each entry up on its descriptor's stream.
void Staged(Cache& cache, std::string_view ns, const std::vector<std::string>& keys,
            const std::vector<BufferDesc>& dsts, const ByStream& groups, Results* out) {
  std::vector<size_t> idx;
  uint64_t total = 0;
  for (const auto& [where, is] : groups)
    for (size_t i : is) {
      idx.push_back(i);
      total += dsts[i].size;
    }
  std::unique_ptr<uint8_t[]> host = Staging(total);
  std::vector<std::string> ks;
  std::vector<std::span<uint8_t>> spans;
  uint64_t at = 0;
  for (size_t i : idx) {
    ks.push_back(keys[i]);
    spans.emplace_back(host.get() + at, dsts[i].size);
    at += dsts[i].size;
  }
  Results got = cache.GetMany(ns, ks, spans);
  for (size_t j = 0; j < idx.size(); ++j) {
    const BufferDesc& d = dsts[idx[j]];
    if (got[j].ok()) {
      Status st = cuda::EnqueueCopy(d.data, spans[j].data(), got[j]->bytes,
                                    cuda::Direction::kHostToDevice, d.device, d.stream);
      if (!st.ok()) got[j] = st;
    }
    (*out)[idx[j]] = std::move(got[j]);
  }
  for (const auto& [where, is] : groups) {  // the staging buffer lives until the copies ran
    Status st = cuda::WaitForStream(where.first, where.second);
    if (!st.ok())
      for (size_t i : is)
        if ((*out)[i].ok()) (*out)[i] = st;
  }
}

}  // namespace

std::vector<Result<EntryInfo>> GetIntoBuffers(Cache& cache, std::string_view ns,
                                              const std::vector<std::string>& keys,
                                              const std::vector<BufferDesc>& dsts) {
  if (dsts.size() != keys.size())
    return Results(keys.size(),
                   Status::InvalidArgument("GetIntoBuffers needs one descriptor per key"));
  Results out(keys.size(), Status::Unavailable("not attempted"));
  const CacheCapabilities caps = cache.capabilities();
  std::vector<size_t> got_idx;  // one GetMany: host memory, and device memory written directly
  ByStream direct, device;
  for (size_t i = 0; i < keys.size(); ++i) {
    const BufferDesc& d = dsts[i];
    if (!d.on_device())
      got_idx.push_back(i);
    else
      (caps.memory && caps.memory->GetsInto(d) ? direct : device)[{d.device, d.stream}].push_back(
          i);
  }
  // The NIC writes device memory only after the work queued on its stream (which may still
  // use that memory) is done.
  for (const auto& [where, idx] : direct) {
    Status waited = cuda::WaitForStream(where.first, where.second);
    for (size_t i : idx)
      if (waited.ok())
        got_idx.push_back(i);
      else
        out[i] = waited;
  }
  if (!got_idx.empty()) {
    std::vector<std::string> ks;
    std::vector<std::span<uint8_t>> spans;
    for (size_t i : got_idx) {
      ks.push_back(keys[i]);
      spans.push_back(dsts[i].span());
    }
    Results got = cache.GetMany(ns, ks, spans);
    for (size_t j = 0; j < got_idx.size(); ++j) out[got_idx[j]] = std::move(got[j]);
  }
  if (device.empty()) return out;
  if (caps.device_tier && caps.device_io) {
    FromDeviceTier(*caps.device_io, ns, keys, dsts, device, &out);
    return out;
  }
  if (caps.device_leases && caps.device_io) {
    ByStream rest;
    FromDeviceLeases(*caps.device_io, ns, keys, dsts, device, &out, &rest);
    device = std::move(rest);
  }
  if (device.empty()) return out;
  if (caps.in_place_reads)
    FromPool(cache, ns, keys, dsts, device, &out);
  else
    Staged(cache, ns, keys, dsts, device, &out);
  return out;
}

const char* PutRouteName(PutRoute route) {
  switch (route) {
    case PutRoute::kHost:
      return "host";
    case PutRoute::kCacheCopy:
      return "cache";
    case PutRoute::kSlot:
      return "slot";
    case PutRoute::kLanding:
      return "landing";
    case PutRoute::kStaged:
      return "staged";
  }
  return "host";
}

Status PutFromBuffer(Cache& cache, std::string_view ns, std::string_view key,
                     const TensorMeta& meta, const BufferDesc& src, const BufferPutOptions& o,
                     PutRoute* route) {
  PutRoute ignored;
  PutRoute& way = route ? *route : ignored;
  way = PutRoute::kHost;
  if (!src.on_device() || src.size == 0) return cache.Put(ns, key, meta, src.span());
  const CacheCapabilities caps = cache.capabilities();
  if (o.device_puts && caps.device_io && (caps.device_tier || caps.device_puts)) {
    way = PutRoute::kCacheCopy;
    // The store copies on a stream of its own: the producer's work must be done first.
    EC_RETURN_IF_ERROR(cuda::WaitForStream(src.device, src.stream));
    Status st =
        caps.device_io->PutFromDevice(ns, key, meta, src.data, src.size, o.checksum_when_spilled);
    // A daemon that cannot open this memory (a GPU it does not see) refuses it: on below.
    if (st.ok() || caps.device_tier || !st.IsInvalidArgument()) return st;
  }
  if (caps.reservations) {
    const bool landing = o.landing && src.size >= kLandingMinBytes;
    auto slot = caps.reservations->ReserveSlot(ns, key, meta, src.size, landing);
    // InvalidArgument: no block to be had this way (an older daemon without put arenas, a
    // put larger than an arena): staged. Busy and the rest are the put's answer.
    if (slot.ok()) {
      way = (*slot)->landing() ? PutRoute::kLanding : PutRoute::kSlot;
      if ((*slot)->landing()) return LandWhileCommitting(**slot, src, o.checksum_when_spilled);
      EC_RETURN_IF_ERROR(cuda::CopyOnStream((*slot)->bytes().data(), src.data, src.size,
                                            cuda::Direction::kDeviceToHost, src.device,
                                            src.stream));
      return (*slot)->Commit(o.checksum_when_spilled);
    }
    if (!slot.status().IsInvalidArgument()) return slot.status();
  }
  way = PutRoute::kStaged;
  std::unique_ptr<uint8_t[]> host = Staging(src.size);
  EC_RETURN_IF_ERROR(cuda::CopyOnStream(host.get(), src.data, src.size,
                                        cuda::Direction::kDeviceToHost, src.device, src.stream));
  return cache.Put(ns, key, meta, {host.get(), src.size});
}

}  // namespace ecstore
