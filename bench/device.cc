#include "bench/device.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>

#include "bench/baseline.h"
#include "bench/common.h"
#include "cuda/cuda.h"
#include "net/client.h"
#include "store/store.h"

#ifdef EC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ecstore::bench {

#ifndef EC_HAVE_CUDA
std::vector<DeviceRow> RunDevice(const std::vector<std::span<const uint8_t>>&, int,
                                 const std::string&) {
  return {{"device", "ec-store", "not run: built without CUDA", {}}};
}
#else
namespace {

using Clock = std::chrono::steady_clock;

// Times `op` once per (round, value); bytes and latencies over all of them.
template <typename Op>
// Times op(i) for every value, `rounds` times. With `counts`, op's that it says did not do
// the work the row names (it returns false) are left out of the sample.
Sample Time(const std::vector<std::span<const uint8_t>>& values, int rounds, Op op,
            const std::function<bool()>& counts = nullptr) {
  std::vector<double> us;
  uint64_t bytes = 0;
  double secs = 0;  // of the op's counted: the whole loop's when all count
  const auto t0 = Clock::now();
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < values.size(); ++i) {
      auto t = Clock::now();
      op(i);
      const double took = std::chrono::duration<double, std::micro>(Clock::now() - t).count();
      if (counts && !counts()) continue;
      us.push_back(took);
      secs += took / 1e6;
      bytes += values[i].size();
    }
  if (us.empty()) return Sample{};
  if (!counts) secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::sort(us.begin(), us.end());
  Sample s;
  s.gbps = static_cast<double>(bytes) / secs / 1e9;
  s.ops_per_s = static_cast<double>(us.size()) / secs;
  s.p50_us = us[us.size() / 2];
  s.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return s;
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "device bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void Check(const Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "device bench: %s: %s\n", what, st.ToString().c_str());
    std::exit(1);
  }
}

TensorMeta Meta(uint64_t bytes) { return {DType::kBF16, {static_cast<int64_t>(bytes / 2)}}; }

// `ec-store serve` with a device tier, for the same-host consumer row.
pid_t StartServer(const std::string& dir) {
  return StartEcStore({"--dir", dir, "--pool-size", "1GiB", "--device-pool-size", "1GiB", "serve",
                       "--listen", "127.0.0.1:0"});
}

// "Entry ready on the GPU" from disk: ec-store's disk tier (a copy of the entries per round,
// all on disk after a reopen with empty pools: disk -> host pool, verified -> device)
// against the file baseline's
// load_file(device="cuda") -- read and parse the safetensors file, then copy it from
// pageable memory to the device -- warm (page cache) and cold (dropped first).
std::vector<DeviceRow> ReadyFromDiskRows(const std::vector<std::span<const uint8_t>>& values,
                                         int rounds, const std::string& dir, void* dev_dst) {
  std::filesystem::remove_all(dir);
  uint64_t total = 0;
  for (auto& v : values) total += v.size();
  Options o;
  o.pool_bytes = (rounds + 2) * total * 10 / 8;  // every round's copy fits below the watermark
  o.device_pool_bytes = 64ull << 20;
  FileBaseline base(dir + "/baseline");
  {
    auto s = Store::Open(dir + "/store", o);
    Check(s.status(), "open");
    for (int r = 0; r < rounds; ++r)
      for (size_t i = 0; i < values.size(); ++i)
        Check((*s)->Put("f" + std::to_string(r), std::to_string(i), Meta(values[i].size()),
                        values[i]),
              "put");
    for (size_t i = 0; i < values.size(); ++i)
      Check(base.Save(std::to_string(i), Meta(values[i].size()), values[i]), "baseline save");
    Check((*s)->Close(), "close");
  }
  auto store = Store::Open(dir + "/store", o);  // empty pools: every entry is on disk only
  Check(store.status(), "reopen");
  std::vector<DeviceRow> rows;
  size_t seen = 0;
  rows.push_back({"ready_on_gpu", "ec-store-disk",
                  "GetToDevice of a disk entry: io_uring into the host pool, xxh3, host -> "
                  "device",
                  Time(values, rounds, [&](size_t i) {
                    std::string ns = "f" + std::to_string(seen++ / values.size());
                    Check(
                        (*store)->GetToDevice(ns, std::to_string(i), dev_dst, 64ull << 20).status(),
                        "get from disk");
                  })});
  store->reset();
  std::vector<uint8_t> file;
  uint64_t off = 0;
  TensorMeta meta;
  for (bool cold : {false, true})
    rows.push_back(
        {"ready_on_gpu", cold ? "baseline-cold" : "baseline-warm",
         cold ? "load_file(device=cuda) after posix_fadvise DONTNEED: read + parse + "
                "pageable host -> device"
              : "load_file(device=cuda), page cache warm: read + parse + pageable "
                "host -> device",
         Time(values, rounds, [&](size_t i) {
           if (cold) base.DropCache(std::to_string(i));
           Check(base.Load(std::to_string(i), &file, &off, &meta), "baseline load");
           Check(cudaMemcpy(dev_dst, file.data() + off, values[i].size(), cudaMemcpyHostToDevice),
                 "baseline copy");
         })});
  std::filesystem::remove_all(dir);
  return rows;
}

// A consumer process reading the server's device pool over CUDA IPC: lease, device ->
// device copy into its own buffer, release. The pool's handle is opened once, before timing.
std::vector<DeviceRow> IpcRows(const std::vector<std::span<const uint8_t>>& values, int rounds,
                               const std::string& dir, void* dev_dst) {
  std::filesystem::remove_all(dir);
  pid_t server = StartServer(dir);
  if (server < 0)
    return {{"device_ipc_get", "ec-store", "not run: ec-store serve did not start", {}}};
  auto c = net::Client::Connect("unix:" + dir + "/serve.sock");
  Check(c.status(), "connect");
  for (size_t i = 0; i < values.size(); ++i) {
    Check((*c)->Put("i", std::to_string(i), Meta(values[i].size()), values[i]), "put");
    Check((*c)->AcquireOnDevice("i", std::to_string(i)).status(), "first acquire");  // promote
  }
  std::vector<DeviceRow> rows;
  rows.push_back({"device_ipc_get", "ec-store",
                  "another process: AcquireOnDevice over CUDA IPC + its own device->device copy "
                  "+ release",
                  Time(values, rounds, [&](size_t i) {
                    auto l = (*c)->AcquireOnDevice("i", std::to_string(i));
                    Check(l.status(), "ipc acquire");
                    Check(cudaMemcpy(dev_dst, l->data(), l->size(), cudaMemcpyDeviceToDevice),
                          "ipc copy");
                  })});
  c->reset();
  kill(server, SIGTERM);
  int status;
  waitpid(server, &status, 0);
  std::filesystem::remove_all(dir);
  return rows;
}

// The buffers every row copies between, allocated once: two device buffers and one pinned
// host buffer, each as large as the largest value; every value at its own offset in device
// memory and in pinned memory, which the limits copy from (as a get copies each entry from
// its own pool block: one buffer copied over and over would be read from the GPU's L2
// cache, which no get of a pool entry is); and a stream for the limits' copies.
struct DeviceBuffers {
  DeviceBuffers(const std::vector<std::span<const uint8_t>>& values, uint64_t bytes)
      : largest(bytes) {
    uint64_t total = 0;
    for (auto& v : values) offsets.push_back(total), total += v.size();
    Check(cudaMalloc(&dev_src, largest), "cudaMalloc");
    Check(cudaMalloc(&dev_dst, largest), "cudaMalloc");
    Check(cudaMalloc(&dev_values, total), "cudaMalloc");
    Check(cudaMallocHost(&pinned, largest), "cudaMallocHost");
    Check(cudaMallocHost(&pinned_values, total), "cudaMallocHost");
    for (size_t i = 0; i < values.size(); ++i) {
      std::memcpy(static_cast<uint8_t*>(pinned_values) + offsets[i], values[i].data(),
                  values[i].size());
      Check(cudaMemcpy(static_cast<uint8_t*>(dev_values) + offsets[i], values[i].data(),
                       values[i].size(), cudaMemcpyHostToDevice),
            "fill");
    }
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  }
  ~DeviceBuffers() {
    cudaStreamDestroy(stream);
    cudaFreeHost(pinned_values);
    cudaFreeHost(pinned);
    cudaFree(dev_values);
    cudaFree(dev_src);
    cudaFree(dev_dst);
  }
  const void* DevValue(size_t i) const { return static_cast<uint8_t*>(dev_values) + offsets[i]; }
  const void* PinnedValue(size_t i) const {
    return static_cast<uint8_t*>(pinned_values) + offsets[i];
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  const uint64_t largest;
  std::vector<uint64_t> offsets;
  void *dev_src = nullptr, *dev_dst = nullptr, *pinned = nullptr;
  void *dev_values = nullptr, *pinned_values = nullptr;
  cudaStream_t stream = nullptr;
};

// The limits: the same copies with the same buffers, done the simplest way.
void LimitRows(const std::vector<std::span<const uint8_t>>& values, int rounds, DeviceBuffers& b,
               std::vector<DeviceRow>* rows) {
  auto copy = [&](void* d, const void* src, size_t n, cudaMemcpyKind k) {
    Check(cudaMemcpyAsync(d, src, n, k, b.stream), "copy");
    Check(cudaStreamSynchronize(b.stream), "sync");
  };
  rows->push_back({"device_h2d", "limit",
                   "cudaMemcpyAsync pinned host -> device, same sizes, each from its own buffer",
                   Time(values, rounds, [&](size_t i) {
                     copy(b.dev_dst, b.PinnedValue(i), values[i].size(), cudaMemcpyHostToDevice);
                   })});
  rows->push_back({"device_d2h", "limit",
                   "cudaMemcpyAsync device -> pinned host, same sizes, each from its own buffer",
                   Time(values, rounds, [&](size_t i) {
                     copy(b.pinned, b.DevValue(i), values[i].size(), cudaMemcpyDeviceToHost);
                   })});
  rows->push_back({"device_d2d", "limit",
                   "cudaMemcpyAsync device -> device, same sizes, each from its own buffer",
                   Time(values, rounds, [&](size_t i) {
                     copy(b.dev_dst, b.DevValue(i), values[i].size(), cudaMemcpyDeviceToDevice);
                   })});
}

// Gets of entries held on one tier into memory of another: device-tier entries (put from
// device memory) and host-pool entries (put from host memory), each value under both.
void GetRows(Store* store, const std::vector<std::span<const uint8_t>>& values, int rounds,
             DeviceBuffers& b, std::vector<DeviceRow>* rows) {
  for (size_t i = 0; i < values.size(); ++i) {
    Check(cudaMemcpy(b.dev_src, values[i].data(), values[i].size(), cudaMemcpyHostToDevice),
          "fill");
    Check(store->PutFromDevice("d", std::to_string(i), Meta(values[i].size()), b.dev_src,
                               values[i].size()),
          "put from device");
    Check(store->Put("h", std::to_string(i), Meta(values[i].size()), values[i]), "put");
  }
  auto get_to_device = [&](const char* ns) {
    return [&, ns](size_t i) {
      Check(store->GetToDevice(ns, std::to_string(i), b.dev_dst, b.largest).status(), "get");
    };
  };
  rows->push_back({"device_get_d2d", "ec-store",
                   "GetToDevice of a device-tier entry into a caller's device buffer",
                   Time(values, rounds, get_to_device("d"))});
  // The same bytes with the store's part cut to a lease: where a get's time beyond the copy
  // goes (the lease, or the store's own stream and wait).
  rows->push_back(
      {"device_lease_d2d", "ec-store",
       "AcquireOnDevice of a device-tier entry, the caller's own copy, release",
       Time(values, rounds, [&](size_t i) {
         auto l = store->AcquireOnDevice("d", std::to_string(i));
         Check(l.status(), "acquire on device");
         Check(cudaMemcpyAsync(b.dev_dst, l->data(), l->size(), cudaMemcpyDeviceToDevice, b.stream),
               "copy");
         Check(cudaStreamSynchronize(b.stream), "sync");
       })});
  rows->push_back({"device_get_h2d", "ec-store",
                   "GetToDevice of a host-pool entry (pinned, registered with CUDA)",
                   Time(values, rounds, get_to_device("h"))});
  rows->push_back({"device_get_d2h", "ec-store",
                   "Get of a device-only entry into pinned host memory (a device->host copy)",
                   Time(values, rounds, [&](size_t i) {
                     std::span<uint8_t> dst{static_cast<uint8_t*>(b.pinned), b.largest};
                     Check(store->Get("d", std::to_string(i), dst).status(), "get");
                   })});
}

// Promotion host -> device and demotion device -> host: once per entry (both copies stay),
// so fresh entries each round (namespaces p<round> and m<round>).
void PromoteDemoteRows(Store* store, const std::vector<std::span<const uint8_t>>& values,
                       int rounds, DeviceBuffers& b, std::vector<DeviceRow>* rows) {
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < values.size(); ++i) {
      const TensorMeta m = Meta(values[i].size());
      Check(store->Put("p" + std::to_string(r), std::to_string(i), m, values[i]), "put");
      Check(cudaMemcpy(b.dev_src, values[i].data(), values[i].size(), cudaMemcpyHostToDevice),
            "fill");
      Check(store->PutFromDevice("m" + std::to_string(r), std::to_string(i), m, b.dev_src,
                                 values[i].size()),
            "put from device");
    }
  size_t seen = 0;  // gets so far in this row: the round is seen / values.size()
  auto ns = [&](const char* prefix) { return prefix + std::to_string(seen++ / values.size()); };
  rows->push_back({"device_promote", "ec-store",
                   "AcquireOnDevice of a host-only entry: host -> device promotion, leased",
                   Time(values, rounds, [&](size_t i) {
                     Check(store->AcquireOnDevice(ns("p"), std::to_string(i)).status(),
                           "acquire on device");
                   })});
  seen = 0;
  // Only acquires that demoted count: one served from a host copy made meanwhile (the host
  // evictor's write-back, say) copies nothing and would pull the row below its own limit.
  bool demoted = false;
  size_t hits = 0;
  Sample demote = Time(
      values, rounds,
      [&](size_t i) {
        auto lease = store->Acquire(ns("m"), std::to_string(i));
        Check(lease.status(), "acquire");
        demoted = lease->served_from() == Tier::kDevice;
      },
      [&] { return demoted || (++hits, false); });
  rows->push_back(
      {"device_demote", "ec-store",
       "Acquire (host) of a device-only entry: device -> host demotion copy into "
       "the host pool, leased" +
           (hits ? "; " + std::to_string(hits) + " served from a host copy made meanwhile, left out"
                 : std::string()),
       demote});
}

}  // namespace

std::vector<DeviceRow> RunDevice(const std::vector<std::span<const uint8_t>>& values, int rounds,
                                 const std::string& dir) {
  std::string why;
  if (cuda::DeviceCount(&why) == 0) return {{"device", "ec-store", "not run: " + why, {}}};
  uint64_t largest = 0, total = 0;
  for (auto& v : values) largest = std::max<uint64_t>(largest, v.size()), total += v.size();
  DeviceBuffers b(values, largest);
  std::vector<DeviceRow> rows;
  LimitRows(values, rounds, b, &rows);
  std::filesystem::remove_all(dir);
  // Both pools hold everything below their watermarks: the rows time the copies, not
  // evictions or spills running beside them.
  Options o;
  o.pool_bytes = (2 * rounds + 4) * total + (64ull << 20);
  o.device_pool_bytes = (2 * rounds + 4) * total + (64ull << 20);
  auto opened = Store::Open(dir, o);
  Check(opened.status(), "open");
  GetRows(opened->get(), values, rounds, b, &rows);
  PromoteDemoteRows(opened->get(), values, rounds, b, &rows);
  Check((*opened)->Close(), "close");
  opened->reset();
  std::filesystem::remove_all(dir);
  for (auto& r : IpcRows(values, rounds, dir + "-ipc", b.dev_dst)) rows.push_back(std::move(r));
  for (auto& r : ReadyFromDiskRows(values, rounds, dir + "-ready", b.dev_dst))
    rows.push_back(std::move(r));
  return rows;
}
#endif

}  // namespace ecstore::bench
