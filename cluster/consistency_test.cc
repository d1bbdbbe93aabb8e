#include "cluster/consistency.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace ecstore::cluster {
namespace {

using std::chrono::milliseconds;

TEST(Freshness, AViewIsCurrentOnlyWithinTheBoundOfItsLastConfirmation) {
  Freshness f(milliseconds(3000));
  EXPECT_FALSE(f.fresh());  // never confirmed: in doubt
  EXPECT_TRUE(f.Stale(true, "c1", "a miss").IsNotFound());
  f.Confirmed(SteadyClock::now() - milliseconds(5000));  // a read sent long ago
  EXPECT_FALSE(f.fresh());
  f.Confirmed(SteadyClock::now());
  EXPECT_TRUE(f.fresh());
  f.Confirmed(SteadyClock::now() - milliseconds(5000));  // a late answer never moves it back
  EXPECT_TRUE(f.fresh());
  Status st = f.Stale(false, "c1", "the put of n/k is not acknowledged");
  EXPECT_TRUE(st.IsUnavailable());
  EXPECT_NE(st.message().find("not confirmed current"), std::string::npos) << st.ToString();
}

TEST(NodeFence, ANodeServesOnlyWhileItsLeaseAndViewAreConfirmedAndHoldIt) {
  NodeFence f("node-a", milliseconds(2000), milliseconds(3000));
  EXPECT_FALSE(f.serving());  // not registered yet
  f.LeaseConfirmed(SteadyClock::now());
  EXPECT_FALSE(f.serving());  // its view not confirmed
  f.view()->Confirmed(SteadyClock::now());
  EXPECT_FALSE(f.serving());  // its view does not hold it
  f.ViewSeen(true);
  EXPECT_TRUE(f.serving());
  f.ViewSeen(false);
  EXPECT_NE(f.Check().message().find(kFenceRefusal), std::string::npos);
  f.ViewSeen(true);
  f.LeaseLost();
  EXPECT_FALSE(f.serving());
  f.LeaseConfirmed(SteadyClock::now());
  EXPECT_TRUE(f.serving());
  f.Stop();
  f.LeaseConfirmed(SteadyClock::now());
  EXPECT_FALSE(f.serving());  // stopping: for good
  EXPECT_NE(f.Check().message().find("stopping"), std::string::npos);
}

TEST(NodeFence, ALeaseCountsFromWhenItsKeepAliveWasSentLessTheMargin) {
  const milliseconds ttl(2000);
  EXPECT_EQ(FenceMargin(ttl), milliseconds(200));
  EXPECT_EQ(FenceMargin(milliseconds(500)), milliseconds(100));
  NodeFence f("node-a", ttl, milliseconds(60000));
  f.view()->Confirmed(SteadyClock::now());
  f.ViewSeen(true);
  // A keep-alive sent 1.7 s ago (its answer came late) is live for 0.1 s more.
  f.LeaseConfirmed(SteadyClock::now() - milliseconds(1700));
  EXPECT_TRUE(f.serving());
  // One sent 1.85 s ago proves nothing: etcd may let the lease lapse at 2 s.
  NodeFence g("node-b", ttl, milliseconds(60000));
  g.view()->Confirmed(SteadyClock::now());
  g.ViewSeen(true);
  g.LeaseConfirmed(SteadyClock::now() - milliseconds(1850));
  EXPECT_FALSE(g.serving());
  EXPECT_NE(g.Check().message().find("lease is not confirmed"), std::string::npos);
}

TEST(ServesNothing, AMemberThatLeftServesNothingWhereItRefusesOrNothingListens) {
  EXPECT_TRUE(ServesNothing(Status::Ok(), "127.0.0.1:1"));
  NodeFence f("node-a", milliseconds(2000), milliseconds(3000));
  EXPECT_TRUE(ServesNothing(f.Check(), "127.0.0.1:1"));
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(s, 4), 0);
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string at = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  // Something listens there (a hung node's socket accepts): in doubt.
  EXPECT_FALSE(ServesNothing(Status::Unavailable("did not answer in time"), at));
  close(s);
  EXPECT_TRUE(ServesNothing(Status::Unavailable("did not answer in time"), at));
}

}  // namespace
}  // namespace ecstore::cluster
