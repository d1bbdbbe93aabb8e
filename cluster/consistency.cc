#include "cluster/consistency.h"

#include <algorithm>

#include "net/socket.h"

namespace ecstore::cluster {

namespace {
int64_t Ns(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }
}  // namespace

std::chrono::milliseconds FenceMargin(std::chrono::milliseconds ttl) {
  return std::max(std::chrono::milliseconds(100), ttl / 10);
}

void Freshness::Confirmed(SteadyClock::time_point sent) {
  const int64_t ns = Ns(sent);
  int64_t was = confirmed_ns_.load();
  while (was < ns && !confirmed_ns_.compare_exchange_weak(was, ns)) {
  }
}

bool Freshness::fresh() const {
  const int64_t at = confirmed_ns_.load();
  return at != 0 && Ns(SteadyClock::now()) - at <
                        std::chrono::duration_cast<std::chrono::nanoseconds>(bound_).count();
}

std::chrono::milliseconds Freshness::age() const {
  const int64_t at = confirmed_ns_.load();
  if (at == 0) return std::chrono::milliseconds(-1);
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(Ns(SteadyClock::now()) - at));
}

Status Freshness::Stale(bool miss, const std::string& cluster, const std::string& what) const {
  const auto a = age();
  const std::string msg =
      what + ": cluster " + cluster + "'s view of its members is not confirmed current (" +
      (a.count() < 0 ? std::string("etcd never confirmed it")
                     : "etcd confirmed it " + Ms(a) + " ago") +
      ", bound " + Ms(bound_) + "); in doubt a cache misses -- is etcd reachable from here?";
  return miss ? Status::NotFound(msg) : Status::Unavailable(msg);
}

NodeFence::NodeFence(std::string id, std::chrono::milliseconds ttl,
                     std::chrono::milliseconds fresh_for)
    : id_(std::move(id)), valid_for_(ttl - FenceMargin(ttl)), view_(fresh_for) {}

void NodeFence::LeaseConfirmed(SteadyClock::time_point sent) {
  const int64_t until = Ns(sent) + valid_for_.count();
  int64_t was = lease_until_ns_.load();
  while (was < until && !lease_until_ns_.compare_exchange_weak(was, until)) {
  }
}

void NodeFence::LeaseLost() { lease_until_ns_.store(0); }

void NodeFence::ViewChanged(int64_t revision) {
  int64_t was = changed_at_.load();
  while (was < revision && !changed_at_.compare_exchange_weak(was, revision)) {
  }
}

Status NodeFence::Check(int64_t client_view) const {
  std::string why;
  const int64_t until = lease_until_ns_.load();
  if (stopped_.load())
    why = "it is stopping";
  else if (until == 0)
    why = "it is not registered in its cluster (joining, or back after its lease lapsed)";
  else if (Ns(SteadyClock::now()) >= until)
    why = "its etcd lease is not confirmed live (no keep-alive acknowledged in time)";
  else if (!view_.fresh())
    why = "its view of the members is not confirmed current by etcd";
  else if (!member_.load())
    why = "its own view of the members does not hold it";
  else if (client_view != 0 && client_view < changed_at_.load())
    return Status::Unavailable("cluster node " + id_ + ": a request " + kViewBehind +
                               " the node's (revision " + std::to_string(client_view) + " < " +
                               std::to_string(changed_at_.load()) +
                               "): the client reads the members again");
  else
    return Status::Ok();
  return Status::Unavailable("cluster node " + id_ + " " + kFenceRefusal + ": " + why +
                             "; the key's other places answer");
}

Status PutOutcome(std::string_view ns, std::string_view key, const std::vector<Status>& answers) {
  Status refused = Status::Ok();
  for (const Status& st : answers) {
    if (st.IsUnavailable())
      return Status::Unavailable("the put of " + std::string(ns) + "/" + std::string(key) +
                                 " is not acknowledged: a node that may hold an older copy did "
                                 "not answer (" +
                                 st.message() + ")");
    if (!st.ok() && refused.ok()) refused = st;
  }
  return refused;
}

Status ReadMiss(std::string_view ns, std::string_view key, const std::optional<Status>& owner_down,
                const Status& last) {
  if (!owner_down) return last;
  return Status::NotFound(std::string(ns) + "/" + std::string(key) +
                          ": a miss, its node does not answer (" + owner_down->message() + ")");
}

bool ServesNothing(const Status& st, const std::string& tcp) {
  if (st.ok() || st.message().find(kFenceRefusal) != std::string::npos) return true;
  auto hp = net::ParseHostPort(tcp);
  if (!hp.ok()) return false;
  Status c = net::ConnectTcp(*hp, std::chrono::milliseconds(500)).status();
  return !c.ok() && c.message().find("Connection refused") != std::string::npos;
}

}  // namespace ecstore::cluster
