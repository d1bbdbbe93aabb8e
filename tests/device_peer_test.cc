// Gets from one GPU's device pool into another GPU's memory -- the encoder on GPU 0, prefill
// on GPU 1 -- on a real two-GPU machine: byte-exact by a peer copy where the pair can reach
// each other (cuda/peer.h), through host memory with peer copies off; from an embedded device
// tier and from a same-host daemon's pool (also one placed on the second GPU with
// --device-pool-gpu); and a device lease read from the other GPU while it is held. With one GPU
// they skip and say so; with none, as every GPU test does (tests/gpu_test_util.h).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "base/units.h"
#include "cache/buffer_io.h"
#include "cuda/cuda.h"
#include "cuda/peer.h"
#include "store/store.h"
#include "tests/device_test_util.h"
#include "tests/gpu_test_util.h"

namespace ecstore {
namespace {

#ifdef EC_HAVE_CUDA
using testing::Bf16;
using testing::ConnectUnix;
using testing::DeviceBuffer;
using testing::Payload;
using testing::StartServer;
using testing::StopProcess;
using testing::TempDir;

#define REQUIRE_TWO_GPUS()                                                                 \
  do {                                                                                     \
    REQUIRE_GPU();                                                                         \
    if (int n = cuda::DeviceCount(); n < 2)                                                \
      GTEST_SKIP() << "needs two GPUs, this machine has " << n                             \
                   << ": run `make test-gpu` on a two-GPU machine for the cross-GPU gets"; \
  } while (0)

constexpr uint64_t kFrame = 2867200;  // 350 x 4096 bf16
constexpr uint64_t kImage = 10616832;

// The way a get from GPU `from` to GPU `to` goes, as this process routes it.
cuda::CrossGpu Way(int to, int from) { return cuda::PeerRoutes::Process().Route(to, from); }

// Runs `check` and says which way its one cross-GPU copy went, by the process's counts.
cuda::CrossGpu CountedWay(const std::function<void()>& check) {
  const auto before = cuda::PeerRoutes::Process().counts();
  check();
  const auto after = cuda::PeerRoutes::Process().counts();
  EXPECT_EQ(after.peer_copies + after.host_path_copies,
            before.peer_copies + before.host_path_copies + 1)
      << "one cross-GPU copy";
  return after.peer_copies > before.peer_copies ? cuda::CrossGpu::kPeer : cuda::CrossGpu::kHostPath;
}

// Peer copies off for a test's scope, on again after.
struct PeerCopiesOff {
  PeerCopiesOff() { cuda::PeerRoutes::Process().AllowPeer(false); }
  ~PeerCopiesOff() { cuda::PeerRoutes::Process().AllowPeer(true); }
};

struct Stream {
  explicit Stream(int device) {
    cudaSetDevice(device);
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cudaSetDevice(0);
  }
  ~Stream() { cudaStreamDestroy(s); }
  uintptr_t handle() const { return reinterpret_cast<uintptr_t>(s); }
  cudaStream_t s;
};

std::unique_ptr<Store> EmbeddedOnGpu0(const TempDir& dir) {
  Options o;
  o.pool_bytes = 64 * kMiB;
  o.device_pool_bytes = 64 * kMiB;
  o.device = 0;
  auto s = Store::Open(dir.path(), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

void PutFromGpu0(Store* s, const std::string& key, uint64_t seed, uint64_t n) {
  DeviceBuffer src(n, 0);
  src.Fill(seed);
  Status st = s->PutFromDevice("ns", key, Bf16(n), src.get(), n);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(s->Lookup("ns", key)->tiers.has(Tier::kDevice));
}

TEST(DevicePeer, AnEmbeddedTiersEntryLandsOnTheOtherGpuByAPeerCopy) {
  REQUIRE_TWO_GPUS();
  TempDir dir;
  auto s = EmbeddedOnGpu0(dir);
  ASSERT_NE(s, nullptr);
  for (uint64_t n : {kFrame, kImage}) {
    const std::string key = std::to_string(n);
    PutFromGpu0(s.get(), key, n, n);
    DeviceBuffer dst(n, 1);
    EXPECT_EQ(CountedWay([&] { ASSERT_TRUE(s->GetToDevice("ns", key, dst.get(), n).ok()); }),
              Way(1, 0));
    EXPECT_TRUE(dst.Read() == Payload(n, n)) << key << ": bytes differ on GPU 1";
    // As the connector asks: a descriptor on GPU 1 and a stream of that GPU.
    DeviceBuffer again(n, 1);
    Stream st(1);
    auto got =
        GetIntoBuffers(*s, "ns", {key}, {BufferDesc::Device(again.get(), n, 1, st.handle())});
    ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
    EXPECT_TRUE(again.Read() == Payload(n, n));
  }
}

TEST(DevicePeer, WithPeerCopiesOffTheOtherGpuGetsTheEntryThroughHostMemory) {
  REQUIRE_TWO_GPUS();
  TempDir dir;
  auto s = EmbeddedOnGpu0(dir);
  ASSERT_NE(s, nullptr);
  PutFromGpu0(s.get(), "k", 3, kImage);
  PeerCopiesOff off;
  DeviceBuffer dst(kImage, 1);
  EXPECT_EQ(CountedWay([&] { ASSERT_TRUE(s->GetToDevice("ns", "k", dst.get(), kImage).ok()); }),
            cuda::CrossGpu::kHostPath);
  EXPECT_TRUE(dst.Read() == Payload(3, kImage));
  EXPECT_TRUE(s->Lookup("ns", "k")->tiers.has(Tier::kPool)) << "the host copy it went through";
}

struct Daemon {
  explicit Daemon(std::vector<std::string> flags = {})
      : pid(StartServer(dir.path(), "64MiB", flags)), c(ConnectUnix(dir.path())) {}
  ~Daemon() {
    c.reset();
    StopProcess(pid, SIGTERM);
  }
  uint64_t Leases() { return c->Stats()->leases; }
  // Put from GPU `from`'s memory: the daemon copies it into its device pool.
  void Put(const std::string& key, uint64_t seed, uint64_t n, int from) {
    DeviceBuffer src(n, from);
    src.Fill(seed);
    Stream st(from);
    PutRoute way;
    Status put = PutFromBuffer(*c, "ns", key, Bf16(n),
                               BufferDesc::Device(src.get(), n, from, st.handle()), {}, &way);
    ASSERT_TRUE(put.ok()) << put.ToString();
    ASSERT_TRUE(c->Lookup("ns", key)->tiers.has(Tier::kDevice)) << "in the daemon's GPU pool";
  }
  // Read into GPU `to` as the connector does; byte-exact.
  void ExpectOn(const std::string& key, uint64_t seed, uint64_t n, int to) {
    DeviceBuffer dst(n, to);
    Stream st(to);
    auto got = GetIntoBuffers(*c, "ns", {key}, {BufferDesc::Device(dst.get(), n, to, st.handle())});
    ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
    EXPECT_TRUE(dst.Read() == Payload(seed, n)) << key << ": bytes differ on GPU " << to;
    EXPECT_EQ(Leases(), 0u) << "the lease ended once the copy ran";
  }
  TempDir dir;
  pid_t pid;
  std::unique_ptr<net::Client> c;
};

TEST(DevicePeer, ADaemonsDevicePoolIsReadIntoTheOtherGpuAndThroughItsHostPoolWithPeerOff) {
  REQUIRE_TWO_GPUS();
  Daemon d;
  ASSERT_NE(d.c, nullptr);
  ASSERT_TRUE(d.c->capabilities().device_leases);
  for (uint64_t n : {kFrame, kImage}) {
    const std::string key = std::to_string(n);
    d.Put(key, n, n, 0);
    EXPECT_EQ(CountedWay([&] { d.ExpectOn(key, n, n, 1); }), Way(1, 0));
  }
  PeerCopiesOff off;
  EXPECT_EQ(CountedWay([&] { d.ExpectOn("2867200", kFrame, kFrame, 1); }),
            cuda::CrossGpu::kHostPath);
}

TEST(DevicePeer, ALeaseInOneGpusPoolIsReadFromTheOtherWhileHeld) {
  REQUIRE_TWO_GPUS();
  Daemon d;
  ASSERT_NE(d.c, nullptr);
  d.Put("k", 9, kImage, 0);
  {
    auto lease = d.c->AcquireOnDevice("ns", "k");
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    int on = -1;
    ASSERT_TRUE(cuda::IsDevicePointer(lease->data(), &on));
    EXPECT_EQ(on, 0);
    DeviceBuffer dst(kImage, 1);
    ASSERT_EQ(cudaMemcpyPeer(dst.get(), 1, lease->data(), 0, kImage), cudaSuccess);
    EXPECT_TRUE(dst.Read() == Payload(9, kImage));
    EXPECT_EQ(d.Leases(), 1u) << "held across devices";
  }
  EXPECT_EQ(d.Leases(), 0u);
}

TEST(DevicePeer, ADaemonsPoolOnTheSecondGpuTakesPutsFromTheFirstAndServesItByPeerCopy) {
  REQUIRE_TWO_GPUS();
  Daemon d({"--device-pool-gpu", "1"});
  ASSERT_NE(d.c, nullptr);
  d.Put("k", 11, kFrame, 0);
  {
    auto lease = d.c->AcquireOnDevice("ns", "k");
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    int on = -1;
    ASSERT_TRUE(cuda::IsDevicePointer(lease->data(), &on));
    EXPECT_EQ(on, 1) << "the pool lives on the GPU --device-pool-gpu chose";
  }
  EXPECT_EQ(CountedWay([&] { d.ExpectOn("k", 11, kFrame, 0); }), Way(0, 1));
  const auto before = cuda::PeerRoutes::Process().counts();
  d.ExpectOn("k", 11, kFrame, 1);  // and to its own GPU: no cross-GPU copy
  const auto after = cuda::PeerRoutes::Process().counts();
  EXPECT_EQ(after.peer_copies + after.host_path_copies,
            before.peer_copies + before.host_path_copies);
}
#endif

}  // namespace
}  // namespace ecstore
