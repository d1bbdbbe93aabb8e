// TcpPair: a connected loopback TCP pair for tests of the server's socket handling -- real
// send and receive buffers, and SO_RCVLOWAT honoured (a unix socketpair's poll ignores it).
// Thread rules: a test's; each end used by one thread at a time.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <string>

#include "net/socket.h"

namespace ecstore::net {

// A connected loopback TCP pair: real send and receive buffers, and SO_RCVLOWAT honoured.
struct TcpPair {
  UniqueFd client, server;
  TcpPair() {
    uint16_t port = 0;
    auto l = Listen({"127.0.0.1", 0}, &port);
    EXPECT_TRUE(l.ok());
    auto c = ConnectTcp({"127.0.0.1", port}, std::chrono::milliseconds(2000));
    EXPECT_TRUE(c.ok());
    client = std::move(c).value();
    server.reset(accept4(l->get(), nullptr, nullptr, SOCK_CLOEXEC));
  }
  void Send(const std::string& bytes) {
    ASSERT_EQ(send(client.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
};

}  // namespace ecstore::net
