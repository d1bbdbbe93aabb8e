#include "cluster/node_guard.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "net/socket.h"

namespace ecstore::cluster {

namespace {

constexpr size_t kPage = 4096;

// Erases each listed entry that `drop` picks, a page at a time (no lock held across pages).
Result<uint64_t> DropWhere(Cache* store, const std::function<bool(const EntryInfo&)>& drop) {
  std::vector<std::pair<std::string, std::string>> doomed;
  Status st = store->ListPages(kPage, [&](std::vector<EntryInfo>&& page) {
    for (EntryInfo& e : page)
      if (drop(e)) doomed.emplace_back(std::move(e.ns), std::move(e.key));
    return true;
  });
  if (!st.ok()) return st;
  uint64_t n = 0;
  for (size_t at = 0; at < doomed.size(); at += kPage) {
    std::vector<std::pair<std::string, std::string>> part(
        doomed.begin() + static_cast<std::ptrdiff_t>(at),
        doomed.begin() + static_cast<std::ptrdiff_t>(std::min(doomed.size(), at + kPage)));
    std::vector<bool> erased;
    EC_RETURN_IF_ERROR(store->EraseMany(part, &erased));
    n += static_cast<uint64_t>(std::count(erased.begin(), erased.end(), true));
  }
  return n;
}

// Whether something accepts connections at HOST:PORT now.
bool Answers(const std::string& host_port) {
  auto hp = net::ParseHostPort(host_port);
  if (!hp.ok()) return false;
  return net::ConnectTcp(*hp, std::chrono::milliseconds(1000)).ok();
}

}  // namespace

Result<uint64_t> DropAll(Cache* store, const std::string& why) {
  auto n = DropWhere(store, [](const EntryInfo&) { return true; });
  if (n.ok() && *n > 0) spdlog::warn("dropped {} entries: {}", *n, why);
  return n;
}

Result<uint64_t> DropOffPlaces(Cache* store, const Layout& layout, size_t self) {
  return DropWhere(store, [&](const EntryInfo& e) {
    auto places = layout.Places(e.ns, e.key);
    return std::find(places.begin(), places.end(), self) == places.end();
  });
}

Result<Rejoin> CheckRejoin(EtcdClient& etcd, const std::string& cluster, const std::string& id,
                           uint64_t previous_incarnation) {
  auto rec = etcd.Get(NodesPrefix(cluster) + id);
  if (rec.status().IsNotFound()) return Rejoin{};  // away, or new: nothing held is current
  if (!rec.ok()) return rec.status();
  auto other = NodeInfo::FromJson(rec->value);
  const std::string where = other.ok() ? other->tcp : "an address its record does not say";
  // The record of this directory's previous run, whose lease has not lapsed: a crash or a
  // kill, and nothing answers there any more. Anything else is another live node.
  if (other.ok() && previous_incarnation != 0 && other->incarnation == previous_incarnation &&
      !Answers(other->tcp))
    return Rejoin{.keep = true, .take_over = rec->mod_revision};
  return Status::InvalidArgument("node id " + id + " is in use in cluster " + cluster +
                                 " by the node at " + where +
                                 " (a copied store directory, or --node-id given twice): give "
                                 "this node its own --node-id or store directory");
}

Result<std::unique_ptr<NodeGuard>> NodeGuard::Start(EtcdClient etcd, std::string cluster,
                                                    std::string self, Cache* store,
                                                    NodeFence* fence) {
  std::unique_ptr<NodeGuard> g(new NodeGuard(cluster, std::move(self), store, fence));
  auto watch = MemberWatch::Start(
      std::move(etcd), cluster,
      [p = g.get()](std::vector<NodeInfo> members, int64_t revision) {
        p->OnMembers(std::move(members), revision);
      },
      std::chrono::seconds(30), fence ? fence->view() : nullptr);
  if (!watch.ok()) return watch.status();
  g->watch_ = std::move(watch).value();
  return g;
}

NodeGuard::~NodeGuard() { watch_.reset(); }

NodeGuard::Counts NodeGuard::counts() const {
  Counts c;
  if (auto v = view())
    c.members = v->members, c.member = v->self.has_value(), c.revision = v->revision;
  if (watch_) c.changes = watch_->changes(), c.bad_records = watch_->bad_records();
  c.dropped = dropped_.load();
  return c;
}

Status NodeGuard::Admit(std::string_view ns, std::string_view key) const {
  // Not a member in its own view: joining (its record not seen back yet), or out of the
  // ring, when Registration drops everything before it is a member again. A put admitted
  // then could land after that drop listed the entries, and outlive it.
  auto v = view();
  if (!v || !v->self)
    return Status::Busy("node " + self_ + " is not a member of cluster " + cluster_ +
                        " in its own view (joining, or back after its lease lapsed); retry");
  const auto places = v->layout.Places(ns, key);
  if (std::find(places.begin(), places.end(), *v->self) != places.end()) return Status::Ok();
  // Busy, not Unavailable: the node answers (a client must not mark it down), and the put
  // may be retried once the writer sees the members this node sees.
  return Status::Busy("node " + self_ + " is not one of the places of '" + std::string(key) +
                      "' in cluster " + cluster_ +
                      " as it sees the members (they changed under the writer); retry");
}

void NodeGuard::OnMembers(std::vector<NodeInfo> members, int64_t revision) {
  std::sort(members.begin(), members.end(),
            [](const NodeInfo& a, const NodeInfo& b) { return a.id < b.id; });
  std::string seen;
  for (const NodeInfo& m : members) seen += m.ToJson() + "\n";
  // A request routed by a view from before a change is refused (NodeFence::Check); a list
  // read again unchanged changes nothing.
  if (fence_ && seen != last_seen_) fence_->ViewChanged(revision);
  last_seen_ = std::move(seen);
  auto me = std::find_if(members.begin(), members.end(),
                         [&](const NodeInfo& n) { return n.id == self_; });
  auto v = std::make_shared<View>();
  v->members = members.size();
  v->revision = revision;
  if (me != members.end()) {
    last_ = Layout::Of(members, &last_);
    v->layout = last_;
    v->self = static_cast<size_t>(me - members.begin());
  }
  {
    // Published before the drop below lists the entries: a put admitted by the old view
    // was installed before that listing (both under the store's lock) and is dropped there.
    MutexLock l(&view_mu_);
    view_ = std::move(v);
  }
  if (fence_) fence_->ViewSeen(me != members.end());
  if (me == members.end()) return;  // not in the ring: Registration drops all when it rejoins
  auto n = DropOffPlaces(store_, last_, *view()->self);
  if (!n.ok()) {
    spdlog::error("cluster {}: dropping the keys a membership change moved away failed: {}",
                  cluster_, n.status().ToString());
    return;
  }
  dropped_ += *n;
  if (*n > 0)
    spdlog::info("cluster {}: dropped {} entries the membership change moved off this node",
                 cluster_, *n);
}

}  // namespace ecstore::cluster
