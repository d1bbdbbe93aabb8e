// The command line's cluster parts: `serve --cluster` joining it (registered in etcd while
// it serves) and `ec-store --cluster URI cluster status` listing its members.
// Thread rules: from the command's own (main) thread.
#pragma once

#include <memory>
#include <string>

#include "cli/entry_commands.h"
#include "cluster/membership.h"
#include "store/store.h"

namespace ecstore::cli {

// Registers this daemon in g.cluster as node `node_id` (kept in the store directory when
// empty), reachable at `advertise` (else the listen address, when it is one clients can
// reach), its lease kept alive every third of `ttl`. Throws CliError on a bad setting.
std::unique_ptr<cluster::Registration> JoinCluster(const Globals& g, const std::string& node_id,
                                                   const std::string& advertise,
                                                   const std::string& listen_host, uint16_t port,
                                                   const std::string& rdma, const std::string& ttl,
                                                   Store* store);

int ClusterStatusCommand(const Globals& g);

}  // namespace ecstore::cli
