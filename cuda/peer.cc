#include "cuda/peer.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>

#include "base/mutex.h"

namespace ecstore::cuda {

const char* CrossGpuName(CrossGpu way) {
  switch (way) {
    case CrossGpu::kSameDevice:
      return "same device";
    case CrossGpu::kPeer:
      return "peer";
    case CrossGpu::kHostPath:
      return "host path";
  }
  return "?";
}

PeerRoutes& PeerRoutes::Process() {
  static PeerRoutes* routes = [] {
    const char* env = std::getenv("EC_STORE_PEER_COPY");
    const bool allow = !(env && std::strcmp(env, "0") == 0);
    return new PeerRoutes(&CudaTopology(), allow);  // never destroyed: used until exit
  }();
  return *routes;
}

CrossGpu PeerRoutes::Route(int dst_device, int src_device) {
  if (dst_device == src_device) return CrossGpu::kSameDevice;
  MutexLock l(&mu_);
  if (!allow_) return CrossGpu::kHostPath;
  auto [it, fresh] = peer_.try_emplace({dst_device, src_device}, false);
  if (fresh) {
    if (!topology_->CanAccessPeer(dst_device, src_device)) {
      spdlog::info(
          "GPU {} cannot reach GPU {}'s memory directly: copies between them go "
          "through host memory",
          dst_device, src_device);
    } else if (Status st = topology_->EnablePeerAccess(dst_device, src_device); !st.ok()) {
      spdlog::warn(
          "enabling peer access from GPU {} to GPU {}: {}; copies between them go "
          "through host memory",
          dst_device, src_device, st.ToString());
    } else {
      it->second = true;
    }
  }
  return it->second ? CrossGpu::kPeer : CrossGpu::kHostPath;
}

void PeerRoutes::AllowPeer(bool allow) {
  MutexLock l(&mu_);
  allow_ = allow;
}

bool PeerRoutes::peer_allowed() const {
  MutexLock l(&mu_);
  return allow_;
}

void PeerRoutes::Count(CrossGpu way, uint64_t bytes) {
  MutexLock l(&mu_);
  if (way == CrossGpu::kPeer)
    ++counts_.peer_copies, counts_.peer_bytes += bytes;
  else if (way == CrossGpu::kHostPath)
    ++counts_.host_path_copies, counts_.host_path_bytes += bytes;
}

PeerRoutes::Counts PeerRoutes::counts() const {
  MutexLock l(&mu_);
  return counts_;
}

}  // namespace ecstore::cuda
