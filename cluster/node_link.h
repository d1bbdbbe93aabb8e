// NodeLink: one cluster member and this process's connection to it -- made at the first
// call (the node's unix socket and shared memory where it is on this host, else TCP), marked
// down for a while after a call it did not answer, and the leases read through it.
//
//   NodeLink link(info, "prod", client_options, std::chrono::seconds(1));
//   auto r = link.Call([&](Cache& c) { return c.Get(ns, key, dst); });
//
// The connection is a net::Client unless a Connector is given: the fleet simulator's
// in-process nodes (sim/) are reached that way, through the same routing. Links are shared
// by every ClusterCache of a process (LinkRegistry, cluster/link_registry.h), so a process
// holds one connection per node however many threads and handles call it. A connection
// idle for `idle_close` with no lease read through it is closed (CloseIfIdle); the next
// call makes it again, as the first did.
//
// Thread rules: thread-safe. One call at a time on the connection (mu_); Call,
// CloseIfIdle and the leases' releases take it. A node that changes address or restarts (a
// new incarnation) is a new NodeLink; the old one lives on while leases on it do.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "cache/cache.h"
#include "cluster/membership.h"
#include "net/connection.h"

namespace ecstore::cluster {

// Makes the connection to a node in place of net::Client::Connect (an in-process node for a
// simulation); Unavailable where the node cannot be reached.
using Connector = std::function<Result<std::unique_ptr<Cache>>(const NodeInfo&)>;

class NodeLink : public std::enable_shared_from_this<NodeLink> {
 public:
  NodeLink(NodeInfo info, std::string cluster, net::ClientOptions options,
           std::chrono::milliseconds down_for, Connector connector = {},
           std::chrono::milliseconds idle_close = std::chrono::milliseconds(0));
  ~NodeLink();
  const NodeInfo& info() const { return info_; }
  // Connections refused in this process because a node's TLS certificate did not name the
  // node id or host its record claims.
  static uint64_t unproven();

  // Down on Unavailable (for down_for, told in the log once) but a refusal of the caller's
  // view (kViewBehind: the node answers), else up; the end of a call (idle from now).
  void Observe(const Status& st);

  // fn(client) with the link's mutex held and its connection made, then Observe of what it
  // returned. Unavailable without calling fn at once while the node is marked down, or when
  // it cannot be reached (then marked down): a node that does not answer costs one
  // deadline, whatever transports were tried. `view` (0: none): the etcd revision of the
  // members the requests are routed by, declared to the node where it changed
  // (net::Client::SetView).
  template <typename Fn>
  auto Call(Fn fn, int64_t view = 0) -> decltype(fn(std::declval<Cache&>())) {
    if (Status st = NotDown(); !st.ok()) return st;
    MutexLock l(&mu_);
    if (Status st = Connected(view); !st.ok()) return st;
    auto r = fn(*client_);
    Observe(StatusOf(r));
    return r;
  }
  // Closes the connection where it has been idle for idle_close (0: never) with no lease
  // read through it outstanding and no call in progress; true if it did.
  bool CloseIfIdle();
  bool connected();
  // A lease read through this node, released over its connection (errors passed through).
  Result<ReadLease> Wrap(Result<ReadLease> got);

  // Runs fn(client) if the connection is made (without making it); for stats.
  void IfConnected(const std::function<void(Cache&)>& fn);
  // Memory registered with this node's connection now and with each one made later (a
  // connection closed idle is made again with it); Unregister forgets one Register.
  Status Register(const BufferDesc& memory);
  void Unregister(const BufferDesc& memory);
  std::string transport();  // "" before the first call

 private:
  class Leases;
  static const Status& StatusOf(const Status& s) { return s; }
  template <typename T>
  static const Status& StatusOf(const Result<T>& r) {
    return r.status();
  }
  static int64_t NowUs();
  void MarkDown(const Status& why);
  // Unavailable while the node is marked down: looked at before the mutex, which a call to
  // a hung node holds for its deadline.
  Status NotDown() const;
  Status Connected(int64_t view) REQUIRES(mu_);  // client_ made, `view` declared to it
  void RegisterAll() REQUIRES(mu_);              // registered_ with a new client_
  bool CloseIdle() REQUIRES(mu_);
  Result<std::unique_ptr<Cache>> Connect();  // net::Client's transports, or the Connector

  const NodeInfo info_;
  const std::string cluster_;
  const net::ClientOptions options_;
  const std::chrono::milliseconds down_for_;
  const Connector connector_;
  const std::chrono::milliseconds idle_close_;
  Mutex mu_;                                            // one call at a time on client_
  std::unique_ptr<Cache> client_ GUARDED_BY(mu_);       // connected at the first call
  int64_t declared_ GUARDED_BY(mu_) = 0;                // the view told to client_
  std::vector<BufferDesc> registered_ GUARDED_BY(mu_);  // Register's, each once per call
  std::atomic<int64_t> last_use_us_{0};
  std::atomic<int64_t> leases_{0};  // read through this link and not released yet
  std::atomic<int64_t> down_until_us_{0};
  std::atomic<bool> down_{false};  // told in the log once per going and coming back
};

}  // namespace ecstore::cluster
