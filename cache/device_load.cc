#include "cache/device_load.h"

#include "cache/told_copies.h"
#include "cuda/cuda.h"

namespace ecstore {
namespace {

// One round: the keys' leases taken together, their bytes copied, the copies waited for,
// the leases released. The copies are gathered and enqueued together (cuda::EnqueueCopies:
// one submission where the driver batches) wherever the cache waits for more and at the end.
std::vector<Result<EntryInfo>> LoadRound(Cache& cache, std::string_view ns,
                                         const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts, int device,
                                         uintptr_t stream) {
  std::vector<Result<EntryInfo>> out;
  Status failed;  // the first submission or wait the stream refused
  std::vector<cuda::CopyOp> pending;
  auto submit = [&] {
    if (failed.ok()) failed = cuda::EnqueueCopies(pending, device, stream);
    pending.clear();
  };
  // Where the cache waits for more, the copies told so far are finished: a client's told
  // bytes lie in its server's mapping, which a broken connection takes away. The host->device
  // copies run ~10-30 x faster than the disk reads that feed them, so they are done before the
  // next piece lands.
  ToldCopies told(
      dsts,
      [&](void* d, const uint8_t* p, uint64_t n) {
        pending.push_back({d, p, n});
        return true;
      },
      [&] {
        submit();
        Status st = cuda::WaitForStream(device, stream);
        if (failed.ok()) failed = st;
      });
  std::vector<Result<ReadLease>> leases = cache.AcquireMany(ns, keys, told.watch());
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<ReadLease>& l = leases[i];
    if (!l.ok()) {
      out.push_back(l.status());
      continue;
    }
    if (l->size() > dsts[i].size()) {
      out.push_back(DeviceBufferTooSmall(keys[i], l->info(), dsts[i].size()));
      continue;
    }
    if (!told.Whole(i, *l))  // came another way: the lease's bytes whole
      pending.push_back({dsts[i].data(), l->data(), l->size()});
    out.push_back(l->info());
  }
  submit();
  Status waited = cuda::WaitForStream(device, stream);  // every copy done before any release
  if (failed.ok()) failed = waited;
  if (!failed.ok())
    for (auto& r : out)
      if (r.ok()) r = failed;
  return out;
}

}  // namespace

Status DeviceBufferTooSmall(const std::string& key, const EntryInfo& entry, uint64_t room) {
  return Status::BufferTooSmall("the device buffer for '" + key + "' holds " +
                                    std::to_string(room) + " bytes, the entry " +
                                    std::to_string(entry.bytes) + ": pass one at least its size",
                                entry.bytes, entry.meta);
}

// A step larger than a batch may hold under lease comes back Busy for the keys past that
// share (BatchReads::AcquireMany): those are loaded in further rounds, each after the last
// one's leases are released, until a round makes no progress.
std::vector<Result<EntryInfo>> GetManyToDevice(Cache& cache, std::string_view ns,
                                               const std::vector<std::string>& keys,
                                               const std::vector<std::span<uint8_t>>& dsts,
                                               int device, uintptr_t stream) {
  if (dsts.size() != keys.size())
    return std::vector<Result<EntryInfo>>(
        keys.size(), Status::InvalidArgument("GetManyToDevice needs one buffer per key"));
  std::vector<Result<EntryInfo>> out(keys.size(), Status::Busy("not loaded"));
  std::vector<size_t> pending(keys.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  while (!pending.empty()) {
    std::vector<std::string> round_keys;
    std::vector<std::span<uint8_t>> round_dsts;
    for (size_t i : pending) round_keys.push_back(keys[i]), round_dsts.push_back(dsts[i]);
    std::vector<Result<EntryInfo>> got =
        LoadRound(cache, ns, round_keys, round_dsts, device, stream);
    std::vector<size_t> again;
    for (size_t k = 0; k < pending.size(); ++k) {
      if (got[k].status().IsBusy()) again.push_back(pending[k]);
      out[pending[k]] = std::move(got[k]);
    }
    if (again.size() == pending.size()) break;  // no progress: Busy stands
    pending = std::move(again);
  }
  return out;
}

}  // namespace ecstore
