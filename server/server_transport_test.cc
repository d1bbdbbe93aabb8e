// The server's transports on their own, on a real store: what each leases, where it says the
// bytes are, what it tells HELLO, and a clear refusal where it cannot serve. (The wire
// round trips through them are net_test.cc's and the RDMA VM test's.)
#include "server/server_transport.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <vector>

#include "base/test_util.h"

namespace ecstore::net {
namespace {

std::unique_ptr<Store> OpenStore(const std::string& dir, bool shared) {
  Options o;
  o.pool_bytes = 16 << 20;
  if (shared) o.memory_backend = NewSharedHostBackend;
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

void PutBytes(Store* s, const std::string& key, size_t n) {
  std::vector<uint8_t> bytes(n, 0x42);
  ASSERT_TRUE(s->Put("ns", key, {DType::kU8, {static_cast<int64_t>(n)}}, bytes).ok());
}

TEST(ServerTransport, ShmGetsSaysTheLeasedBytesOffsetInThePoolAndItsSocketInHello) {
  testing::TempDir dir;
  auto store = OpenStore(dir.sub("store"), /*shared=*/true);
  ASSERT_TRUE(store);
  PutBytes(store.get(), "k", 5000);
  auto shm = ShmGets::Listen(store.get(), dir.sub("serve.sock"));
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  EXPECT_EQ((*shm)->request(), Op::kGetShm);
  EXPECT_FALSE((*shm)->sends_bytes()) << "the reader maps the pool";
  auto lease = (*shm)->Acquire(store.get(), "ns", "k");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  BodyWriter w;
  (*shm)->Locate(*lease, &w);
  ASSERT_EQ(w.data().size(), 8u);
  uint64_t offset;
  std::memcpy(&offset, w.data().data(), 8);
  EXPECT_EQ(store->pool_region().base + offset, lease->data());
  HelloInfo info;
  (*shm)->Advertise(&info);
  EXPECT_EQ(info.shm_path, dir.sub("serve.sock"));
  struct stat st;
  ASSERT_EQ(::stat(dir.sub("serve.sock").c_str(), &st), 0);
  (*shm)->Stop();
  EXPECT_NE(::stat(dir.sub("serve.sock").c_str(), &st), 0) << "its socket is unlinked at Stop";
}

TEST(ServerTransport, ShmGetsRefusesAStoreWhosePoolIsNotSharedSayingWhatToSet) {
  testing::TempDir dir;
  auto store = OpenStore(dir.sub("store"), /*shared=*/false);
  ASSERT_TRUE(store);
  auto shm = ShmGets::Listen(store.get(), dir.sub("serve.sock"));
  ASSERT_FALSE(shm.ok());
  EXPECT_TRUE(shm.status().IsInvalidArgument()) << shm.status().ToString();
  EXPECT_NE(shm.status().message().find("NewSharedHostBackend"), std::string::npos);
}

TEST(ServerTransport, TcpGetsSendsTheBytesAndAStoreWithoutADeviceTierHasNoDeviceIpc) {
  testing::TempDir dir;
  auto store = OpenStore(dir.sub("store"), /*shared=*/false);
  ASSERT_TRUE(store);
  PutBytes(store.get(), "k", 100);
  TcpGets tcp;
  EXPECT_TRUE(tcp.sends_bytes());
  EXPECT_EQ(tcp.reply(), Op::kGetOk);
  auto lease = tcp.Acquire(store.get(), "ns", "k");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->memory_kind(), MemoryKind::kHost);
  EXPECT_TRUE(tcp.Acquire(store.get(), "ns", "absent").status().IsNotFound());
  EXPECT_EQ(DeviceIpcGets::Export(store.get()), nullptr);
}

}  // namespace
}  // namespace ecstore::net
