// NodeGuard: what a cluster node does so that it never serves a copy the cluster may have
// replaced or erased while the node was not looking. A key lives only at its places
// (CopyOrder, as deep as the members keep keys); every acknowledged put and erase reached
// all of them. So a node's copy can be out of date only where the node was not one of the
// key's places at some moment since it was written:
// - a membership change moves a key off the node's places: the node drops it then;
// - the node was out of the ring (its lease lapsed or was revoked, its record deleted, a
//   restart after either): it drops everything it holds before it serves or registers again.
// - a writer whose view of the members lags the node's may put a key the node no longer
//   holds: the node refuses it (Admit, asked by the store before it installs an entry), so
//   the put is not acknowledged and nothing lands that the last drop did not see.
// - the node serves only through its NodeFence (cluster/consistency.h): the guard tells it
//   whether the node's own view holds it, and the view's watch confirms that view current.
// A node back within its lease (a crash and a quick restart, a pause shorter than the TTL)
// missed nothing acknowledged -- every put and erase of its keys failed meanwhile, and so
// did those of keys that moved off it, which writers clear there while a membership
// change settles (ClusterOptions::settle, at least the TTL) -- and keeps its entries.
//
//   auto rejoin = CheckRejoin(etcd, "prod", "node-a", previous_incarnation);   // before serving
//   if (!rejoin.value().keep) DropAll(store, "...");
//   auto guard = NodeGuard::Start(etcd, "prod", "node-a", store, &fence);  // drops what moves
//   store->SetAdmission([g = guard->get()](auto ns, auto key) { return g->Admit(ns, key); });
//
// Thread rules: NodeGuard drops keys on its MemberWatch's thread; Admit from any thread;
// Start and the destructor from the owner's thread. DropAll and CheckRejoin from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/mutex.h"
#include "base/status.h"
#include "cache/cache.h"
#include "cluster/consistency.h"
#include "cluster/etcd.h"
#include "cluster/member_watch.h"

namespace ecstore::cluster {

struct Rejoin {
  bool keep = false;  // the node's entries are current: it was in the ring all along
  // The record to take over (its etcd revision) where the node's previous incarnation still
  // holds it; 0: register with create-if-absent.
  int64_t take_over = 0;
};

// Whether node `id` may join `cluster` now and keep what it holds. InvalidArgument where a
// live node has the id (its record's address answers), naming that node's address.
Result<Rejoin> CheckRejoin(EtcdClient& etcd, const std::string& cluster, const std::string& id,
                           uint64_t previous_incarnation);

// Erases every entry `store` holds, saying why in the log; the number erased.
Result<uint64_t> DropAll(Cache* store, const std::string& why);

// Erases every entry `store` holds that is not at one of its places in `layout` for member
// `self` (an index into the layout's ring): what a node does at each membership change.
Result<uint64_t> DropOffPlaces(Cache* store, const Layout& layout, size_t self);

class NodeGuard {
 public:
  // `fence` (may be null) outlives the guard: told whether the node's view holds it, its
  // view's freshness confirmed by the guard's watch.
  static Result<std::unique_ptr<NodeGuard>> Start(EtcdClient etcd, std::string cluster,
                                                  std::string self, Cache* store,
                                                  NodeFence* fence = nullptr);
  ~NodeGuard();
  uint64_t dropped() const { return dropped_.load(); }  // keys dropped by membership changes
  // What the node's view says, for /metrics: the members it lists, whether this node is one,
  // the etcd revision it reflects, and the watch's changes and malformed records.
  struct Counts {
    uint64_t members = 0;
    bool member = false;
    int64_t revision = 0;
    uint64_t changes = 0, bad_records = 0, dropped = 0;
  };
  Counts counts() const;
  // Ok where (ns, key) is at this node's places in its last view of the members; else Busy,
  // saying so (the writer's view is not this node's: a put it may retry). A node its own
  // view does not hold (joining, or out of the ring) admits nothing.
  Status Admit(std::string_view ns, std::string_view key) const;

 private:
  NodeGuard(std::string cluster, std::string self, Cache* store, NodeFence* fence)
      : cluster_(std::move(cluster)), self_(std::move(self)), store_(store), fence_(fence) {}
  // The MemberWatch's thread: a list of the members as of etcd revision `revision`.
  void OnMembers(std::vector<NodeInfo> members, int64_t revision);

  const std::string cluster_, self_;
  Cache* const store_;
  NodeFence* const fence_;
  std::atomic<uint64_t> dropped_{0};
  struct View {
    Layout layout;
    std::optional<size_t> self;  // this node's index in the layout, if it is a member
    uint64_t members = 0;        // listed (whether or not this node is one of them)
    int64_t revision = 0;
  };
  std::shared_ptr<const View> view() const EXCLUDES(view_mu_) {
    MutexLock l(&view_mu_);
    return view_;
  }

  Layout last_;            // the MemberWatch's thread's: the last view's layout
  std::string last_seen_;  // and its members' records (a change is a list that differs)
  mutable Mutex view_mu_;
  std::shared_ptr<const View> view_ GUARDED_BY(view_mu_);  // what Admit reads
  std::unique_ptr<MemberWatch> watch_;                     // last: it stops before the rest goes
};

}  // namespace ecstore::cluster
