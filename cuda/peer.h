// PeerRoutes: how a copy from one GPU's memory to another GPU of this process goes -- a
// peer copy (NVLink or PCIe peer-to-peer) where the pair can reach each other, with peer
// access enabled once per pair, or through host memory where it cannot (or peer copies are
// turned off: EC_STORE_PEER_COPY=0). Each cross-GPU copy is counted by the way it went, for
// a cache's transfer stats.
//
//   PeerRoutes& routes = PeerRoutes::Process();
//   switch (routes.Route(dst_device, src_device)) {
//     case CrossGpu::kSameDevice: /* a device->device copy */ break;
//     case CrossGpu::kPeer: /* cuda::EnqueuePeerCopy; routes.Count(kPeer, n) */ break;
//     case CrossGpu::kHostPath: /* the entry's host copy, host->device */ break;
//   }
//
// The GPUs' answers come through a PeerTopology: CUDA's (cudaDeviceCanAccessPeer,
// cudaDeviceEnablePeerAccess), or a test's fake.
// Thread rules: thread-safe; the topology is called under the routes' lock.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "base/mutex.h"
#include "base/status.h"

namespace ecstore::cuda {

enum class CrossGpu { kSameDevice, kPeer, kHostPath };
const char* CrossGpuName(CrossGpu way);  // "same device", "peer", "host path"

class PeerTopology {
 public:
  virtual ~PeerTopology() = default;
  // Whether `device` can read and write `peer`'s memory directly.
  virtual bool CanAccessPeer(int device, int peer) = 0;
  // Lets `device`'s context reach `peer`'s memory (once; Ok where it already can).
  virtual Status EnablePeerAccess(int device, int peer) = 0;
};
// CUDA's; in a build without CUDA, one where no pair can reach each other.
PeerTopology& CudaTopology();

class PeerRoutes {
 public:
  // allow_peer false: every cross-GPU copy takes the host path.
  PeerRoutes(PeerTopology* topology, bool allow_peer) : topology_(topology), allow_(allow_peer) {}
  // This process's: CUDA's topology, peer copies allowed unless EC_STORE_PEER_COPY=0.
  static PeerRoutes& Process();

  // The way from src_device's memory to dst_device's. The first time a pair is asked, its
  // peer access is enabled (from dst's context, which issues the copy); a pair whose access
  // cannot be enabled takes the host path from then on (the reason is logged once).
  CrossGpu Route(int dst_device, int src_device);
  // Turns peer copies on or off from now on (a test of the host path, or an operator's).
  void AllowPeer(bool allow);
  bool peer_allowed() const;

  // Cross-GPU copies made, by the way they went.
  struct Counts {
    uint64_t peer_copies = 0, peer_bytes = 0;
    uint64_t host_path_copies = 0, host_path_bytes = 0;
  };
  void Count(CrossGpu way, uint64_t bytes);
  Counts counts() const;

 private:
  PeerTopology* const topology_;
  mutable Mutex mu_;
  bool allow_ GUARDED_BY(mu_);
  std::map<std::pair<int, int>, bool> peer_ GUARDED_BY(mu_);  // (dst, src) -> peer copies work
  Counts counts_ GUARDED_BY(mu_);
};

}  // namespace ecstore::cuda
