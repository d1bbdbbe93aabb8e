// The command line's cluster parts: `serve --cluster` joining it (registered in etcd while
// it serves) and `ec-store --cluster URI cluster status` listing its members.
// Thread rules: from the command's own (main) thread.
#pragma once

#include <memory>
#include <string>

#include "cli/entry_commands.h"
#include "cli/serve.h"
#include "cluster/membership.h"
#include "cluster/node_guard.h"
#include "store/store.h"

namespace ecstore::cli {

// Before the node serves (CheckRejoin): its id (kept in the store directory unless --node-id
// gives one), its incarnation, and whether what it holds may be served -- what may be out of
// date is dropped here. Throws CliError where a live node has the id, or on a bad setting.
struct ClusterJoin {
  std::string name, id;
  uint64_t incarnation = 0;
  cluster::Rejoin rejoin;
};
ClusterJoin PrepareJoin(const Globals& g, const ServeArgs& a, Store* store);

// The node in the cluster while it serves: its record under a lease kept alive every third of
// --cluster-ttl, and the guard that drops keys a membership change moves off it.
struct AdmissionOff {
  void operator()(Store* store) const { store->SetAdmission(nullptr); }
};
struct ClusterMembership {
  std::unique_ptr<cluster::NodeGuard> guard;
  std::unique_ptr<cluster::Registration> registration;  // before guard goes: leaves first
  // The store's puts ask the guard whether their key is this node's (NodeGuard::Admit);
  // first to go, so no put asks a guard that is gone.
  std::unique_ptr<Store, AdmissionOff> admission;
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
