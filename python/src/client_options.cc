#include "python/src/client_options.h"

#include "python/src/entries.h"

namespace ecstore::py {
namespace {
std::string At(const std::map<std::string, std::string>& m, const char* k) {
  auto it = m.find(k);
  return it == m.end() ? std::string() : it->second;
}
}  // namespace

net::ClientOptions ToClientOptions(const std::string& token, const std::string& transport,
                                   double timeout_s, int retries, bool put_arena,
                                   double connect_timeout_s,
                                   const std::optional<std::map<std::string, std::string>>& tls) {
  net::ClientOptions o;
  if (tls) {
    o.tls.emplace();
    o.tls->ca = At(*tls, "ca");
    o.tls->cert = At(*tls, "cert");
    o.tls->key = At(*tls, "key");
    o.tls->server_name = At(*tls, "server_name");
  }
  o.put_arena = put_arena;
  o.token = token;
  o.transport = Check(net::ParseTransportKind(transport));
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  o.connect_timeout = std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_s * 1000));
  o.retries = retries;
  return o;
}

cluster::EtcdAccess ToEtcdAccess(const std::map<std::string, std::string>& etcd) {
  return {At(etcd, "ca"), At(etcd, "cert"), At(etcd, "key"), At(etcd, "user"),
          At(etcd, "password")};
}

std::string ClusterJson(const cluster::ClusterCache& c) {
  std::string nodes;
  for (const auto& [n, how] : c.Connections()) {
    std::string j = n.ToJson();  // an object: the transport added before its closing brace
    j.insert(j.size() - 1, ",\"transport\":\"" + how + "\"");
    nodes += (nodes.empty() ? "" : ",") + j;
  }
  const cluster::ClusterCounters k = c.counters();
  return "{\"cluster\":\"" + c.name() + "\",\"current\":" + (c.current() ? "true" : "false") +
         ",\"nodes\":[" + nodes + "],\"routed\":" + std::to_string(k.routed) +
         ",\"fallback_hits\":" + std::to_string(k.fallback_hits) +
         ",\"unavailable\":" + std::to_string(k.unavailable) +
         ",\"membership_changes\":" + std::to_string(k.membership_changes) +
         ",\"bad_records\":" + std::to_string(k.bad_records) +
         ",\"unproven_members\":" + std::to_string(k.unproven_members) + "}";
}

}  // namespace ecstore::py
