#include "server/event_loop.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstring>
#include <thread>

namespace ecstore::net {
namespace {

TEST(EventLoop, EverySocketIsServedByOneWorkerAtATimeAndArmedAgain) {
  constexpr int kSockets = 64, kRounds = 5;
  std::vector<std::array<UniqueFd, 2>> pairs(kSockets);
  for (auto& p : pairs) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    p[0].reset(sv[0]);
    p[1].reset(sv[1]);
  }
  std::vector<std::atomic<int>> inside(kSockets);
  std::atomic<int> overlapped{0}, served{0};
  EventLoop loop;
  ASSERT_TRUE(loop.Start(4,
                         [&](void* tag, uint32_t) {
                           const auto i = reinterpret_cast<intptr_t>(tag) - 1;
                           if (inside[i].fetch_add(1) != 0) ++overlapped;
                           char b;
                           if (read(pairs[i][1].get(), &b, 1) == 1) {
                             std::this_thread::sleep_for(std::chrono::microseconds(200));
                             ++served;
                             ASSERT_EQ(write(pairs[i][1].get(), &b, 1), 1);
                           }
                           inside[i].fetch_sub(1);
                           loop.Arm(pairs[i][1].get(), tag, EPOLLIN);
                         })
                  .ok());
  EXPECT_EQ(loop.workers(), 4u);
  for (int i = 0; i < kSockets; ++i)
    ASSERT_TRUE(
        loop.Add(pairs[i][1].get(), reinterpret_cast<void*>(intptr_t{i + 1}), EPOLLIN).ok());
  for (int r = 0; r < kRounds; ++r) {
    for (auto& p : pairs) ASSERT_EQ(write(p[0].get(), "x", 1), 1);
    for (auto& p : pairs) {
      char b;
      ASSERT_EQ(read(p[0].get(), &b, 1), 1);  // each answered, every round
    }
  }
  EXPECT_EQ(served.load(), kSockets * kRounds);
  EXPECT_EQ(overlapped.load(), 0);
  loop.Stop();
  EXPECT_EQ(loop.busy(), 0u);
  EXPECT_EQ(EventLoop::DefaultWorkers(2), 8u);
  EXPECT_EQ(EventLoop::DefaultWorkers(16), 32u);
  EXPECT_EQ(EventLoop::DefaultWorkers(128), 64u);
}

}  // namespace
}  // namespace ecstore::net
