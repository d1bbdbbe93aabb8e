// Device puts (PUT_DEVICE), the parts any machine can check: what a server offers, and that
// every refusal is clear, keeps the connection and stores nothing. The copies themselves,
// which need a GPU and a second process, are in tests/device_test.cc (DevicePut*).
// A store and its server in this process; clients over the real unix socket.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "base/test_util.h"
#include "base/units.h"
#include "net/client.h"
#include "net/frame_stream.h"
#include "server/device_puts.h"
#include "server/server.h"
#include "tests/raw_hello.h"

namespace ecstore::net {
namespace {

using testing::U8;

class DevicePutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Options o;
    o.pool_bytes = 64 * kMiB;
    o.memory_backend = NewSharedHostBackend;
    auto s = Store::Open(dir_.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.shm_socket = dir_.sub("serve.sock");
    auto srv = Server::Start(store_.get(), so);
    ASSERT_TRUE(srv.ok()) << srv.status().ToString();
    server_ = std::move(srv).value();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  // A raw connection on the unix socket, past HELLO; *features set from HELLO_OK.
  FrameStream Raw(uint32_t* features) {
    FrameStream s;
    HelloInfo info;
    UniqueFd pool_fd;
    Status st = testing::RawHello(dir_.sub("serve.sock"), &s, &info, &pool_fd);
    EXPECT_TRUE(st.ok()) << st.ToString();
    *features = info.features;
    return s;
  }
  static bool HaveGpu() { return cuda::DeviceCount() > 0; }

  testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Server> server_;
};

// Offered where the server sees a GPU, and only then; a client's device put elsewhere is
// refused with what to do instead, and host memory is refused everywhere.
TEST_F(DevicePutTest, OfferedOnlyWhereTheServerSeesAGpu) {
  uint32_t features = 0;
  FrameStream s = Raw(&features);
  EXPECT_EQ((features & kFeaturePutDevice) != 0, HaveGpu());
  auto c = Client::Connect("unix:" + dir_.sub("serve.sock"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->caps().device_puts, HaveGpu() && cuda::Built());
  std::vector<uint8_t> host(kMiB, 7);
  Status st = (*c)->PutFromDevice("ns", "host", U8(kMiB), host.data(), kMiB);
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_NE(st.message().find("device put"), std::string::npos) << st.ToString();
  EXPECT_TRUE(store_->Lookup("ns", "host").status().IsNotFound());
  // Over TCP, never.
  ClientOptions over_tcp;
  over_tcp.transport = TransportKind::kTcp;  // not upgraded to the unix socket
  auto tcp = Client::Connect("127.0.0.1:" + std::to_string(server_->port()), over_tcp);
  ASSERT_TRUE(tcp.ok());
  EXPECT_FALSE((*tcp)->caps().device_puts);
  st = (*tcp)->PutFromDevice("ns", "tcp", U8(kMiB), host.data(), kMiB);
  EXPECT_NE(st.message().find("device puts need a same-host server"), std::string::npos)
      << st.ToString();
  EXPECT_TRUE((*c)->PrepareDevicePuts().ok());  // a no-op where not offered
}

// The server's side, spoken raw: a handle it cannot open (or, without a GPU, any PUT_DEVICE)
// is refused with a reason, stores nothing, and the connection stays usable; a malformed
// body closes it.
TEST_F(DevicePutTest, TheServerRefusesWhatItCannotOpenAndStoresNothing) {
  uint32_t features = 0;
  FrameStream s = Raw(&features);
  const std::string head = *PutHeadBody("ns", "raw", U8(kMiB), kMiB);
  cuda::DeviceAllocation a;
  a.bus_id = "0000:00:00.0";  // no GPU sits at the host bridge
  a.buffer_id = 1;
  const std::string bogus(64, '\x5a');
  ASSERT_TRUE(s.Send(Op::kPutDevice, PutDeviceBody(head, a, bogus, 0, kMiB, 0)).ok());
  auto refused = s.ReadReply(Op::kOk);
  EXPECT_TRUE(refused.status().IsInvalidArgument()) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("put through the put arena"), std::string::npos)
      << refused.status().ToString();
  EXPECT_TRUE(store_->Lookup("ns", "raw").status().IsNotFound());
  ASSERT_TRUE(s.Send(Op::kStats, "").ok());  // still answered
  EXPECT_TRUE(s.ReadReply(Op::kStatsOk).ok());
  if (!HaveGpu()) {
    ASSERT_TRUE(s.Send(Op::kPrepareDevicePuts, "").ok());
    EXPECT_NE(s.ReadReply(Op::kOk).status().message().find("sees no GPU"), std::string::npos);
    return;
  }
  ASSERT_TRUE(s.Send(Op::kPrepareDevicePuts, "").ok());
  EXPECT_TRUE(s.ReadReply(Op::kOk).ok());
  ASSERT_TRUE(s.Send(Op::kPutDevice, head + "short").ok());
  EXPECT_TRUE(s.ReadReply(Op::kOk).status().IsInvalidArgument());
  EXPECT_FALSE(s.ReadReply(Op::kOk).ok()) << "a malformed PUT_DEVICE closes the connection";
}

}  // namespace
}  // namespace ecstore::net
