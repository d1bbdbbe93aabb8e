#include "store/device_load.h"

#include <algorithm>

#include "cuda/cuda.h"

namespace ecstore {
namespace {

// What one key's told pieces have put on the device so far.
struct Sent {
  const uint8_t* from = nullptr;  // where the bytes told lie
  uint64_t copied = 0;            // [0, copied) enqueued
};

Status TooSmall(const std::string& key, uint64_t bytes, uint64_t room) {
  return Status::InvalidArgument("the device buffer for '" + key + "' holds " +
                                 std::to_string(room) + " bytes, the entry " +
                                 std::to_string(bytes) + ": pass one at least its size");
}

}  // namespace

std::vector<Result<EntryInfo>> GetManyToDevice(Cache& cache, std::string_view ns,
                                               const std::vector<std::string>& keys,
                                               const std::vector<std::span<uint8_t>>& dsts,
                                               int device, uintptr_t stream) {
  std::vector<Result<EntryInfo>> out;
  if (dsts.size() != keys.size()) {
    out.assign(keys.size(), Status::InvalidArgument("GetManyToDevice needs one buffer per key"));
    return out;
  }
  std::vector<Sent> sent(keys.size());
  Status failed;  // the first copy or wait the stream refused
  Cache::LandingWatch watch;
  watch.landed = [&](size_t k, const uint8_t* at, uint64_t landed) {
    Sent& s = sent[k];
    if (s.from != at) s = {at, 0};  // read again elsewhere: from the start
    const uint64_t upto = std::min<uint64_t>(landed, dsts[k].size());
    if (upto <= s.copied || !failed.ok()) return;
    failed = cuda::EnqueueCopy(dsts[k].data() + s.copied, at + s.copied, upto - s.copied,
                               cuda::Direction::kHostToDevice, device, stream);
    if (failed.ok()) s.copied = upto;
  };
  // Where the cache waits for more, the copies told so far are finished: a client's told
  // bytes lie in its server's mapping, which a broken connection takes away. The host->device
  // copies run ~10-30 x faster than the disk reads that feed them, so they are done before the
  // next piece lands.
  watch.batch_end = [&] {
    Status st = cuda::WaitForStream(device, stream);
    if (failed.ok()) failed = st;
  };
  std::vector<Result<ReadLease>> leases = cache.AcquireMany(ns, keys, &watch);
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<ReadLease>& l = leases[i];
    if (!l.ok()) {
      out.push_back(l.status());
      continue;
    }
    if (l->size() > dsts[i].size()) {
      out.push_back(TooSmall(keys[i], l->size(), dsts[i].size()));
      continue;
    }
    const bool done = watch.streamed[i] && sent[i].copied == l->size() && failed.ok();
    Status st;
    if (!done)  // came another way (or a copy failed): the lease's bytes whole
      st = cuda::EnqueueCopy(dsts[i].data(), l->data(), l->size(),
                             l->memory_kind() == MemoryKind::kDevice
                                 ? cuda::Direction::kDeviceToDevice
                                 : cuda::Direction::kHostToDevice,
                             device, stream);
    out.push_back(st.ok() ? Result<EntryInfo>(l->info()) : Result<EntryInfo>(st));
  }
  Status waited = cuda::WaitForStream(device, stream);  // every copy done before any release
  if (!waited.ok())
    for (auto& r : out)
      if (r.ok()) r = waited;
  return out;
}

}  // namespace ecstore
