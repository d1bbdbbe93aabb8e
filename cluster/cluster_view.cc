#include "cluster/cluster_view.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "cluster/consistency.h"

namespace ecstore::cluster {

std::shared_ptr<const ClusterView> ClusterView::Next(const ClusterView& old,
                                                     std::vector<NodeInfo> members,
                                                     int64_t revision, const MakeLink& make_link,
                                                     std::chrono::milliseconds settle) {
  std::sort(members.begin(), members.end(),
            [](const NodeInfo& a, const NodeInfo& b) { return a.id < b.id; });
  std::map<std::string, std::shared_ptr<NodeLink>> kept;
  for (const auto& n : old.nodes) kept[n->info().id] = n;
  auto v = std::make_shared<ClusterView>();
  v->revision = revision;
  std::map<std::string, size_t> at;
  for (auto& m : members) {
    auto it = kept.find(m.id);
    const bool same = it != kept.end() && it->second->info().tcp == m.tcp &&
                      it->second->info().incarnation == m.incarnation;
    at[m.id] = v->nodes.size();
    v->nodes.push_back(same ? it->second : make_link(m));
  }
  v->layout = Layout::Of(members, &old.layout);
  if (!old.nodes.empty()) {
    v->before_ = std::make_shared<const Layout>(old.layout);
    for (const auto& n : old.nodes) {
      auto it = at.find(n->info().id);
      // A member left, or came back as a new incarnation or address: its old link.
      if (it != at.end() && v->nodes[it->second] == n) {
        v->before_at_.push_back(it->second);
      } else {
        v->before_at_.push_back(v->nodes.size() + v->gone_.size());
        v->gone_.push_back(n);
      }
    }
    v->settles_ = std::chrono::steady_clock::now() + settle;
  }
  return v;
}

std::vector<size_t> ClusterView::Moved(std::string_view ns, std::string_view key) const {
  std::vector<size_t> out;
  if (!before_ || std::chrono::steady_clock::now() >= settles_) return out;
  const auto now = Places(ns, key);
  for (size_t b : before_->Places(ns, key)) {
    const size_t at = before_at_[b];
    if (std::find(now.begin(), now.end(), at) == now.end()) out.push_back(at);
  }
  return out;
}

std::vector<size_t> ClusterView::ToClear(std::string_view ns, std::string_view key,
                                         size_t replicas) const {
  const auto places = Places(ns, key);
  std::vector<size_t> out(places.begin() + std::min(replicas, places.size()), places.end());
  for (size_t m : Moved(ns, key)) out.push_back(m);
  return out;
}

Status ClusterView::Cleared(size_t at, const Status& answered) const {
  if (answered.ok() || at < nodes.size()) return answered;
  return ServesNothing(answered, Link(at)->info().tcp) ? Status::Ok() : answered;
}

}  // namespace ecstore::cluster
