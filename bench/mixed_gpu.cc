// mixed_gpu: the mixed workload's plan on the GPU machine, as a GPU engine runs it. An item's
// encoder output is on the GPU and so is its destination: a hit must land in device memory,
// and a miss (the encoder ran) is saved from device memory.
//   ec-store, as the vLLM connector does it (ecstore.transfer.load_many, AsyncSaver): the
//     step's items leased together (AcquireMany: the disk-only ones read into the pool in one
//     batch), each copied host -> device straight from the CUDA-registered pool; a miss is a
//     device -> host copy into a reserved pool block, then Commit.
//   ec-store-streamed: the step through GetManyToDevice (cache/device_load.h), what the
//     connector calls since the twenty-third round: each host -> device copy enqueued as its
//     item's bytes become readable (a pool hit's at once, a disk read's piece by piece).
//   ec-store-daemon: the same through `ec-store serve` on this host, over shared memory
//     (one GET_SHM_MANY a step; -streamed: one GET_SHM_STREAM, through GetManyToDevice); a
//     miss is put from device memory (PUT_DEVICE), or (-arena) a device -> host copy into a
//     block of the connection's put arena (registered with CUDA), which the daemon copies.
//   The baseline, as ECExampleConnector does it: load_file(device="cuda") -- read the file
//     into pageable memory, then copy it to the device -- one item after another; a miss is
//     tensor.cpu() then save_file. Its page cache is held to the same budget as the pool.

#include <cstring>
#include <filesystem>

#include "bench/baseline.h"
#include "bench/mixed.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "cache/device_load.h"
#include "cuda/cuda.h"
#include "net/client.h"

#ifdef EC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ecstore::bench {

#ifndef EC_HAVE_CUDA
void MixedGpuWorkload(const Config&, Payloads&) {
  Add({"mixed_gpu", "ec-store", 0, 0, 0, 0, -1, "not run: built without CUDA"});
}
#else
namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "\nmixed_gpu: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Device memory: one destination per item of a step, and one encoder output per shape.
struct GpuSide {
  std::vector<void*> dst;
  std::vector<void*> out;  // by shape
  cudaStream_t stream = nullptr;
  GpuSide(Payloads& pl) {
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    for (int i = 0; i < kMixedBatch; ++i) {
      dst.push_back(nullptr);
      Check(cudaMalloc(&dst.back(), 60 * kMiB), "cudaMalloc");
    }
    for (size_t s = 0; s < std::size(kShapes); ++s) {
      auto bytes = pl.Get(static_cast<int>(s), s);
      out.push_back(nullptr);
      Check(cudaMalloc(&out.back(), bytes.size()), "cudaMalloc");
      Check(cudaMemcpy(out.back(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "upload");
    }
  }
  ~GpuSide() {
    for (void* p : dst) cudaFree(p);
    for (void* p : out) cudaFree(p);
    cudaStreamDestroy(stream);
  }
};

// Copies each leased item of step i up to its device buffer on one stream, and has `save`
// store each miss (the encoder's output, from device memory). Returns the misses.
template <typename Save>
uint64_t CopyUp(std::vector<Result<ReadLease> >& leases, const MixedPlan& mp, size_t i, GpuSide& g,
                const Save& save) {
  uint64_t misses = 0;
  for (size_t j = 0; j < leases.size(); ++j) {
    if (leases[j].ok()) {
      Check(cudaMemcpyAsync(g.dst[j], leases[j]->data(), leases[j]->size(), cudaMemcpyHostToDevice,
                            g.stream),
            "host -> device");
      continue;
    }
    if (!leases[j].status().IsNotFound()) Die(leases[j].status(), "mixed_gpu acquire");
    ++misses;
    save(mp.entries[mp.steps[i][j]]);
  }
  Check(cudaStreamSynchronize(g.stream), "load");  // every copy done before the releases
  return misses;
}

// How a step's hits reach the GPU: AcquireMany then a copy each; Acquire key by key then a
// copy each; GetManyToDevice (each copy enqueued as the bytes become readable).
enum class Load { kBatch, kSingle, kStreamed };

// The step's items through GetManyToDevice into their device buffers, then `save` of each
// miss. Returns the misses.
template <typename Save>
uint64_t StreamUp(Cache* c, const MixedPlan& mp, size_t i, GpuSide& g, const Save& save) {
  std::vector<std::span<uint8_t> > dsts;
  for (int j = 0; j < kMixedBatch; ++j)
    dsts.emplace_back(static_cast<uint8_t*>(g.dst[j]), 60 * kMiB);
  const std::vector<std::string> keys = mp.Keys(i);
  dsts.resize(keys.size());
  auto got = GetManyToDevice(*c, "bench", keys, dsts, 0, reinterpret_cast<uintptr_t>(g.stream));
  uint64_t misses = 0;
  for (size_t j = 0; j < got.size(); ++j) {
    if (got[j].ok()) continue;
    if (!got[j].status().IsNotFound()) Die(got[j].status(), "mixed_gpu load");
    ++misses;
    save(mp.entries[mp.steps[i][j]]);
  }
  return misses;
}

// One step through ec-store: the hits loaded as `load` says, a miss copied device -> host
// into a reserved pool block. Returns the misses.
uint64_t StoreStep(Store* store, const MixedPlan& mp, size_t i, GpuSide& g, Load load) {
  auto save = [&](const Entry& e) {
    auto r = store->Reserve("bench", e.key, Payloads::Meta(e.shape), Bytes(e));
    Die(r.status(), "mixed_gpu reserve");
    Check(cudaMemcpy(r->bytes().data(), g.out[e.shape], Bytes(e), cudaMemcpyDeviceToHost),
          "device -> host");
    r->ChecksumWhenSpilled();  // as the connector's saver commits
    Die(store->Commit(std::move(r).value()), "mixed_gpu commit");
  };
  if (load == Load::kStreamed) return StreamUp(store, mp, i, g, save);
  const std::vector<std::string> keys = mp.Keys(i);
  std::vector<Result<ReadLease> > leases;
  if (load == Load::kBatch)
    leases = store->AcquireMany("bench", keys);
  else  // key by key: the connector before AcquireMany
    for (const std::string& k : keys) leases.push_back(store->Acquire("bench", k));
  return CopyUp(leases, mp, i, g, save);
}

double StorePass(const Config& cfg, const MixedPlan& mp, GpuSide& g, Load load) {
  const std::string sdir = cfg.dir + "/mixed-gpu";
  std::filesystem::remove_all(sdir);
  auto store = OpenStore(cfg, sdir, mp.pool);
  auto registrar = cuda::NewHostRegistrar();
  Die(store->AddRegistrar(registrar.get()), "register the pool with CUDA");
  Latencies lat;
  uint64_t misses = 0;
  const DiskCounters disk0 = SampleDisk(sdir);
  auto t0 = Clock::now();
  for (size_t i = 0; i < mp.steps.size(); ++i) {
    auto t = Clock::now();
    misses += StoreStep(store.get(), mp, i, g, load);
    lat.Add(t);
  }
  const double secs = Since(t0);
  const double ops = static_cast<double>(mp.steps.size()) * kMixedBatch;
  StoreStats st = *store->Stats();
  char note[320];
  std::snprintf(note, sizeof note,
                "%s + host->device from the registered pool; misses saved device->host into a "
                "Reserve; %s; %llu misses, pool hits %llu, disk hits %llu",
                load == Load::kBatch    ? "AcquireMany"
                : load == Load::kSingle ? "Acquire key by key"
                                        : "GetManyToDevice (copies enqueued as bytes land)",
                DiskNote(sdir, disk0, secs, ops).c_str(), (unsigned long long)misses,
                (unsigned long long)st.pool().hits, (unsigned long long)st.disk().hits);
  const double gbps = static_cast<double>(mp.Bytes()) / secs / 1e9;
  const char* row = load == Load::kBatch    ? "ec-store"
                    : load == Load::kSingle ? "ec-store-single"
                                            : "ec-store-streamed";
  Add({"mixed_gpu", row, gbps, ops / secs, lat.P(0.5), lat.P(0.99), -1, note});
  store->RemoveRegistrar(registrar.get());
  store.reset();
  std::filesystem::remove_all(sdir);
  return gbps;
}

// One step through a same-host daemon, as the connector does it: the step's items leased in
// one GET_SHM_MANY and copied up from the mapped pool (registered with CUDA); a miss put from
// device memory (PUT_DEVICE: the daemon copies it into its pool itself) where the daemon
// offers it, else copied device -> host into a block of the put arena and committed.
// Returns the misses.
uint64_t DaemonStep(net::Client* c, const MixedPlan& mp, size_t i, GpuSide& g, bool device_puts,
                    bool streamed) {
  auto save = [&](const Entry& e) {
    if (device_puts) {
      Die(c->PutFromDevice("bench", e.key, Payloads::Meta(e.shape), g.out[e.shape], Bytes(e),
                           /*checksum_when_spilled=*/true),
          "daemon device put");
      return;
    }
    auto r = c->ReservePut("bench", e.key, Payloads::Meta(e.shape), Bytes(e));
    Die(r.status(), "daemon reserve");
    Check(cudaMemcpy(r->bytes().data(), g.out[e.shape], Bytes(e), cudaMemcpyDeviceToHost),
          "device -> host");
    Die(c->CommitPut(std::move(r).value(), /*checksum_when_spilled=*/true), "daemon commit");
  };
  if (streamed) return StreamUp(c, mp, i, g, save);
  std::vector<Result<ReadLease> > leases = c->AcquireMany("bench", mp.Keys(i));
  return CopyUp(leases, mp, i, g, save);
}

// With `device_puts` (where the daemon offers them: the connector's saver does so) the row
// ec-store-daemon (-streamed: loaded through GetManyToDevice), else ec-store-daemon-arena:
// misses through the put arena.
void DaemonPass(const Config& cfg, const MixedPlan& mp, GpuSide& g, bool want_device_puts,
                bool streamed) {
  const char* row = !want_device_puts ? "ec-store-daemon-arena"
                    : streamed        ? "ec-store-daemon-streamed"
                                      : "ec-store-daemon";
  Daemon daemon(cfg, cfg.dir + "/mixed-gpu-daemon", mp.pool);
  net::Client* client = daemon.client();
  if (!client) {
    Add({"mixed_gpu", row, 0, 0, 0, 0, -1, "not run: " + daemon.why()});
    return;
  }
  auto pool = client->shared_pool();
  Check(cudaHostRegister(const_cast<uint8_t*>(pool.data()), pool.size(), cudaHostRegisterReadOnly),
        "register the daemon's pool");
  Die(client->RegisterArenasWith(cuda::NewHostRegistrar()), "register put arenas with CUDA");
  const bool device_puts = want_device_puts && client->caps().device_puts;
  if (device_puts) Die(client->PrepareDevicePuts(), "the daemon's pool registered for device puts");
  Latencies lat;
  uint64_t misses = 0;
  auto t0 = Clock::now();
  for (size_t i = 0; i < mp.steps.size(); ++i) {
    auto t = Clock::now();
    misses += DaemonStep(client, mp, i, g, device_puts, streamed);
    lat.Add(t);
  }
  const double secs = Since(t0);
  const double ops = static_cast<double>(mp.steps.size()) * kMixedBatch;
  const std::string note =
      std::string(streamed ? "a same-host daemon: GetManyToDevice (one GET_SHM_STREAM a step, "
                             "each host->device copy enqueued as the bytes land in its pool); "
                           : "a same-host daemon: AcquireMany (one GET_SHM_MANY a step) + "
                             "host->device from its mapped pool; ") +
      "misses " +
      (device_puts ? std::string("put from device memory (PUT_DEVICE: copied by the daemon); ")
                   : std::string("device->host into its put arena; ")) +
      daemon.Tally(misses);
  Add({"mixed_gpu", row, static_cast<double>(mp.Bytes()) / secs / 1e9, ops / secs, lat.P(0.5),
       lat.P(0.99), -1, note});
  cudaHostUnregister(const_cast<uint8_t*>(pool.data()));
}

void BaselinePass(const Config& cfg, const MixedPlan& mp, GpuSide& g, double store_gbps) {
  const std::string bdir = cfg.dir + "/baseline-mixed-gpu";
  std::filesystem::remove_all(bdir);
  FileBaseline base(bdir);
  base.SetBudget(mp.pool);
  std::vector<uint8_t> file, host;
  uint64_t off = 0;
  TensorMeta meta;
  Latencies lat;
  const DiskCounters disk0 = SampleDisk(cfg.dir);  // bdir is made by the first save
  auto t0 = Clock::now();
  for (const auto& step : mp.steps) {
    auto t = Clock::now();
    for (size_t j = 0; j < step.size(); ++j) {
      const Entry& e = mp.entries[step[j]];
      if (base.Exists(e.key)) {
        Die(base.Load(e.key, &file, &off, &meta), "baseline load");
        Check(cudaMemcpy(g.dst[j], file.data() + off, Bytes(e), cudaMemcpyHostToDevice),
              "baseline host -> device");
      } else {
        host.resize(Bytes(e));
        Check(cudaMemcpy(host.data(), g.out[e.shape], Bytes(e), cudaMemcpyDeviceToHost),
              "baseline device -> host");
        Die(base.Save(e.key, Payloads::Meta(e.shape), host), "baseline save");
      }
    }
    lat.Add(t);
  }
  const double secs = Since(t0);
  const double ops = static_cast<double>(mp.steps.size()) * kMixedBatch;
  const double gbps = static_cast<double>(mp.Bytes()) / secs / 1e9;
  char note[300];
  std::snprintf(note, sizeof note,
                "load_file(device=cuda) one item after another, misses .cpu() + save_file; "
                "%s; ec-store/baseline %.2fx",
                DiskNote(cfg.dir, disk0, secs, ops).c_str(), store_gbps / gbps);
  Add({"mixed_gpu", "baseline", gbps, ops / secs, lat.P(0.5), lat.P(0.99), -1, note});
  std::filesystem::remove_all(bdir);
}

}  // namespace

void MixedGpuWorkload(const Config& cfg, Payloads& pl) {
  std::string why;
  if (cuda::DeviceCount(&why) == 0) {
    Add({"mixed_gpu", "ec-store", 0, 0, 0, 0, -1, "not run: no GPU here (" + why + ")"});
    return;
  }
  const MixedPlan mp = MakeMixedPlan(cfg);
  GpuSide g(pl);
  Progress("mixed_gpu: ec-store, steps of " + std::to_string(kMixedBatch) +
           " items to the GPU, AcquireMany");
  const double store_gbps = StorePass(cfg, mp, g, Load::kBatch);
  Progress("mixed_gpu: ec-store, the same steps through GetManyToDevice");
  StorePass(cfg, mp, g, Load::kStreamed);
  Progress("mixed_gpu: ec-store, the same steps key by key (Acquire)");
  StorePass(cfg, mp, g, Load::kSingle);
  Progress("mixed_gpu: ec-store serve on this host, over shared memory");
  DaemonPass(cfg, mp, g, /*want_device_puts=*/true, /*streamed=*/false);
  DaemonPass(cfg, mp, g, /*want_device_puts=*/true, /*streamed=*/true);
  DaemonPass(cfg, mp, g, /*want_device_puts=*/false, /*streamed=*/false);
  Progress("mixed_gpu: baseline, load_file(device=cuda) one after another");
  BaselinePass(cfg, mp, g, store_gbps);
}
#endif

}  // namespace ecstore::bench
