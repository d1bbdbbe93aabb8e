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

// The step's pinned source, its GPU destination and the stream, shared by every row.
struct Step {
  int rounds = 0;
  void* pinned = nullptr;
  void* dst = nullptr;
  cudaStream_t s = nullptr;
  uint8_t* Item(void* base, int i) const { return static_cast<uint8_t*>(base) + i * kItem; }
  uintptr_t stream() const { return reinterpret_cast<uintptr_t>(s); }
};

// The limit and the copies alone: no store.
void CopyRows(const Step& st) {
  Row(
      "limit", st.rounds,
      [&] {
        MustCuda(cudaMemcpyAsync(st.dst, st.pinned, kItem * kItems, cudaMemcpyHostToDevice, st.s),
                 "copy");
        MustCuda(cudaStreamSynchronize(st.s), "sync");
      },
      "one cudaMemcpyAsync of the step's bytes from pinned memory, then a wait");
  Row(
      "copy-each", st.rounds,
      [&] {
        for (int i = 0; i < kItems; ++i)
          MustCuda(cudaMemcpyAsync(st.Item(st.dst, i), st.Item(st.pinned, i), kItem,
                                   cudaMemcpyHostToDevice, st.s),
                   "copy");
        MustCuda(cudaStreamSynchronize(st.s), "sync");
      },
      "32 cudaMemcpyAsync, one per item, then one wait");
  std::vector<cuda::CopyOp> ops;
  for (int i = 0; i < kItems; ++i)
    ops.push_back({st.Item(st.dst, i), st.Item(st.pinned, i), kItem});
  Row(
      "copy-batch", st.rounds,
      [&] {
        Die(cuda::EnqueueCopies(ops, 0, st.stream()), "batch");
        Die(cuda::WaitForStream(0, st.stream()), "sync");
      },
      "cuda::EnqueueCopies: one cudaMemcpyBatchAsync of the 32 items, then one wait");
}

// The copies out of the entries' pool blocks, the leases taken once outside the timing.
void PoolCopyRow(const Step& st, Store& store, const std::vector<std::string>& keys) {
  auto leases = store.AcquireMany("step", keys);
  std::vector<cuda::CopyOp> from_pool;
  for (int i = 0; i < kItems; ++i) {
    Die(leases[i].status(), "acquire many");
    from_pool.push_back({st.Item(st.dst, i), leases[i]->data(), kItem});
  }
  Row(
      "pool-copies", st.rounds,
      [&] {
        Die(cuda::EnqueueCopies(from_pool, 0, st.stream()), "batch");
        Die(cuda::WaitForStream(0, st.stream()), "sync");
      },
      "copy-batch's copies out of the 32 entries' pool blocks (leased once, not timed)");
}

// The step through an embedded store whose host pool holds the 32 entries.
void StoreRows(const Step& st, const std::string& dir) {
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
    dsts.push_back({st.Item(st.dst, i), kItem});
    TensorMeta m{DType::kU8, {static_cast<int64_t>(kItem)}};
    Die((*store)->Put("step", keys.back(), m, {st.Item(st.pinned, i), kItem}), "put");
  }
  auto load = [&] {
    for (auto& r : GetManyToDevice(**store, "step", keys, dsts, 0, st.stream()))
      Die(r.status(), "get many to device");
  };
  Row("ec-store", st.rounds, load,
      "GetManyToDevice of 32 host-pool entries (leased together, copies enqueued together, "
      "one wait)");
  cuda::SetCopyBatching(false);
  Row("ec-store-unbatched", st.rounds, load, "the same, each copy enqueued on its own");
  cuda::SetCopyBatching(true);
  PoolCopyRow(st, **store, keys);
  Row(
      "ec-store-leases", st.rounds,
      [&] {
        for (auto& r : (*store)->AcquireMany("step", keys)) Die(r.status(), "acquire many");
      },
      "AcquireMany of the 32 entries and their release, no copy: the call's bookkeeping");
  Die((*store)->Close(), "close");
  std::filesystem::remove_all(dir);
}

}  // namespace

void DeviceStepWorkload(const Config& cfg) {
  Progress("device_step: a step of 32 x 2.87 MB from the host pool to the GPU");
  std::string why;
  if (cuda::DeviceCount(&why) == 0) {
    Add({"gpu_step", "ec-store", 0, 0, 0, 0, -1, "not run: " + why});
    return;
  }
  Step st;
  st.rounds = cfg.quick ? 5 : 50;
  const uint64_t total = kItem * kItems;
  MustCuda(cudaMallocHost(&st.pinned, total), "cudaMallocHost");
  MustCuda(cudaMalloc(&st.dst, total), "cudaMalloc");
  MustCuda(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking), "stream");
  std::memset(st.pinned, 7, total);
  CopyRows(st);
  StoreRows(st, cfg.dir + "/device_step");
  cudaStreamDestroy(st.s);
  cudaFree(st.dst);
  cudaFreeHost(st.pinned);
}
#endif

}  // namespace ecstore::bench
