#include "server/request_arrival.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "net/protocol.h"
#include "net/tcp_pair_test_util.h"

namespace ecstore::net {
namespace {

using std::chrono::milliseconds;

int Lowat(int fd) {
  int v = 0;
  socklen_t len = sizeof(v);
  getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &len);
  return v;
}

std::string Header(Op op, uint64_t body) {
  uint8_t h[kHeaderBytes];
  EncodeHeader({kVersion, op, 1, body}, h);
  return std::string(reinterpret_cast<char*>(h), kHeaderBytes);
}

TEST(RequestArrival, ARequestIsReadOnlyOnceItHasComeAndEpollIsToldWhatIsMissing) {
  TcpPair p;
  RequestArrival a(RequestArrival::kFrames);
  const int fd = p.server.get();
  EXPECT_FALSE(a.Arrived(fd));  // nothing yet
  EXPECT_EQ(a.partial_since(), std::chrono::steady_clock::time_point{});
  const std::string get = Header(Op::kGet, 100) + std::string(100, 'b');
  p.Send(get.substr(0, 10));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(a.Arrived(fd));  // half a header: woken at the whole header
  EXPECT_EQ(Lowat(fd), static_cast<int>(kHeaderBytes));
  EXPECT_NE(a.partial_since(), std::chrono::steady_clock::time_point{});
  p.Send(get.substr(10, 60));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(a.Arrived(fd));  // the header and half the body: woken at the whole frame
  EXPECT_EQ(Lowat(fd), static_cast<int>(kHeaderBytes + 100));
  p.Send(get.substr(70));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_TRUE(a.Arrived(fd));
  EXPECT_EQ(Lowat(fd), 1);
  EXPECT_EQ(a.partial_since(), std::chrono::steady_clock::time_point{});
}

TEST(RequestArrival, APutWaitsForItsKeyNotItsPayloadAndBeforeHelloOnlyTheHeaderCounts) {
  TcpPair p;
  RequestArrival a(RequestArrival::kFrames);
  const int fd = p.server.get();
  p.Send(Header(Op::kPut, 1ull << 30) + std::string(100, 'k'));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(a.Arrived(fd));  // 100 of the 512 bytes a key and meta may take
  EXPECT_EQ(Lowat(fd), static_cast<int>(kHeaderBytes + kPutPrefixMax));
  EXPECT_TRUE(a.Arrived(fd, /*greeted=*/false));  // refused on its header: read it now
  p.Send(std::string(kPutPrefixMax, 'k'));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_TRUE(a.Arrived(fd));  // the payload streams on the worker, by its deadline
  p.client.reset();
  std::this_thread::sleep_for(milliseconds(20));
  TcpPair q;
  q.client.reset();  // a hang-up is read (and found) at once
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_TRUE(a.Arrived(q.server.get()));
}

}  // namespace
}  // namespace ecstore::net
