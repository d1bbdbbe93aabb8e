// ClusterCache: a whole cluster of `ec-store serve` nodes as one Cache. It reads the members
// from etcd once, then follows them through an etcd watch; each call goes straight to the
// key's owner -- weighted rendezvous placement (cluster/placement.h), computed here, so no
// lookup RPC and no metadata server -- over a connection to that node: its unix socket and
// shared memory where the node is on this host (the same host name, its socket there), else
// TCP or RDMA, as net::Client chooses.
//
//   auto c = ClusterCache::Open("etcd://10.0.0.2:2379/prod", {.client = {.token = secret}});
//   c.value()->Put("qwen", mm_hash, meta, bytes);       // to the owner (and replicas)
//   auto info = c.value()->Get("qwen", mm_hash, dst);    // from the owner
//
// What a user can count on (docs/guarantees.md):
// - An acknowledged erase or put stays done: no read returns an erased entry or bytes older
//   than the last acknowledged put. A key lives only at its places (CopyOrder, as deep as the
//   members keep keys: `keep`); a put writes its replicas there and clears the other places,
//   an erase clears them all, and both fail (Unavailable, nothing acknowledged) when a place
//   does not answer. A node drops a key a membership change moves off its places, and a node
//   back after its lease lapsed drops everything it held (cluster/node_guard.h).
// - Misses, not errors, when a node is lost: a read from a dead or hung owner costs at most
//   the call's deadline and is NotFound, saying the node did not answer (counted in
//   counters().unavailable); the node is then skipped for `down_for` (one log line when it
//   goes, one when it is back), and it leaves the ring when its etcd lease lapses. Its keys'
//   puts fail meanwhile (a miss later, which a cache can afford). Unavailable only where no
//   node is known at all.
// - A join costs no recomputes: a miss at a key's owner is asked at its next places, where
//   it lived before the join.
// - Batches (GetMany, LookupMany, AcquireMany, Prefetch) are split by owner and the parts
//   sent in parallel, as are a put's replicas and clears: on the process's FanOut pool
//   (cluster/fan_out.h) and the caller's thread, never a thread started per part.
// - When in doubt, a miss (cluster/consistency.h): a client acts on its view of the members
//   only while etcd confirmed it current within `fresh_for`; past that, reads are misses
//   and puts and erases are not acknowledged (counted in counters().stale_view), until etcd
//   confirms it again. A put or erase also clears, while a change settles, the places the
//   key had before it -- nodes that left included.
//
// Thread rules: thread-safe. Each node's connection serves one call at a time (its own
// mutex); calls to different nodes run in parallel. A ReadLease may be destroyed on any
// thread, but before the ClusterCache. Membership is followed by a MemberWatch
// (cluster/member_watch.h) on its own thread, its view confirmed on a second.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "cache/cache.h"
#include "cluster/cluster_view.h"
#include "cluster/consistency.h"
#include "cluster/etcd.h"
#include "cluster/link_registry.h"
#include "cluster/member_watch.h"
#include "cluster/membership.h"
#include "cluster/node_link.h"
#include "cluster/placement.h"
#include "net/claims.h"
#include "net/connection.h"

namespace ecstore::net {
class Client;
}

namespace ecstore::cluster {

struct ClusterOptions {
  // Each node's connection: token, deadlines, retries, transport. With `client.tls`, every
  // node is reached over TLS and must prove the node id or the host its etcd record claims
  // (its certificate names one); a node that cannot is skipped (a miss, logged once, and
  // counted in counters().unproven_members).
  net::ClientOptions client;
  EtcdAccess etcd;  // etcds:// (TLS) and etcd auth
  // A put goes to the key's first `replicas` places (distinct hosts while there are enough);
  // a get reads the first of them that has it. At most the places the nodes keep (`keep`).
  size_t replicas = 1;
  // A miss at the replicas is asked at the key's other places (its owner before a join).
  bool fallback = true;
  // After a call to a node fails, calls to it fail at once for this long.
  std::chrono::milliseconds down_for{1000};
  // How long a quiet etcd watch stays open before it is made again.
  std::chrono::milliseconds watch_idle{30000};
  // For this long after a membership change, a put or erase also clears the key's places
  // before the change that are still members: a node that has not seen the change yet (or
  // not dropped what moved off it) holds no copy a client that has not seen it either reads.
  std::chrono::milliseconds settle{10000};
  // Where not 0, this client also confirms its view with etcd itself (a read every third of
  // it) and acts on it only this long after the last confirmation; past it, calls miss or
  // fail (not acknowledged). At most `settle`. 0: the nodes confirm -- every request
  // carries its view's revision, and a node whose own confirmed view changed after it
  // refuses (the client reads the members again), so a client adds no etcd reads.
  std::chrono::milliseconds fresh_for{0};
  // A process holds one connection per node, shared by all its threads and ClusterCaches
  // (with the same client options); one idle this long, with no lease read through it, is
  // closed, and made again by the next call to the node (0: kept open).
  std::chrono::milliseconds idle_close{60000};

  // InvalidArgument where the options cannot keep the promise, saying which.
  Status Check() const {
    if (replicas == 0) return Status::InvalidArgument("replicas must be at least 1");
    if (settle < std::max(fresh_for, kFreshFor))
      return Status::InvalidArgument(
          "settle must be at least fresh_for and the nodes' bound (3 s): a reader's view may "
          "lag a writer's that long, and a writer clears a change's earlier places only while "
          "it settles");
    return Status::Ok();
  }

  // Advanced. Connects to a node in place of net::Client (the fleet simulator's in-process
  // nodes); empty: net::Client over shared memory, TCP, TLS or RDMA.
  Connector connector{};
};

// What this client did, for its metrics.
struct ClusterCounters {
  uint64_t routed = 0;         // calls (per key) sent to a node
  uint64_t fallback_hits = 0;  // misses at the owner found at the next choice
  uint64_t unavailable = 0;    // calls (per key) a dead or hung node answered with nothing
  uint64_t membership_changes = 0;
  uint64_t bad_records = 0;       // records under the members' prefix that were not a node's
  uint64_t unproven_members = 0;  // connections refused: a node's certificate named another
  uint64_t stale_view = 0;        // calls refused: the view was not confirmed within fresh_for
};

// A ClusterCache is a Cache with the memory and claims facets; admin runs on one node (ask
// its net::Client), device I/O and reservations are same-host only.
class ClusterCache : public Cache, public MemoryRegistration, public Claims {
 public:
  // uri: "etcd://HOST:PORT[,HOST:PORT...]/NAME". Unavailable where etcd cannot be read.
  static Result<std::unique_ptr<ClusterCache>> Open(const std::string& uri,
                                                    ClusterOptions options = {});
  // A client whose members the caller gives (Follow), not etcd: the fleet simulator, or a
  // membership source of one's own. replicas 0 is taken as 1.
  static std::unique_ptr<ClusterCache> WithMembers(std::string name, ClusterOptions options);
  ~ClusterCache() override;
  const char* transport() const override { return "cluster"; }
  // Routes by `members` from now on, as the etcd watch does at each change (connections to
  // unchanged nodes kept). Any thread; calls in flight finish on the members they began on.
  void Follow(std::vector<NodeInfo> members) EXCLUDES(view_mu_) { Install(std::move(members), 0); }
  const std::string& name() const { return name_; }

  Status Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
             std::span<const uint8_t> bytes) override;
  Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst) override;
  std::vector<Result<EntryInfo>> GetMany(std::string_view ns, const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts) override;
  Result<ReadLease> Acquire(std::string_view ns, std::string_view key) override;
  // Each node's part leased through its client; nothing is told to `watch` (streamed all
  // false): the parts come from other hosts.
  using Cache::AcquireMany;
  std::vector<Result<ReadLease>> AcquireMany(std::string_view ns,
                                             const std::vector<std::string>& keys,
                                             LandingWatch* watch) override;
  Result<ReadLease> Pin(std::string_view ns, std::string_view key) override;
  Result<EntryInfo> Lookup(std::string_view ns, std::string_view key) override;
  Result<std::vector<std::optional<EntryInfo>>> LookupMany(
      std::string_view ns, const std::vector<std::string>& keys) override;
  // Each key's places asked for it (LookupMany, the nodes in parallel): every member that
  // holds it, owner first. A node that does not answer is left out (counted in unavailable).
  Result<std::vector<std::vector<Location>>> Locate(std::string_view ns,
                                                    const std::vector<std::string>& keys) override;
  // Erases the entry at each of its places; Unavailable (not done) where one did not answer.
  Status Erase(std::string_view ns, std::string_view key) override;
  Status EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                   std::vector<bool>* erased) override;
  // Every node's entries, node by node (in id order); a node that does not answer is
  // skipped, with a warning.
  Status ListPages(size_t page_size,
                   const std::function<bool(std::vector<EntryInfo>&&)>& on_page) override;
  // ListPages, each page with the node (its id) it came from.
  Status ListNodePages(
      size_t page_size,
      const std::function<bool(std::vector<EntryInfo>&&, const std::string&)>& on_page);
  // The nodes' stats added up (tiers, counters); Unavailable only when no node answers.
  Result<StoreStats> Stats() override { return Stats(nullptr); }
  // Stats, and the ids of the nodes that did not answer (left out of the sum) in *missing.
  Result<StoreStats> Stats(std::vector<std::string>* missing);
  // net::Client::Prefetch at each key's owner.
  Result<bool> Prefetch(std::string_view ns, const std::vector<std::string>& keys) override;

  // net::Client::Claim at the key's owner, so every engine asks the same place: granted
  // (compute and put it), held by another engine (wait for its put), or present. Granted
  // where the owner does not answer: the caller computes, as it would without claims.
  Result<ClaimAnswer> Claim(std::string_view ns, std::string_view key,
                            std::chrono::milliseconds ttl) override;
  CacheCapabilities capabilities() override {
    return {.prefetch = true, .prefetch_queued = true, .memory = this, .claims = this};
  }
  // Registered with the client of every node reached so far, and of each reached later; an
  // error (device memory no node's NIC can reach) leaves it registered nowhere.
  Status RegisterMemory(const BufferDesc& memory) override EXCLUDES(registered_mu_);
  void UnregisterMemory(const BufferDesc& memory) override EXCLUDES(registered_mu_);
  TransferStats transfer_stats() const override;  // the nodes' clients', added up

  struct NodeStats {
    NodeInfo node;
    Result<StoreStats> stats;
  };
  std::vector<NodeStats> StatsByNode();
  // The members as last seen, in id order, and whether that is etcd's current view.
  std::vector<NodeInfo> Nodes() const;
  // Whether the members are etcd's: confirmed within fresh_for, or (fresh_for 0) the watch
  // follows etcd.
  bool current() const {
    return watch_ && (opt_.fresh_for.count() > 0 ? fresh_.fresh() : watch_->current());
  }
  // Each member, and how this client reaches it ("shm", "tcp", "rdma"; "" before the first
  // call to it). Waits for a call in progress on each node.
  std::vector<std::pair<NodeInfo, std::string>> Connections() const;
  // The ids of the key's first n places, best first (its owner, then where it goes next).
  std::vector<std::string> Owners(std::string_view ns, std::string_view key, size_t n) const;
  ClusterCounters counters() const;

 private:
  using View = ClusterView;
  ClusterCache(std::string name, ClusterOptions o);

  std::shared_ptr<const View> Snapshot() const EXCLUDES(view_mu_);
  // Ok where the view may be acted on; else the miss (NotFound) or refusal (Unavailable)
  // saying `what` and why.
  Status Doubt(bool miss, const std::string& what);
  // A new view of `members` (MemberWatch's thread), keeping unchanged nodes' connections.
  // `revision`: etcd's for the list (0: the caller's own, nothing declared to nodes).
  void Install(std::vector<NodeInfo> members, int64_t revision) EXCLUDES(view_mu_, registered_mu_);
  // Runs fn(client) on node n (NodeLink::Call), its requests routed by view v.
  template <typename Fn>
  auto OnNode(const View& v, NodeLink& n, Fn fn) -> decltype(fn(std::declval<Cache&>()));
  void NoteView(const View& v, const Status& st);
  // This handle's memory onto the links `to` has and `from` had not, and off the others.
  void Reregister(const View& from, const View& to) REQUIRES(registered_mu_);
  // Where a key is read, best first: its places (only its replicas without fallback).
  std::vector<size_t> ReadChoices(const View& v, std::string_view ns, std::string_view key) const;
  // The first of the key's read choices that has it (fn per node); the owner's failure when
  // no node has it and the owner did not answer.
  template <typename T, typename Fn>
  Result<T> ReadFirst(std::string_view ns, std::string_view key, Fn fn);
  // Per key, fn(client, the keys' indices) at each key's choice `round` of its read choices,
  // the nodes in parallel; the keys still missing (NotFound / Unavailable) go round again.
  template <typename T, typename Fn>
  std::vector<Result<T>> Batched(std::string_view ns, const std::vector<std::string>& keys, Fn fn);

  const std::string name_;
  const ClusterOptions opt_;
  Freshness fresh_;  // confirmed by watch_'s second thread

  mutable Mutex view_mu_;
  std::shared_ptr<const View> view_ GUARDED_BY(view_mu_);
  std::atomic<uint64_t> routed_{0}, fallback_hits_{0}, unavailable_{0}, stale_view_{0};
  mutable Mutex registered_mu_;  // taken before a node's mu (NodeLink::Register), never after
  std::vector<BufferDesc> registered_ GUARDED_BY(registered_mu_);  // RegisterMemory's
  std::unique_ptr<MemberWatch> watch_;  // last: it stops (no more Install) before the rest goes
};

}  // namespace ecstore::cluster
