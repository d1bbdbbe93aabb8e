// The command line's cluster parts: `serve --cluster` joining it (registered in etcd while
// it serves) and `ec-store --cluster URI cluster status` listing its members.
// Thread rules: from the command's own (main) thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "cli/entry_commands.h"
#include "cli/serve.h"
#include "cluster/membership.h"
#include "cluster/node_guard.h"
#include "ops/prometheus.h"
#include "store/store.h"

namespace ecstore::cli {

// Before the node serves (CheckRejoin): its id (kept in the store directory unless --node-id
// gives one), its incarnation, and whether what it holds may be served -- what may be out of
// date is dropped here. Throws CliError where a live node has the id, or on a bad setting.
// Its fence, closed until the node registers, goes to the server (ServerOptions::fence).
struct ClusterJoin {
  std::string name, id;
  uint64_t incarnation = 0;
  cluster::Rejoin rejoin;
  std::chrono::seconds ttl{10};
  std::shared_ptr<cluster::NodeFence> fence;
};
// The namespace of the node's start-up check of --advertise: it passes the closed fence.
inline constexpr char kAdvertiseCheckNs[] = "ec-store-advertise-check";
ClusterJoin PrepareJoin(const Globals& g, const ServeArgs& a, Store* store);

// The node in the cluster while it serves: its record under a lease kept alive every third of
// --cluster-ttl, and the guard that drops keys a membership change moves off it.
struct AdmissionOff {
  void operator()(Store* store) const { store->SetAdmission(nullptr); }
};
struct ClusterMembership {
  std::shared_ptr<cluster::NodeFence> fence;
  std::unique_ptr<cluster::NodeGuard> guard;
  std::unique_ptr<cluster::Registration> registration;
  // The store's puts ask the guard whether their key is this node's (NodeGuard::Admit).
  std::unique_ptr<Store, AdmissionOff> admission;
  // A clean stop, in the order that keeps the promise and frees nothing in use: the fence
  // closes (every request refused), the lease is revoked (readers route around the node),
  // then -- once `stop_server` has joined every thread that could put -- the admission hook
  // and the guard (whose watch drops keys) go, all before the store is closed.
  void Leave(const std::function<void()>& stop_server);
  // Where the node stands, for /metrics (all zero before it joins).
  ops::ServerState::ClusterCounts Counts() const;
};
// Registers the node, reachable at --advertise (else the listen address, when it is one
// clients can reach). Throws CliError on a bad setting or a taken id.
ClusterMembership JoinCluster(const Globals& g, const ServeArgs& a, const ClusterJoin& join,
                              const std::string& listen_host, uint16_t port, Store* store);

int ClusterStatusCommand(const Globals& g);

// `locate`: per key, every node and medium holding it (Cache::Locate) -- one store's
// keydir, a daemon's, or a cluster's places asked in parallel. Exit 0 whether found or not.
int LocateCommand(const Globals& g, const std::string& ns, const std::vector<std::string>& keys);

}  // namespace ecstore::cli
