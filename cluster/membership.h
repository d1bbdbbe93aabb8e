// Membership of a cluster in etcd: a node registers itself under /ec-store/NAME/nodes/ID
// with an etcd lease it keeps alive; a clean stop revokes the lease (the node leaves at
// once), a dead node's lease expires after its TTL (it leaves then). Readers list the
// members under the prefix. No protocol of our own: etcd decides who is a member.
//
//   auto reg = Registration::Start(etcd, "prod", self, std::chrono::seconds(10));
//   auto nodes = Members(etcd, "prod");     // every live node, ordered by id
//
// Thread rules: Registration owns one keep-alive thread; Stop and the destructor from the
// thread that started it. Members from any thread with its own EtcdClient.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "cluster/consistency.h"
#include "cluster/etcd.h"
#include "cluster/placement.h"

namespace ecstore::cluster {

// What a node says of itself in etcd (one JSON object).
struct NodeInfo {
  std::string id;
  std::string tcp;        // HOST:PORT its clients connect to
  std::string rdma;       // IP:PORT of its RDMA listener, or empty
  std::string host;       // the host's name: a client on the same host may use `unix`
  std::string unix_path;  // its same-host socket (shared memory), or empty
  uint64_t capacity = 0;  // pool + disk quota, in bytes: its weight in placement
  std::string version;
  uint64_t incarnation = 0;  // how many times this id has started (from its store directory)
  // How deep in a key's copy order (CopyOrder) the node keeps the key: a put writes its
  // replicas and clears the rest of those places, a read looks there, and the node drops a
  // key that a membership change puts deeper (serve --cluster-keep).
  uint64_t keep = 3;
  // The slots it places keys over (Ring: 2^slots), or 0 where it ranks each key (a record
  // from a version before slots).
  int slots = kSlotBits;

  std::string ToJson() const;
  // Every field checked by type and range (ids printable, addresses HOST:PORT, capacity at
  // most 1 EiB): InvalidArgument saying which field is wrong, never an exception.
  static Result<NodeInfo> FromJson(const std::string& text);
  // FromJson, and the record's id must be its etcd key's last part (under `prefix`).
  static Result<NodeInfo> FromRecord(const std::string& key, const std::string& prefix,
                                     const std::string& value);
};

// Where a member list puts keys: its ring (by capacity), each member's host -- the host of
// the address it serves at, which it checked at start -- for replicas on distinct hosts, and
// how deep its members keep a key (the least `keep`), ranking slots where every member
// does. Every client and node builds the same one from the same members.
struct Layout {
  Ring ring{{}};
  std::vector<std::string> hosts;  // hosts[i] is ring.members()[i]'s
  size_t keep = 0;
  // Members in id order; `previous`, the last layout, lets the slot table be filled from its
  // predecessor's at once.
  static Layout Of(const std::vector<NodeInfo>& members_by_id, const Layout* previous = nullptr);
  // The key's places: CopyOrder, `keep` deep.
  std::vector<size_t> Places(std::string_view ns, std::string_view key) const {
    return CopyOrder(ring, hosts, ns, key, keep);
  }
};

// This host's name (gethostname), as nodes register it.
std::string HostName();

// The prefix a cluster's nodes live under.
std::string NodesPrefix(const std::string& cluster);

Result<std::vector<NodeInfo>> Members(EtcdClient& etcd, const std::string& cluster);

// A node's record under its lease, created only where the id is free: a second node with a
// live id is refused (InvalidArgument, naming the other's address). Each keep-alive reads the
// record back; where it lapsed or vanished (etcd away past the TTL, a pause, a hand's delete)
// the node was out of the ring: `on_rejoin` runs (the node drops what it holds, as it may
// be out of date) before the node registers again. Each acknowledged grant or keep-alive
// (with the record read back) confirms the node's lease to its `fence`, from when it was
// sent; a lapse closes the fence before on_rejoin runs.
class Registration {
 public:
  // take_over: the etcd revision of this node's own earlier record to replace (CheckRejoin),
  // or 0 (the id must be free). Where that record lapsed before it was taken over, the node
  // was out of the ring meanwhile: on_rejoin runs, and it registers afresh (kept() false).
  // `fence` (may be null) outlives the registration.
  static Result<std::unique_ptr<Registration>> Start(EtcdClient etcd, std::string cluster,
                                                     NodeInfo self, std::chrono::seconds ttl,
                                                     int64_t take_over = 0,
                                                     std::function<void()> on_rejoin = {},
                                                     NodeFence* fence = nullptr);
  ~Registration() { Stop(); }
  // Closes the fence (the node refuses from now on), then revokes the lease: the node leaves
  // every reader's list at once. Idempotent.
  void Stop();
  // Whether the node is in the ring as itself now (false while etcd is unreachable, or its
  // id is held by another node: it keeps serving and registers again when it can).
  bool registered() const { return registered_.load(); }
  // Whether etcd answered the last keep-alive (or the registration after it), whatever it
  // said: false while etcd cannot be reached.
  bool etcd_answered() const { return etcd_answered_.load(); }
  // Whether the earlier record was taken over (the entries kept), as Start was asked to.
  bool kept() const { return kept_; }

 private:
  Registration(EtcdClient etcd, std::string cluster, NodeInfo self, std::chrono::seconds ttl,
               std::function<void()> on_rejoin, NodeFence* fence)
      : etcd_(std::move(etcd)),
        cluster_(std::move(cluster)),
        self_(std::move(self)),
        ttl_(ttl),
        on_rejoin_(std::move(on_rejoin)),
        fence_(fence) {}
  Status Register(int64_t take_over);  // a new lease and the node's key under it
  Status Renew();                      // one keep-alive, and the record read back
  void KeepAlive();                    // the thread

  EtcdClient etcd_;
  const std::string cluster_;
  const NodeInfo self_;
  const std::chrono::seconds ttl_;
  const std::function<void()> on_rejoin_;
  NodeFence* const fence_;
  bool kept_ = false;
  int64_t lease_ = 0;  // the keep-alive thread's, and Stop's once it has joined
  std::atomic<bool> registered_{false};
  std::atomic<bool> etcd_answered_{true};
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The node's id kept in its store directory (DIR/node-id): `given` when not empty (written
// there), else the one written before, else a new random one. And its incarnation, counted
// in DIR/node-incarnation.
Result<std::string> NodeId(const std::string& dir, const std::string& given);
// What a member's TLS certificate carries to prove its node id (subjectAltName URI):
// ecstore://CLUSTER/node/ID. A client accepts a member by this alone, never by an address
// its record claims: whoever can write a record cannot also get the CA to sign this name.
std::string MemberUri(const std::string& cluster, const std::string& id);
Result<uint64_t> NextIncarnation(const std::string& dir);

}  // namespace ecstore::cluster
