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
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "cluster/etcd.h"

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

  std::string ToJson() const;
  // Every field checked by type and range (ids printable, addresses HOST:PORT, capacity at
  // most 1 EiB): InvalidArgument saying which field is wrong, never an exception.
  static Result<NodeInfo> FromJson(const std::string& text);
  // FromJson, and the record's id must be its etcd key's last part (under `prefix`).
  static Result<NodeInfo> FromRecord(const std::string& key, const std::string& prefix,
                                     const std::string& value);
};

// This host's name (gethostname), as nodes register it.
std::string HostName();

// The prefix a cluster's nodes live under.
std::string NodesPrefix(const std::string& cluster);

Result<std::vector<NodeInfo>> Members(EtcdClient& etcd, const std::string& cluster);

class Registration {
 public:
  static Result<std::unique_ptr<Registration>> Start(EtcdClient etcd, std::string cluster,
                                                     NodeInfo self, std::chrono::seconds ttl);
  ~Registration() { Stop(); }
  // Revokes the lease: the node leaves every reader's list at once. Idempotent.
  void Stop();
  // Whether the last keep-alive reached etcd (false while etcd is unreachable: the node
  // keeps serving and registers again when it comes back).
  bool registered() const { return registered_.load(); }

 private:
  Registration(EtcdClient etcd, std::string cluster, NodeInfo self, std::chrono::seconds ttl)
      : etcd_(std::move(etcd)), cluster_(std::move(cluster)), self_(std::move(self)), ttl_(ttl) {}
  Status Register();  // a new lease and the node's key under it
  void KeepAlive();   // the thread

  EtcdClient etcd_;
  const std::string cluster_;
  const NodeInfo self_;
  const std::chrono::seconds ttl_;
  int64_t lease_ = 0;  // the keep-alive thread's, and Stop's once it has joined
  std::atomic<bool> registered_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // under mu_
  std::thread thread_;
};

// The node's id kept in its store directory (DIR/node-id): `given` when not empty (written
// there), else the one written before, else a new random one. And its incarnation, counted
// in DIR/node-incarnation.
Result<std::string> NodeId(const std::string& dir, const std::string& given);
Result<uint64_t> NextIncarnation(const std::string& dir);

}  // namespace ecstore::cluster
