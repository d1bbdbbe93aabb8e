// PeerRoutes over a fake topology: the way a cross-GPU copy takes, peer access enabled once
// per pair, the host path where a pair cannot reach each other, its access cannot be
// enabled, or peer copies are off; and the counts by way.
#include "cuda/peer.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "cuda/cuda.h"

namespace ecstore::cuda {
namespace {

// GPUs 0 and 1 reach each other (an NVLink pair); 2 reaches no one (another PCIe root);
// enabling access to 3 fails (the driver's limit of peers, say).
class FakeTopology : public PeerTopology {
 public:
  bool CanAccessPeer(int device, int peer) override {
    MutexLock l(&mu);
    asked.insert({device, peer});
    return device != 2 && peer != 2;
  }
  Status EnablePeerAccess(int device, int peer) override {
    MutexLock l(&mu);
    enabled.push_back({device, peer});
    if (peer == 3) return Status::IOError("cudaDeviceEnablePeerAccess: too many peers");
    return Status::Ok();
  }
  Mutex mu;
  std::set<std::pair<int, int>> asked;
  std::vector<std::pair<int, int>> enabled;
};

TEST(PeerRoutes, APairThatReachesEachOtherIsAPeerCopyEnabledOnceFromTheDestination) {
  FakeTopology t;
  PeerRoutes routes(&t, true);
  EXPECT_EQ(routes.Route(1, 0), CrossGpu::kPeer);
  EXPECT_EQ(routes.Route(1, 0), CrossGpu::kPeer);
  EXPECT_EQ(routes.Route(0, 1), CrossGpu::kPeer);  // the other direction is its own pair
  ASSERT_EQ(t.enabled.size(), 2u);
  EXPECT_EQ(t.enabled[0], std::make_pair(1, 0));  // dst's context reaches src's memory
  EXPECT_EQ(t.enabled[1], std::make_pair(0, 1));
}

TEST(PeerRoutes, TheSameDeviceIsNoCrossGpuCopyAndAsksNothing) {
  FakeTopology t;
  PeerRoutes routes(&t, true);
  EXPECT_EQ(routes.Route(2, 2), CrossGpu::kSameDevice);
  EXPECT_TRUE(t.asked.empty());
  EXPECT_TRUE(t.enabled.empty());
}

TEST(PeerRoutes, APairThatCannotReachOrWhoseAccessFailsTakesTheHostPath) {
  FakeTopology t;
  PeerRoutes routes(&t, true);
  EXPECT_EQ(routes.Route(0, 2), CrossGpu::kHostPath);
  EXPECT_EQ(routes.Route(2, 0), CrossGpu::kHostPath);
  EXPECT_EQ(routes.Route(0, 3), CrossGpu::kHostPath);  // enabling failed
  EXPECT_EQ(routes.Route(0, 3), CrossGpu::kHostPath);  // and is not tried again
  EXPECT_EQ(t.enabled.size(), 1u);
}

TEST(PeerRoutes, PeerCopiesTurnedOffTakeTheHostPathUntilTurnedOn) {
  FakeTopology t;
  PeerRoutes routes(&t, false);
  EXPECT_FALSE(routes.peer_allowed());
  EXPECT_EQ(routes.Route(1, 0), CrossGpu::kHostPath);
  EXPECT_TRUE(t.asked.empty());
  routes.AllowPeer(true);
  EXPECT_EQ(routes.Route(1, 0), CrossGpu::kPeer);
  routes.AllowPeer(false);
  EXPECT_EQ(routes.Route(1, 0), CrossGpu::kHostPath);
}

TEST(PeerRoutes, CopiesAreCountedByTheWayTheyWent) {
  FakeTopology t;
  PeerRoutes routes(&t, true);
  routes.Count(CrossGpu::kPeer, 100);
  routes.Count(CrossGpu::kPeer, 50);
  routes.Count(CrossGpu::kHostPath, 7);
  routes.Count(CrossGpu::kSameDevice, 1000);  // not a cross-GPU copy
  PeerRoutes::Counts c = routes.counts();
  EXPECT_EQ(c.peer_copies, 2u);
  EXPECT_EQ(c.peer_bytes, 150u);
  EXPECT_EQ(c.host_path_copies, 1u);
  EXPECT_EQ(c.host_path_bytes, 7u);
  EXPECT_STREQ(CrossGpuName(CrossGpu::kHostPath), "host path");
}

TEST(PeerRoutes, ThreadsAskingAtOnceEnableAPairOnce) {
  FakeTopology t;
  PeerRoutes routes(&t, true);
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&] {
      for (int k = 0; k < 100; ++k) {
        EXPECT_EQ(routes.Route(1, 0), CrossGpu::kPeer);
        routes.Count(CrossGpu::kPeer, 1);
      }
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(t.enabled.size(), 1u);
  EXPECT_EQ(routes.counts().peer_copies, 800u);
}

TEST(PeerRoutes, WithFewerThanTwoGpusNoPairReachesEachOther) {
  if (DeviceCount() >= 2) GTEST_SKIP() << "this machine has two GPUs: peer_gpu_test.cc's case";
  PeerRoutes routes(&CudaTopology(), true);
  EXPECT_EQ(routes.Route(1, 0), CrossGpu::kHostPath);
}

}  // namespace
}  // namespace ecstore::cuda
