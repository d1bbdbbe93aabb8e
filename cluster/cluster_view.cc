#include "cluster/cluster_view.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace ecstore::cluster {

std::shared_ptr<const ClusterView> ClusterView::Next(const ClusterView& old,
                                                     std::vector<NodeInfo> members,
                                                     const MakeLink& make_link,
                                                     std::chrono::milliseconds settle) {
  std::sort(members.begin(), members.end(),
            [](const NodeInfo& a, const NodeInfo& b) { return a.id < b.id; });
  std::map<std::string, std::shared_ptr<NodeLink>> kept;
  for (const auto& n : old.nodes) kept[n->info().id] = n;
  auto v = std::make_shared<ClusterView>();
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
      v->before_at_.push_back(it == at.end() ? std::string::npos : it->second);
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
    if (at != std::string::npos && std::find(now.begin(), now.end(), at) == now.end())
      out.push_back(at);
  }
  return out;
}

}  // namespace ecstore::cluster
