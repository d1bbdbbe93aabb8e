// LinkRegistry: a process's ClusterCaches and threads share one connection per node, a
// connection idle past idle_close is closed (never one a lease is read through) and the next
// call makes it again without failing -- against two real daemons' servers on loopback.
#include "cluster/link_registry.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/test_util.h"
#include "cluster/cluster_cache.h"
#include "server/server.h"
#include "store/store.h"

namespace ecstore {
namespace {

using testing::Payload;
using testing::TempDir;

struct Node {
  TempDir dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<net::Server> server;
};

bool Eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 100; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

class LinkRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      auto& n = nodes_[i];
      Options o;
      o.pool_bytes = 32 << 20;
      auto s = Store::Open(n.dir.path(), o);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      n.store = std::move(s).value();
      net::ServerOptions so;
      so.listen = "127.0.0.1:0";
      auto srv = net::Server::Start(n.store.get(), so);
      ASSERT_TRUE(srv.ok()) << srv.status().ToString();
      n.server = std::move(srv).value();
      cluster::NodeInfo info;
      info.id = "node-" + std::to_string(i);
      info.tcp = "127.0.0.1:" + std::to_string(n.server->port());
      info.incarnation = 1;
      members_.push_back(info);
    }
  }
  std::unique_ptr<cluster::ClusterCache> Client(std::chrono::milliseconds idle_close) {
    cluster::ClusterOptions co;
    co.idle_close = idle_close;
    auto c = cluster::ClusterCache::WithMembers("links", std::move(co));
    c->Follow(members_);
    return c;
  }
  uint64_t Connections(int i) { return nodes_[i].server->connections(); }

  Node nodes_[2];
  std::vector<cluster::NodeInfo> members_;
};

TEST_F(LinkRegistryTest, ThreadsAndHandlesOfAProcessShareOneConnectionPerNode) {
  auto a = Client(std::chrono::milliseconds(0));
  auto b = Client(std::chrono::milliseconds(0));
  const TensorMeta meta{DType::kU8, {4096}};
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      cluster::ClusterCache& c = t % 2 ? *a : *b;
      for (int i = 0; i < 20; ++i) {
        const std::string key = "t" + std::to_string(t) + "-" + std::to_string(i);
        auto bytes = Payload(static_cast<uint64_t>(t * 100 + i), 4096);
        if (!c.Put("ns", key, meta, bytes).ok()) ++wrong;
        std::vector<uint8_t> got(4096);
        auto r = (t % 2 ? *b : *a).Get("ns", key, got);  // read through the other handle
        if (!r.ok() || got != bytes) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(Connections(0), 1u);
  EXPECT_EQ(Connections(1), 1u);
}

TEST_F(LinkRegistryTest, AnIdleConnectionIsClosedAndTheNextCallMakesItAgain) {
  auto c = Client(std::chrono::milliseconds(200));
  const TensorMeta meta{DType::kU8, {4096}};
  auto bytes = Payload(7, 4096);
  std::vector<std::string> keys;
  for (int i = 0; i < 16; ++i) {
    keys.push_back("k" + std::to_string(i));
    ASSERT_TRUE(c->Put("ns", keys.back(), meta, bytes).ok());
  }
  ASSERT_EQ(Connections(0) + Connections(1), 2u);
  // A lease read through a node keeps its connection open, idle or not.
  auto lease = c->Acquire("ns", keys[0]);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const int leased = c->Owners("ns", keys[0], 1)[0] == "node-0" ? 0 : 1;
  ASSERT_TRUE(Eventually([&] { return Connections(1 - leased) == 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a reaper's pass or more
  EXPECT_EQ(Connections(leased), 1u);
  EXPECT_EQ(std::vector<uint8_t>(lease->data(), lease->data() + lease->size()), bytes);
  *lease = ReadLease();
  ASSERT_TRUE(Eventually([&] { return Connections(leased) == 0; }));
  // The next call to each node makes its connection again; none fails.
  for (const auto& k : keys) {
    std::vector<uint8_t> got(4096);
    auto r = c->Get("ns", k, got);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(got, bytes);
  }
  EXPECT_EQ(Connections(0) + Connections(1), 2u);
}

}  // namespace
}  // namespace ecstore
