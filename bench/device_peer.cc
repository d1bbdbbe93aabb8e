// The `device_peer` workload (a two-GPU machine): an entry in GPU 0's device tier read into
// GPU 1's memory -- ec-store's get (a peer copy), the same get with peer copies off (through
// the entry's host copy), and the host-staged way (device->host into pinned memory, then
// host->device: what a connector staging through /dev/shm does at best) -- each against
// cudaMemcpyPeerAsync of the same bytes, for 2.87, 10.6, 16.5 and 57.8 MB. Fewer than two
// GPUs: one row saying so.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/cuda_util.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "cuda/cuda.h"
#include "cuda/peer.h"
#include "store/store.h"

#ifdef EC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ecstore::bench {

#ifndef EC_HAVE_CUDA
void DevicePeerWorkload(const Config&) {
  Add({"device_peer", "ec-store", 0, 0, 0, 0, -1, "not run: built without CUDA"});
}
#else
namespace {

constexpr uint64_t kSizes[] = {2867200, 10616832, 16515072, 57802752};

// Times op `rounds` times on distinct sources (each its own buffer, as each entry has its own
// pool block); one row.
template <typename Op>
void Row(const std::string& workload, const std::string& system, uint64_t n, int rounds, Op op,
         const std::string& note) {
  TimedReads t;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    op(r);
    t.Add(start, n);
  }
  t.Report(workload.c_str(), system.c_str(), note);
}

// One size: `copies` sources in GPU 0's memory and in the store, a destination on GPU 1.
void OneSize(Store* store, uint64_t n, int rounds, const std::string& workload) {
  const int copies = std::min(rounds, 8);
  std::vector<void*> src(copies);
  void *dst = nullptr, *pinned = nullptr;
  cudaStream_t s1;
  MustCuda(cudaSetDevice(0), "device 0");
  for (auto& p : src) MustCuda(cudaMalloc(&p, n), "cudaMalloc on GPU 0");
  std::vector<uint8_t> fill(n);
  for (int i = 0; i < copies; ++i) {
    std::fill(fill.begin(), fill.end(), static_cast<uint8_t>(i + 1));
    MustCuda(cudaMemcpy(src[i], fill.data(), n, cudaMemcpyHostToDevice), "fill");
    TensorMeta m{DType::kU8, {static_cast<int64_t>(n)}};
    Die(store->PutFromDevice(workload, std::to_string(i), m, src[i], n), "put from device");
  }
  MustCuda(cudaMallocHost(&pinned, n), "cudaMallocHost");
  MustCuda(cudaSetDevice(1), "device 1");
  MustCuda(cudaMalloc(&dst, n), "cudaMalloc on GPU 1");
  MustCuda(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), "stream");
  cuda::PeerRoutes& routes = cuda::PeerRoutes::Process();
  const bool peer = routes.Route(1, 0) == cuda::CrossGpu::kPeer;
  Row(
      workload, "limit", n, rounds,
      [&](int r) {
        MustCuda(cudaMemcpyPeerAsync(dst, 1, src[r % copies], 0, n, s1), "peer copy");
        MustCuda(cudaStreamSynchronize(s1), "sync");
      },
      peer ? "cudaMemcpyPeerAsync GPU 0 -> GPU 1, peer access on"
           : "cudaMemcpyPeerAsync GPU 0 -> GPU 1: this pair has no peer access");
  auto get = [&](int r) {
    Die(store->GetToDevice(workload, std::to_string(r % copies), dst, n).status(), "get");
  };
  Row(workload, "ec-store", n, rounds, get,
      std::string("GetToDevice of a GPU 0 device-tier entry into GPU 1 memory (") +
          (peer ? "a peer copy" : "the host path: no peer access") + ")");
  routes.AllowPeer(false);
  get(0);  // each entry's host copy made once: the rows time what the path costs after
  for (int i = 1; i < copies; ++i) get(i);
  Row(workload, "ec-store-peer-off", n, rounds, get,
      "the same get with peer copies off (EC_STORE_PEER_COPY=0): host->device from the "
      "entry's host copy, the PCIe-only figure");
  routes.AllowPeer(true);
  Row(
      workload, "host-staged", n, rounds,
      [&](int r) {
        MustCuda(cudaMemcpyAsync(pinned, src[r % copies], n, cudaMemcpyDeviceToHost, s1), "d2h");
        MustCuda(cudaMemcpyAsync(dst, pinned, n, cudaMemcpyHostToDevice, s1), "h2d");
        MustCuda(cudaStreamSynchronize(s1), "sync");
      },
      "device->host into pinned memory, then host->device: a host-staged connector at best");
  cudaStreamDestroy(s1);
  cudaFree(dst);
  cudaFreeHost(pinned);
  for (void* p : src) cudaFree(p);
  MustCuda(cudaSetDevice(0), "device 0");
}

}  // namespace

void DevicePeerWorkload(const Config& cfg) {
  Progress("device_peer: GPU 0's device tier read into GPU 1");
  const int n = cuda::DeviceCount();
  if (n < 2) {
    Add({"device_peer", "ec-store", 0, 0, 0, 0, -1,
         "not run: needs two GPUs, this machine has " + std::to_string(n)});
    return;
  }
  const int rounds = cfg.quick ? 5 : 40;
  const std::string dir = cfg.dir + "/device_peer";
  std::filesystem::remove_all(dir);
  Options o;
  o.pool_bytes = 2ull << 30;
  o.device_pool_bytes = 2ull << 30;
  o.device = 0;
  auto store = Store::Open(dir, o);
  Die(store.status(), "open");
  for (uint64_t size : kSizes) {
    char name[32];
    std::snprintf(name, sizeof name, "gpu_peer_%.1fMB", static_cast<double>(size) / 1e6);
    OneSize(store->get(), size, rounds, name);
    Record* ec = Find(name, "ec-store");
    Record* staged = Find(name, "host-staged");
    if (ec && staged && staged->p50_us > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "; %.1fx faster than host-staged (p50 %.0f vs %.0f us)",
                    staged->p50_us / ec->p50_us, ec->p50_us, staged->p50_us);
      ec->note += buf;
    }
  }
  Die((*store)->Close(), "close");
  std::filesystem::remove_all(dir);
}
#endif

}  // namespace ecstore::bench
