// The cluster's one rule, in one place: when in doubt, miss. The promise (docs/guarantees.md):
// once an erase or a replacing put is acknowledged, no read returns the erased entry or older
// bytes. A cache may always miss, so every doubt about a copy becomes a miss or a write that
// is not acknowledged, never an old value. Derived, step by step (docs/cluster.md):
//
// 1. A key lives only at its places in a view of the members (Layout::Places). A writer
//    acknowledges only when every place that a reader may try answered: the key's places in
//    its view and, while a change settles, the places the view before it gave the key --
//    members that left included (ClusterView::Moved). A place that did not answer may hold
//    an older copy: not acknowledged. A member that left and refuses by its fence, or where
//    nothing listens any more, serves no copy (ServesNothing): it drops everything before
//    it serves again, as its record is gone (rule 3).
// 2. A client acts on its view only while etcd confirmed it current within `bound`
//    (Freshness: a revision read, measured from when it was sent). Past the bound, reads are
//    misses and writes are not acknowledged. So a reader's view lags a writer's by at most
//    the bound, and a writer clears a change's earlier places for `settle` >= the bound.
// 3. A node serves only while it can prove it is a member (NodeFence): a keep-alive of its
//    lease acknowledged within TTL - margin of when it was sent, its own view confirmed
//    within the bound and holding its record. etcd lapses a lease no earlier than TTL after
//    the last keep-alive it acknowledged, so a node whose lease lapsed refused before any
//    writer could see it leave. After a gap (a pause, a partition from etcd) it refuses
//    every request -- those queued in its sockets too -- until a keep-alive succeeds; if the
//    lease lapsed meanwhile, it drops what it holds before it serves again (NodeGuard).
// 4. A node admits a put only for a key its own view places on it (NodeGuard::Admit), and
//    drops the keys a change moves off it.
//
//   NodeFence fence("node-a", std::chrono::seconds(2), kFreshFor);
//   fence.LeaseConfirmed(sent);       // Registration, after each acknowledged keep-alive
//   fence.ViewSeen(true);             // NodeGuard, at each list of members
//   if (Status st = fence.Check(); !st.ok()) return st;   // the server, per request
//
// Thread rules: Freshness and NodeFence are lock-free; any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ecstore::cluster {

using SteadyClock = std::chrono::steady_clock;

// How long a view of the members counts as current after etcd last confirmed it.
inline constexpr std::chrono::milliseconds kFreshFor{3000};

// The words a node's fence refuses with (NodeFence::Check): a writer recognizes them.
inline constexpr char kFenceRefusal[] = "refuses to serve";
// The words a node refuses a request with whose view of the members is older than its own
// (the client reads the members again).
inline constexpr char kViewBehind[] = "routed by a view of the members older than";

// A put's outcome from the answers of every place it wrote or cleared (rule 1): Unavailable,
// "not acknowledged", where one did not answer (it may hold an older copy); else the first
// refusal (Busy, InvalidArgument, ...); else Ok.
Status PutOutcome(std::string_view ns, std::string_view key, const std::vector<Status>& answers);

// Whether a read's answer at one place sends it to the key's next place: a miss there, or a
// node that did not answer.
inline bool TryNextPlace(const Status& s) { return s.IsNotFound() || s.IsUnavailable(); }

// What a read that found the key at none of its places returns: NotFound -- also where its
// owner did not answer (`owner_down`: a lost node costs misses, not errors), saying so;
// else `last`, the last place's answer.
Status ReadMiss(std::string_view ns, std::string_view key, const std::optional<Status>& owner_down,
                const Status& last);

// Whether `st`, the answer of a member that left to a call that clears a key, shows that it
// serves no copy: it answered, or its fence refused, or nothing listens at `tcp` (HOST:PORT)
// now. A node that left drops all it holds before it serves again (rule 3); one that does
// not answer at a listening address may be hung, serving a reader: in doubt, false.
bool ServesNothing(const Status& st, const std::string& tcp);

// What a node keeps off its lease's TTL: etcd's and the node's clocks may run at slightly
// different rates, and etcd notices a lapse in its own time.
std::chrono::milliseconds FenceMargin(std::chrono::milliseconds ttl);

// When etcd last confirmed a view current (the send time of the read that did), and whether
// that is within the bound now.
class Freshness {
 public:
  explicit Freshness(std::chrono::milliseconds bound) : bound_(bound) {}
  std::chrono::milliseconds bound() const { return bound_; }
  // A read sent at `sent` found the view current. Never moves back.
  void Confirmed(SteadyClock::time_point sent);
  bool fresh() const;
  // How long ago it was last confirmed (-1 ms: never).
  std::chrono::milliseconds age() const;
  // Unavailable or NotFound saying the view is too old to act on: `what` is refused.
  Status Stale(bool miss, const std::string& cluster, const std::string& what) const;

 private:
  const std::chrono::milliseconds bound_;
  std::atomic<int64_t> confirmed_ns_{0};  // steady clock; 0: never
};

// Whether a cluster node may serve now (rule 3). Starts closed: nothing is served before the
// node's first registration.
class NodeFence {
 public:
  NodeFence(std::string id, std::chrono::milliseconds ttl, std::chrono::milliseconds fresh_for);
  // A lease grant or keep-alive sent at `sent` was acknowledged and the record read back.
  void LeaseConfirmed(SteadyClock::time_point sent);
  // The lease lapsed, or the record went or was taken: closed until LeaseConfirmed.
  void LeaseLost();
  // The node's view of the members holds its record (or not).
  void ViewSeen(bool member) { member_.store(member); }
  // The node's view changed at etcd revision `revision` (its members differ from before).
  void ViewChanged(int64_t revision);
  // A clean stop: closed for good, before the lease is revoked.
  void Stop() { stopped_.store(true); }
  Freshness* view() { return &view_; }
  // Ok, or Unavailable saying why the node refuses (the client tries the key's next place):
  // also where `client_view`, the revision of the view a request was routed by (0: none
  // said), is older than the node's last change (kViewBehind: the client reads again).
  Status Check(int64_t client_view = 0) const;
  bool serving() const { return Check().ok(); }

 private:
  const std::string id_;
  const std::chrono::nanoseconds valid_for_;  // TTL - margin
  Freshness view_;
  std::atomic<int64_t> lease_until_ns_{0};  // steady clock; 0: not registered
  std::atomic<int64_t> changed_at_{0};      // ViewChanged's
  std::atomic<bool> member_{false}, stopped_{false};
};

}  // namespace ecstore::cluster
