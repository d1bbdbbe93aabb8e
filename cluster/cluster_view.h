// ClusterView: one view of a cluster's members as a client routes by it -- each member's
// link (its connection), the layout that places keys over them, and, while the last
// membership change settles, the layout before it. A client makes a new view at each
// change (Next), keeping the links of the members that did not change, and swaps it in
// whole: a call routes by the one view it took.
//
//   auto v = ClusterView::Next(*old, members, revision, make_link, std::chrono::seconds(10));
//   for (size_t i : v->Places("vllm", mm_hash)) v->nodes[i]->Call(...);
//
// Thread rules: immutable once made; share it between threads freely.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "cluster/membership.h"
#include "cluster/node_link.h"

namespace ecstore::cluster {

struct ClusterView {
  using MakeLink = std::function<std::shared_ptr<NodeLink>(const NodeInfo&)>;

  Layout layout;
  std::vector<std::shared_ptr<NodeLink>> nodes;  // in the layout's order (by id)
  int64_t revision = 0;  // etcd's revision of the members (0: given by the caller)

  // The view of `members` after `old`: a member whose address and incarnation are the same
  // keeps its link, others get make_link's. The change settles after `settle`.
  static std::shared_ptr<const ClusterView> Next(const ClusterView& old,
                                                 std::vector<NodeInfo> members, int64_t revision,
                                                 const MakeLink& make_link,
                                                 std::chrono::milliseconds settle);

  // The key's places (Layout::Places): its replicas first, then where a put clears older
  // copies and a read looks next.
  std::vector<size_t> Places(std::string_view ns, std::string_view key) const {
    return layout.Places(ns, key);
  }
  // While the last change settles, the key's places before it that are not places now --
  // members that left included (cluster/consistency.h, rule 1): a node that has not seen the
  // change (or not yet dropped what moved off it, or is leaving) may hold a copy there, which
  // a client that has not seen it either would read. Writes clear them too. Indices for
  // Link(); empty once settled.
  std::vector<size_t> Moved(std::string_view ns, std::string_view key) const;
  // Every place a writer of the key clears (cluster/consistency.h, rule 1): its places after
  // the first `replicas` (those are written), and Moved. Indices for Link().
  std::vector<size_t> ToClear(std::string_view ns, std::string_view key, size_t replicas) const;
  // What clearing at `at` answered, as the writer counts it: Ok also where a member that
  // left refused by its fence or nothing listens at its address any more (ServesNothing).
  Status Cleared(size_t at, const Status& answered) const;
  // A node by index: a member (below nodes.size()), or one that left in the last change.
  const std::shared_ptr<NodeLink>& Link(size_t at) const {
    return at < nodes.size() ? nodes[at] : gone_[at - nodes.size()];
  }

 private:
  std::shared_ptr<const Layout> before_;
  // before_'s members' indices for Link(): members now, or nodes.size() + their gone_ index.
  std::vector<size_t> before_at_;
  std::vector<std::shared_ptr<NodeLink>> gone_;  // the members that left in the last change
  std::chrono::steady_clock::time_point settles_;
};

}  // namespace ecstore::cluster
