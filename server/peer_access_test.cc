#include "server/peer_access.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

#include "base/test_util.h"
#include "net/socket.h"

namespace ecstore::net {
namespace {

constexpr uid_t kNobody = 65534;

struct Tcp {
  UniqueFd listener;
  uint16_t port = 0;
  Tcp() {
    auto l = Listen({"127.0.0.1", 0}, &port);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    listener = std::move(l).value();
  }
  UniqueFd Accept() const {
    return UniqueFd(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  }
};

// Connects from a child process running as `uid` (0: as this process), then waits for the
// parent to hang up; the parent's end of the accepted connection comes back.
UniqueFd ConnectAs(uid_t uid, const std::function<UniqueFd()>& connect,
                   const std::function<UniqueFd()>& accept, pid_t* child) {
  *child = fork();
  if (*child == 0) {
    if (uid != 0 && (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)) _exit(2);
    UniqueFd fd = connect();
    char b;
    _exit(fd.valid() && recv(fd.get(), &b, 1, 0) == 0 ? 0 : 3);
  }
  return accept();
}

TEST(PeerAccess, TheServersOwnUserMayConnectOverLoopbackTcpAndTheUnixSocket) {
  Tcp tcp;
  auto c = ConnectTcp({"127.0.0.1", tcp.port}, std::chrono::seconds(5));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  UniqueFd s = tcp.Accept();
  auto uid = LoopbackPeerUid(s.get());
  ASSERT_TRUE(uid.ok()) << uid.status().ToString();
  EXPECT_EQ(*uid, geteuid());
  uid = LoopbackPeerUidFromProc(s.get());
  ASSERT_TRUE(uid.ok()) << uid.status().ToString();
  EXPECT_EQ(*uid, geteuid());
  EXPECT_TRUE(LocalPeerMayConnect(s.get(), false, {}).ok());
  uint16_t port6 = 0;
  if (auto l6 = Listen({"::1", 0}, &port6); l6.ok()) {  // where the host has IPv6
    auto c6 = ConnectTcp({"::1", port6}, std::chrono::seconds(5));
    ASSERT_TRUE(c6.ok()) << c6.status().ToString();
    UniqueFd s6(accept4(l6->get(), nullptr, nullptr, SOCK_CLOEXEC));
    for (auto got : {LoopbackPeerUid(s6.get()), LoopbackPeerUidFromProc(s6.get())}) {
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, geteuid());
    }
  }
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd a(pair[0]), b(pair[1]);
  EXPECT_TRUE(LocalPeerMayConnect(a.get(), true, {}).ok());
}

// What a loopback port without a token once gave every local user: reads and erases.
TEST(PeerAccess, AnotherLocalUserIsRefusedOverLoopbackTcpAndTheUnixSocket) {
  if (geteuid() != 0) GTEST_SKIP() << "acting as another user needs root";
  Tcp tcp;
  pid_t child;
  UniqueFd s = ConnectAs(
      kNobody,
      [&] {
        auto c = ConnectTcp({"127.0.0.1", tcp.port}, std::chrono::seconds(5));
        return c.ok() ? std::move(c).value() : UniqueFd();
      },
      [&] { return tcp.Accept(); }, &child);
  ASSERT_TRUE(s.valid());
  auto uid = LoopbackPeerUid(s.get());
  ASSERT_TRUE(uid.ok()) << uid.status().ToString();
  EXPECT_EQ(*uid, kNobody);
  uid = LoopbackPeerUidFromProc(s.get());
  ASSERT_TRUE(uid.ok()) << uid.status().ToString();
  EXPECT_EQ(*uid, kNobody);
  Status st = LocalPeerMayConnect(s.get(), false, {});
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_NE(st.message().find("user 65534 may not use this server"), std::string::npos);
  EXPECT_NE(st.message().find("--token-file"), std::string::npos);
  EXPECT_FALSE(LocalPeerMayConnect(s.get(), false, {.group_access = true}).ok());
  s.reset();
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);

  // The unix socket: a socket file others could reach (its modes opened up here) still
  // serves only its user.
  testing::TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  const std::string path = dir.sub("serve.sock");
  auto l = ListenUnix(path, 0666);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  UniqueFd u = ConnectAs(
      kNobody,
      [&] {
        auto c = ConnectUnix(path, std::chrono::seconds(5));
        return c.ok() ? std::move(c).value() : UniqueFd();
      },
      [&] { return UniqueFd(accept4(l->get(), nullptr, nullptr, SOCK_CLOEXEC)); }, &child);
  ASSERT_TRUE(u.valid());
  st = LocalPeerMayConnect(u.get(), true, {});
  EXPECT_NE(st.message().find("user 65534 may not use this server"), std::string::npos)
      << st.ToString();
  u.reset();
  waitpid(child, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace ecstore::net
