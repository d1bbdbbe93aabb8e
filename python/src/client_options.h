// connect()'s keyword arguments as the C++ client's options: ClientOptions (with TLS) and a
// cluster's EtcdAccess; a cluster client's view as JSON. The Python package checks the
// dicts' keys first.
// Thread rules: pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "cluster/cluster_cache.h"
#include "cluster/etcd.h"
#include "net/connection.h"

namespace ecstore::py {

net::ClientOptions ToClientOptions(const std::string& token, const std::string& transport,
                                   double timeout_s, int retries, bool put_arena,
                                   double connect_timeout_s,
                                   const std::optional<std::map<std::string, std::string>>& tls);
cluster::EtcdAccess ToEtcdAccess(const std::map<std::string, std::string>& etcd);
// Its members (as last seen, each with the transport it is reached by), whether etcd is
// current, and what it routed.
std::string ClusterJson(const cluster::ClusterCache& c);

}  // namespace ecstore::py
