// GetIntoBuffers / PutFromBuffer: host descriptors on any machine; device descriptors through
// each way a Cache moves them (a device tier, a pool read in place, staged through host
// memory over TCP) on a GPU -- the DeviceBuffers tests, which `make test-gpu` runs and which
// skip (saying why) elsewhere.
#include "cache/buffer_io.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "base/units.h"
#include "cuda/cuda.h"
#include "net/client.h"
#include "server/server.h"
#include "store/store.h"
#include "tests/gpu_buffer.h"
#include "tests/gpu_test_util.h"

namespace ecstore {
namespace {

using testing::Bf16;
using testing::Payload;
using testing::TempDir;

std::unique_ptr<Store> OpenStore(const TempDir& dir, uint64_t device_pool = 0) {
  Options o;
  o.pool_bytes = 32 * kMiB;
  o.device_pool_bytes = device_pool;
  auto s = Store::Open(dir.path(), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(BufferIo, HostDescriptorsArePutAndReadWithTheirErrorsKeyByKey) {
  TempDir dir;
  auto s = OpenStore(dir);
  std::vector<uint8_t> a = Payload(1, 300000), b = Payload(2, 8192);
  ASSERT_TRUE(
      PutFromBuffer(*s, "ns", "a", Bf16(a.size()), BufferDesc::Host({a.data(), a.size()})).ok());
  ASSERT_TRUE(
      PutFromBuffer(*s, "ns", "b", Bf16(b.size()), BufferDesc::Host({b.data(), b.size()})).ok());
  std::vector<uint8_t> ga(a.size()), small(100), gone(64);
  auto got = GetIntoBuffers(
      *s, "ns", {"a", "b", "gone"},
      {BufferDesc::Host({ga.data(), ga.size()}), BufferDesc::Host({small.data(), small.size()}),
       BufferDesc::Host({gone.data(), gone.size()})});
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(ga, a);
  EXPECT_TRUE(got[1].status().IsInvalidArgument()) << got[1].status().ToString();
  EXPECT_TRUE(got[2].status().IsNotFound()) << got[2].status().ToString();
  // Host memory is any GetMany's destination; device memory only a transport's that writes
  // it itself (RDMA into registered memory), never an embedded store's.
  EXPECT_TRUE(s->GetsInto(BufferDesc::Host({ga.data(), ga.size()})));
  EXPECT_FALSE(s->GetsInto(BufferDesc::Device(ga.data(), ga.size(), 0)));
  auto wrong = GetIntoBuffers(*s, "ns", {"a", "b"}, {BufferDesc::Host({ga.data(), ga.size()})});
  ASSERT_EQ(wrong.size(), 2u);
  EXPECT_TRUE(wrong[0].status().IsInvalidArgument());
  EXPECT_NE(wrong[0].status().message().find("one descriptor per key"), std::string::npos);
}

// PutManyFromBuffers of host memory: each item Put, each answered alone.
TEST(BufferIo, AStepOfHostItemsIsPutWithEachItemsOwnAnswer) {
  TempDir dir;
  auto s = OpenStore(dir);
  std::vector<std::vector<uint8_t>> bytes = {Payload(1, 300000), Payload(2, 8192),
                                             Payload(3, 65536)};
  std::vector<BufferPut> items;
  for (size_t i = 0; i < bytes.size(); ++i)
    items.push_back({i == 1 ? std::string("bad\nkey") : "k" + std::to_string(i),
                     Bf16(bytes[i].size()), BufferDesc::Host({bytes[i].data(), bytes[i].size()})});
  std::vector<PutRoute> routes;
  auto got = PutManyFromBuffers(*s, "ns", items, {}, &routes);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[1].IsInvalidArgument()) << got[1].ToString();
  for (size_t i : {0, 2}) {
    ASSERT_TRUE(got[i].ok()) << got[i].ToString();
    EXPECT_EQ(routes[i], PutRoute::kHost);
    std::vector<uint8_t> back(bytes[i].size());
    ASSERT_TRUE(s->Get("ns", items[i].key, {back.data(), back.size()}).ok());
    EXPECT_EQ(back, bytes[i]);
  }
}

#ifdef EC_HAVE_CUDA
using Gpu = testing::GpuBuffer;

// Puts two entries from device memory (written on `stream`, not synchronized: the put waits
// for it) the way `route` says the cache takes them, reads them back into device memory and
// a host buffer in one call.
void RoundTrip(Cache& c, PutRoute route) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const uint64_t n0 = 2867200, n1 = 1 * kMiB + 4096;
  std::vector<uint8_t> h0 = Payload(10, n0), h1 = Payload(11, n1);
  Gpu s0(n0), s1(n1), d0(n0), d1(n1 + 4096);
  ASSERT_EQ(cudaMemcpyAsync(s0.p, h0.data(), n0, cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(s1.p, h1.data(), n1, cudaMemcpyHostToDevice, stream), cudaSuccess);
  PutRoute way;
  ASSERT_TRUE(PutFromBuffer(c, "ns", "k0", Bf16(n0), s0.Desc(stream), {}, &way).ok());
  EXPECT_EQ(way, route) << c.transport();
  const BufferPutOptions hash_later{.checksum_when_spilled = true};
  ASSERT_TRUE(PutFromBuffer(c, "ns", "k1", Bf16(n1), s1.Desc(stream), hash_later).ok());
  std::vector<uint8_t> host(n0);
  auto got = GetIntoBuffers(c, "ns", {"k0", "k1", "k0", "gone"},
                            {d0.Desc(stream), d1.Desc(stream),
                             BufferDesc::Host({host.data(), host.size()}), d0.Desc(stream)});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
  EXPECT_TRUE(got[3].status().IsNotFound()) << got[3].status().ToString();
  EXPECT_EQ(got[1]->bytes, n1);
  EXPECT_TRUE(d0.Read() == h0) << c.transport() << ": k0 differs on the device";
  auto r1 = d1.Read();
  EXPECT_TRUE(std::equal(h1.begin(), h1.end(), r1.begin())) << c.transport() << ": k1 differs";
  EXPECT_EQ(host, h0);
  cudaStreamDestroy(stream);
}

TEST(DeviceBuffers, AStoreWithADeviceTierMovesDeviceDescriptorsItself) {
  REQUIRE_GPU();
  TempDir dir;
  auto s = OpenStore(dir, 64 * kMiB);
  ASSERT_TRUE(s->capabilities().device_tier);
  RoundTrip(*s, PutRoute::kCacheCopy);
  EXPECT_GE(s->Stats()->of(Tier::kDevice).entries, 2u);  // put device to device, kept there
}

TEST(DeviceBuffers, APoolReadInPlaceIsCopiedUpAndDevicePutsFillAPoolBlock) {
  REQUIRE_GPU();
  TempDir dir;
  auto s = OpenStore(dir);
  ASSERT_FALSE(s->capabilities().device_tier);
  RoundTrip(*s, PutRoute::kSlot);  // device->host straight into a pool block
  EXPECT_EQ(s->Stats()->leases, 0u);
}

TEST(DeviceBuffers, OverTcpBothWaysAreStagedThroughHostMemory) {
  REQUIRE_GPU();
  TempDir dir;
  auto s = OpenStore(dir);
  net::ServerOptions so;
  so.listen = "127.0.0.1:0";
  auto server = net::Server::Start(s.get(), so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  net::ClientOptions co;
  co.transport = net::TransportKind::kTcp;
  auto c = net::Client::Connect("127.0.0.1:" + std::to_string((*server)->port()), co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_FALSE((*c)->capabilities().in_place_reads);
  RoundTrip(**c, PutRoute::kStaged);
  c->reset();
  (*server)->Stop();
}

// A same-host daemon: device puts refused (device_puts off here), a large put lands in a put
// arena's landing block piece by piece while its commit is out, and a small one fills its
// block first; both read back byte-exact through the daemon's pool.
TEST(DeviceBuffers, ASameHostDaemonTakesALargePutInALandingBlockAndASmallOneFilled) {
  REQUIRE_GPU();
  TempDir dir;
  Options o;
  o.pool_bytes = 256 * kMiB;
  o.memory_backend = NewSharedHostBackend;
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  net::ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.shm_socket = dir.sub("serve.sock");
  auto server = net::Server::Start(s->get(), so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto c = net::Client::Connect("unix:" + dir.sub("serve.sock"), {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->capabilities().reserve);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const BufferPutOptions no_device_puts{.checksum_when_spilled = true, .device_puts = false};
  for (uint64_t n : {40 * kMiB + 4096, 3 * kMiB}) {
    std::vector<uint8_t> h = Payload(static_cast<int>(n % 251), n);
    Gpu src(n);
    ASSERT_EQ(cudaMemcpyAsync(src.p, h.data(), n, cudaMemcpyHostToDevice, stream), cudaSuccess);
    PutRoute way;
    const std::string key = "k" + std::to_string(n);
    Status st = PutFromBuffer(**c, "ns", key, Bf16(n), src.Desc(stream), no_device_puts, &way);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(way, n >= 32 * kMiB ? PutRoute::kLanding : PutRoute::kSlot) << n;
    std::vector<uint8_t> back(n);
    auto got = (*s)->Get("ns", key, {back.data(), back.size()});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(back == h) << n << " bytes differ in the daemon's pool";
    Gpu dst(n);  // and back up, asking first for a device pool the daemon does not have
    auto up = GetIntoBuffers(**c, "ns", {key}, {dst.Desc(stream)});
    ASSERT_TRUE(up[0].ok()) << up[0].status().ToString();
    EXPECT_TRUE(dst.Read() == h) << n;
    EXPECT_FALSE((*c)->capabilities().device_leases) << "told once, not asked again";
  }
  cudaStreamDestroy(stream);
  c->reset();
  (*server)->Stop();
}

#endif

}  // namespace
}  // namespace ecstore
