#include "server/reply_outbox.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "net/tcp_pair_test_util.h"

namespace ecstore::net {
namespace {

using std::chrono::milliseconds;

// A lease over test memory, released into a counter.
struct Releases : ReadLease::Releaser {
  std::atomic<int> n{0};
  void Release(void*) override { ++n; }
};

TEST(Outbox, ASlowReaderIsLeftWithTheRestAndTheLeaseGoesOnceItIsAllSent) {
  TcpPair p;
  std::vector<uint8_t> payload(32 << 20);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  Releases rel;
  EntryInfo info;
  info.bytes = payload.size();
  Outbox out("head", ReadLease(&rel, nullptr, payload.data(), info),
             std::chrono::steady_clock::now() + std::chrono::seconds(30));
  // Nobody reads: the worker gives up within its budget, the rest kept, the lease held.
  auto first = out.Push(p.server.get(), milliseconds(5), milliseconds(50));
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(*first);
  EXPECT_GT(out.left(), 0u);
  EXPECT_EQ(rel.n.load(), 0);
  std::string got;
  std::thread reader([&] {
    std::vector<char> buf(1 << 20);
    while (got.size() < 4 + payload.size()) {
      ssize_t n = recv(p.client.get(), buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got.append(buf.data(), static_cast<size_t>(n));
    }
  });
  for (;;) {  // as the event loop does: push on each EPOLLOUT, never waiting inside
    pollfd w{p.server.get(), POLLOUT, 0};
    ASSERT_EQ(poll(&w, 1, 5000), 1);
    auto more = out.Push(p.server.get(), {}, {});
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    if (*more) break;
  }
  reader.join();
  EXPECT_EQ(rel.n.load(), 1);
  ASSERT_EQ(got.size(), 4 + payload.size());
  EXPECT_EQ(got.substr(0, 4), "head");
  EXPECT_EQ(0, std::memcmp(got.data() + 4, payload.data(), payload.size()));
}

TEST(Outbox, AReaderThatNeverTakesTheReplyIsCutOffAtItsDeadline) {
  TcpPair p;
  std::vector<uint8_t> payload(16 << 20, 1);
  Releases rel;
  EntryInfo info;
  info.bytes = payload.size();
  Outbox out("", ReadLease(&rel, nullptr, payload.data(), info),
             std::chrono::steady_clock::now() + milliseconds(100));
  ASSERT_FALSE(*out.Push(p.server.get(), {}, {}));
  std::this_thread::sleep_for(milliseconds(150));
  auto late = out.Push(p.server.get(), {}, {});
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("in time"), std::string::npos) << late.status().ToString();
}

}  // namespace
}  // namespace ecstore::net
