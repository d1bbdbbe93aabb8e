#include "cluster/etcd.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "base/test_util.h"

namespace ecstore::cluster {
namespace {

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), len);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool HaveEtcd() { return std::system("command -v etcd >/dev/null 2>&1") == 0; }

// A real etcd on loopback with a data directory of its own, stopped with the test.
class Etcd {
 public:
  Etcd() {
    const int client = FreePort(), peer = FreePort();
    uri_ = "etcd://127.0.0.1:" + std::to_string(client) + "/test";
    const std::string c = "http://127.0.0.1:" + std::to_string(client);
    const std::string p = "http://127.0.0.1:" + std::to_string(peer);
    pid_ = fork();
    if (pid_ == 0) {
      freopen("/dev/null", "w", stderr);
      execlp("etcd", "etcd", "--data-dir", (dir_.path() + "/etcd").c_str(), "--listen-client-urls",
             c.c_str(), "--advertise-client-urls", c.c_str(), "--listen-peer-urls", p.c_str(),
             "--initial-advertise-peer-urls", p.c_str(), "--initial-cluster",
             ("default=" + p).c_str(), nullptr);
      _exit(127);
    }
  }
  ~Etcd() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  const std::string& uri() const { return uri_; }
  // A client, once etcd answers (it starts in well under a second; 20 s is the bound).
  EtcdClient Client() {
    std::string name;
    auto c = EtcdClient::Parse(uri_, &name);
    EXPECT_TRUE(c.ok());
    for (int i = 0; i < 400 && !c->Prefix("/").ok(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return std::move(c).value();
  }

 private:
  testing::TempDir dir_;
  std::string uri_;
  pid_t pid_ = -1;
};

TEST(Etcd, Base64RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n : {0, 1, 2, 3, 4, 255, 256}) {
    auto back = FromBase64(Base64(all.substr(0, n)));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, all.substr(0, n));
  }
  EXPECT_EQ(Base64("/ec-store"), "L2VjLXN0b3Jl");
  EXPECT_FALSE(FromBase64("not*base64").ok());
}

TEST(Etcd, AClusterAddressNamesEndpointsAndAName) {
  std::string name;
  auto c = EtcdClient::Parse("etcd://10.0.0.2:2379,10.0.0.3:2379/prod", &name);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(name, "prod");
  EXPECT_EQ(c->endpoints(), (std::vector<std::string>{"10.0.0.2:2379", "10.0.0.3:2379"}));
  for (const char* bad :
       {"etcd://h:1", "etcd://h:1/", "tcp://h:1/x", "etcd://h/x", "etcd://h:1/a/b"})
    EXPECT_TRUE(EtcdClient::Parse(bad, &name).status().IsInvalidArgument()) << bad;
}

TEST(Etcd, KeysUnderALeaseAreReadByPrefixAndGoWithItsRevoke) {
  if (!HaveEtcd())
    GTEST_SKIP() << "etcd is not installed (scripts/install-deps.sh installs etcd-server)";
  Etcd etcd;
  EtcdClient c = etcd.Client();
  auto lease = c.GrantLease(std::chrono::seconds(10));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(c.Put("/ec-store/test/nodes/a", "{\"id\":\"a\"}", *lease).ok());
  ASSERT_TRUE(c.Put("/ec-store/test/nodes/b", "{\"id\":\"b\"}", *lease).ok());
  ASSERT_TRUE(c.Put("/ec-store/other/nodes/c", "x").ok());  // another cluster's
  auto nodes = c.Prefix("/ec-store/test/nodes/");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].first, "/ec-store/test/nodes/a");
  EXPECT_EQ((*nodes)[1].second, "{\"id\":\"b\"}");
  auto ttl = c.KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_GT(*ttl, 0);
  ASSERT_TRUE(c.Revoke(*lease).ok());
  EXPECT_TRUE(c.Prefix("/ec-store/test/nodes/")->empty());
  EXPECT_TRUE(c.KeepAlive(*lease).status().IsNotFound());
  EXPECT_EQ(c.Prefix("/ec-store/other/")->size(), 1u);
}

TEST(Etcd, PutIfWritesOnlyOverTheRevisionItWasToldOf) {
  if (!HaveEtcd())
    GTEST_SKIP() << "etcd is not installed (scripts/install-deps.sh installs etcd-server)";
  Etcd etcd;
  EtcdClient c = etcd.Client();
  const std::string key = "/ec-store/test/nodes/a";
  EXPECT_TRUE(c.Get(key).status().IsNotFound());
  auto made = c.PutIf(key, 0, "first", 0);  // create-if-absent
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(*made);
  EXPECT_FALSE(*c.PutIf(key, 0, "second", 0));  // it exists now: refused, unchanged
  auto rec = c.Get(key);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->value, "first");
  EXPECT_FALSE(*c.PutIf(key, rec->mod_revision + 1, "third", 0));  // not the revision read
  EXPECT_TRUE(*c.PutIf(key, rec->mod_revision, "fourth", 0));      // the one read
  EXPECT_EQ(c.Get(key)->value, "fourth");
}

TEST(Etcd, AnUnreachableEtcdIsUnavailableWithinTheTimeout) {
  std::string name;
  auto c = EtcdClient::Parse("etcd://127.0.0.1:" + std::to_string(FreePort()) + "/x", &name,
                             std::chrono::milliseconds(500));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->GrantLease(std::chrono::seconds(5)).status().IsUnavailable());
}

}  // namespace
}  // namespace ecstore::cluster
