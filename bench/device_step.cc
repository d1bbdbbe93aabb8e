// The `device_step` workload (GPU machine): a step of 32 entries of 2.87 MB (a video's frames)
// brought from the host pool to the GPU by one GetManyToDevice call (cache/device_load.h),
// against the same bytes copied from pinned memory the simplest ways: one copy of the step's
// total (the limit), 32 cudaMemcpyAsync and one wait, and one cudaMemcpyBatchAsync (what
// cuda::EnqueueCopies issues); the same load with each copy enqueued on its own, the batched
// copies out of the entries' pool blocks, and the leases alone. Where a step's load loses to one
// copy, in C++ alone.
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/cuda_util.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "cache/device_load.h"
#include "cuda/cuda.h"
#include "store/store.h"

#ifdef EC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ecstore::bench {

#ifndef EC_HAVE_CUDA
void DeviceStepWorkload(const Config&) {
  Add({"gpu_step", "ec-store", 0, 0, 0, 0, -1, "not run: built without CUDA"});
}
#else
namespace {

constexpr uint64_t kItem = 2867200;  // 350 x 4096 bf16
constexpr int kItems = 32;
constexpr const char* kWorkload = "gpu_step_32x2.9MB";

template <typename Op>
void Row(const char* system, int rounds, Op op, const std::string& note) {
  TimedReads t;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    op();
    t.Add(start, kItem * kItems);
  }
  t.Report(kWorkload, system, note);
}

}  // namespace

void DeviceStepWorkload(const Config& cfg) {
  Progress("device_step: a step of 32 x 2.87 MB from the host pool to the GPU");
  std::string why;
  if (cuda::DeviceCount(&why) == 0) {
    Add({"gpu_step", "ec-store", 0, 0, 0, 0, -1, "not run: " + why});
    return;
  }
  const int rounds = cfg.quick ? 5 : 50;
  const uint64_t total = kItem * kItems;
  void *pinned = nullptr, *dst = nullptr;
  cudaStream_t s;
  MustCuda(cudaMallocHost(&pinned, total), "cudaMallocHost");
  MustCuda(cudaMalloc(&dst, total), "cudaMalloc");
  MustCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  std::memset(pinned, 7, total);
  auto item = [&](void* base, int i) { return static_cast<uint8_t*>(base) + i * kItem; };
  Row(
      "limit", rounds,
      [&] {
        MustCuda(cudaMemcpyAsync(dst, pinned, total, cudaMemcpyHostToDevice, s), "copy");
        MustCuda(cudaStreamSynchronize(s), "sync");
      },
      "one cudaMemcpyAsync of the step's bytes from pinned memory, then a wait");
  Row(
      "copy-each", rounds,
      [&] {
        for (int i = 0; i < kItems; ++i)
          MustCuda(cudaMemcpyAsync(item(dst, i), item(pinned, i), kItem, cudaMemcpyHostToDevice, s),
                   "copy");
        MustCuda(cudaStreamSynchronize(s), "sync");
      },
      "32 cudaMemcpyAsync, one per item, then one wait");
  std::vector<cuda::CopyOp> ops;
  for (int i = 0; i < kItems; ++i) ops.push_back({item(dst, i), item(pinned, i), kItem});
  const auto stream = reinterpret_cast<uintptr_t>(s);
  Row(
      "copy-batch", rounds,
      [&] {
        Die(cuda::EnqueueCopies(ops, 0, stream), "batch");
        Die(cuda::WaitForStream(0, stream), "sync");
      },
      "cuda::EnqueueCopies: one cudaMemcpyBatchAsync of the 32 items, then one wait");
  const std::string dir = cfg.dir + "/device_step";
  std::filesystem::remove_all(dir);
  Options o;
  o.pool_bytes = 1ull << 30;
  o.device_pool_bytes = 64ull << 20;  // its DeviceFront registers the host pool with CUDA
  auto store = Store::Open(dir, o);
  Die(store.status(), "open");
  std::vector<std::string> keys;
  std::vector<std::span<uint8_t> > dsts;
  for (int i = 0; i < kItems; ++i) {
    keys.push_back(std::to_string(i));
    dsts.push_back({item(dst, i), kItem});
    TensorMeta m{DType::kU8, {static_cast<int64_t>(kItem)}};
    Die((*store)->Put("step", keys.back(), m, {item(pinned, i), kItem}), "put");
  }
  auto load = [&] {
    for (auto& r : GetManyToDevice(**store, "step", keys, dsts, 0, stream))
      Die(r.status(), "get many to device");
  };
  Row("ec-store", rounds, load,
      "GetManyToDevice of 32 host-pool entries (leased together, copies enqueued together, "
      "one wait)");
  cuda::SetCopyBatching(false);
  Row("ec-store-unbatched", rounds, load, "the same, each copy enqueued on its own");
  cuda::SetCopyBatching(true);
  {  // the copies alone, out of the pool's blocks: the leases taken once, outside the timing
    auto leases = (*store)->AcquireMany("step", keys);
    std::vector<cuda::CopyOp> from_pool;
    for (int i = 0; i < kItems; ++i) {
      Die(leases[i].status(), "acquire many");
      from_pool.push_back({item(dst, i), leases[i]->data(), kItem});
    }
    Row(
        "pool-copies", rounds,
        [&] {
          Die(cuda::EnqueueCopies(from_pool, 0, stream), "batch");
          Die(cuda::WaitForStream(0, stream), "sync");
        },
        "copy-batch's copies out of the 32 entries' pool blocks (leased once, not timed)");
  }
  Row(
      "ec-store-leases", rounds,
      [&] {
        for (auto& r : (*store)->AcquireMany("step", keys)) Die(r.status(), "acquire many");
      },
      "AcquireMany of the 32 entries and their release, no copy: the call's bookkeeping");
  Die((*store)->Close(), "close");
  std::filesystem::remove_all(dir);
  cudaStreamDestroy(s);
  cudaFree(dst);
  cudaFreeHost(pinned);
}
#endif

}  // namespace ecstore::bench
