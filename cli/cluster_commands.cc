#include "cli/cluster_commands.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/flags.h"
#include "cli/output.h"

namespace ecstore::cli {

std::unique_ptr<cluster::Registration> JoinCluster(const Globals& g, const std::string& node_id,
                                                   const std::string& advertise,
                                                   const std::string& listen_host, uint16_t port,
                                                   const std::string& rdma, const std::string& ttl,
                                                   Store* store) {
  std::string name;
  auto etcd = Check(cluster::EtcdClient::Parse(g.cluster, &name));
  cluster::NodeInfo self;
  self.id = Check(cluster::NodeId(g.dir, node_id));
  if (!advertise.empty()) {
    self.tcp = advertise;
  } else if (listen_host == "0.0.0.0" || listen_host == "::" || listen_host.empty()) {
    throw CliError("InvalidArgument: --listen " + listen_host +
                   " is no address other nodes' clients can reach: give --advertise HOST:PORT");
  } else {
    self.tcp = listen_host + ":" + std::to_string(port);
  }
  self.rdma = rdma;
  auto stats = Check(store->Stats());
  self.capacity = stats.pool().capacity + stats.disk().capacity;
  self.version = EC_STORE_VERSION;
  self.incarnation = Check(cluster::NextIncarnation(g.dir));
  const uint64_t ttl_us = Check(ParseDuration(ttl));
  if (ttl_us < 2'000'000)
    throw CliError("InvalidArgument: --cluster-ttl " + ttl + " is under etcd's 2 s minimum");
  auto reg = Check(cluster::Registration::Start(std::move(etcd), name, self,
                                                std::chrono::seconds(ttl_us / 1'000'000)));
  spdlog::info("cluster {}: joined as {} at {} (incarnation {}, lease TTL {})", name, self.id,
               self.tcp, self.incarnation, ttl);
  return reg;
}

int ClusterStatusCommand(const Globals& g) {
  if (g.cluster.empty())
    throw CliError("InvalidArgument: say which cluster: --cluster etcd://HOST:PORT/NAME");
  std::string name;
  auto etcd = Check(cluster::EtcdClient::Parse(g.cluster, &name));
  auto nodes = Check(cluster::Members(etcd, name));
  if (g.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& n : nodes) arr.push_back(nlohmann::json::parse(n.ToJson()));
    std::cout << nlohmann::json{{"cluster", name}, {"nodes", arr}}.dump(JsonIndent(g)) << "\n";
    return 0;
  }
  std::printf("cluster %s: %zu node(s)\n", name.c_str(), nodes.size());
  std::printf("%-24s %-22s %10s %6s %s\n", "NODE", "ADDRESS", "CAPACITY", "INCARN", "VERSION");
  for (const auto& n : nodes)
    std::printf("%-24s %-22s %10s %6llu %s\n", n.id.c_str(), n.tcp.c_str(),
                HumanBytes(n.capacity).c_str(), static_cast<unsigned long long>(n.incarnation),
                n.version.c_str());
  return 0;
}

}  // namespace ecstore::cli
