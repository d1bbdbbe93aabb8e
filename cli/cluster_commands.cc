#include "cli/cluster_commands.h"

#include <spdlog/spdlog.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/flags.h"
#include "cli/output.h"
#include "cli/reach.h"
#include "cluster/cluster_cache.h"
#include "net/client.h"
#include "net/tls.h"

namespace ecstore::cli {

namespace {
// A TLS member whose certificate does not carry its member URI would be refused by every
// client: said at start, with the name to issue, rather than as misses later.
void RequireMemberUri(const Globals& g, const std::string& cluster_name, const std::string& id) {
  if (g.tls_cert.empty()) return;
  const std::string uri = cluster::MemberUri(cluster_name, id);
  if (!Check(net::CertificateCarriesUri(g.tls_cert, uri)))
    throw CliError("InvalidArgument: --tls-cert " + g.tls_cert + " does not carry " + uri +
                   ": a cluster member proves its node id by that subjectAltName (clients "
                   "refuse a member whose certificate lacks it); issue it with "
                   "subjectAltName=URI:" +
                   uri + ",DNS:<the host clients dial>");
}
}  // namespace

ClusterJoin PrepareJoin(const Globals& g, const ServeArgs& a, Store* store) {
  ClusterJoin j;
  auto etcd = Check(
      cluster::EtcdClient::Parse(g.cluster, &j.name, std::chrono::seconds(2), EtcdAccessOf(g)));
  j.id = Check(cluster::NodeId(g.dir, a.node_id));
  j.incarnation = Check(cluster::NextIncarnation(g.dir));
  const uint64_t ttl_us = Check(ParseDuration(a.cluster_ttl));
  if (ttl_us < 2'000'000)
    throw CliError("InvalidArgument: --cluster-ttl " + a.cluster_ttl +
                   " is under etcd's 2 s minimum");
  j.ttl = std::chrono::seconds(ttl_us / 1'000'000);
  RequireMemberUri(g, j.name, j.id);
  j.fence = std::make_shared<cluster::NodeFence>(j.id, j.ttl, cluster::kFreshFor);
  j.rejoin = Check(cluster::CheckRejoin(etcd, j.name, j.id, j.incarnation - 1));
  if (!j.rejoin.keep)
    Check(cluster::DropAll(store, "node " + j.id + " was out of cluster " + j.name +
                                      " (a clean stop, or its lease lapsed): puts and erases of "
                                      "its keys went elsewhere meanwhile"));
  return j;
}

namespace {

// --advertise must reach this node: a nonce put into its store here is read back through
// that address (a node advertising another's address, or one nobody listens on, is
// refused before it joins). The nonce is erased either way.
void CheckAdvertise(const Globals& g, const std::string& cluster_name, const std::string& a_node_id,
                    const std::string& address, Store* store) {
  static constexpr const char* kNs = kAdvertiseCheckNs;
  std::random_device rd;
  char nonce[33];
  std::snprintf(nonce, sizeof(nonce), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  const uint8_t byte = 1;
  Check(store->Put(kNs, nonce, {DType::kU8, {1}}, {&byte, 1}));
  net::ClientOptions o;
  o.token = ClientToken(g);
  o.timeout = std::chrono::milliseconds(2000);
  o.retries = 0;
  o.transport = net::TransportKind::kTcp;
  // With TLS, as the cluster's clients will: the answering certificate must carry this
  // node's member URI (its own pair is the client certificate).
  if (!g.tls_cert.empty())
    o.tls = net::TlsOptions{.cert = g.tls_cert,
                            .key = g.tls_key,
                            .ca = g.tls_ca,
                            .server_name = "",
                            .server_uri = cluster::MemberUri(cluster_name, a_node_id)};
  auto c = net::Client::Connect((o.tls ? "tls://" : "tcp://") + address, o);
  Status found = c.ok() ? (*c)->Lookup(kNs, nonce).status() : c.status();
  (void)store->Erase(kNs, nonce);
  if (found.IsPermissionDenied()) {  // reached, over TLS; the ACL does not let it read
    spdlog::warn(
        "--advertise {}: reached, but the ACL does not let this node's certificate "
        "read namespace {}, so the answer could not be compared",
        address, kNs);
    return;
  }
  if (!found.ok())
    throw CliError(
        "InvalidArgument: --advertise " + address + " does not reach this node (" +
        (found.IsNotFound() ? std::string("another node answers there") : found.message()) +
        "): give the HOST:PORT other hosts' clients reach this node at");
}

}  // namespace

ClusterMembership JoinCluster(const Globals& g, const ServeArgs& a, const ClusterJoin& join,
                              const std::string& listen_host, uint16_t port, Store* store) {
  std::string name;
  auto etcd =
      Check(cluster::EtcdClient::Parse(g.cluster, &name, std::chrono::seconds(2), EtcdAccessOf(g)));
  cluster::NodeInfo self;
  self.id = join.id;
  if (!a.advertise.empty()) {
    CheckAdvertise(g, name, join.id, a.advertise, store);
    self.tcp = a.advertise;
  } else if (listen_host == "0.0.0.0" || listen_host == "::" || listen_host.empty()) {
    throw CliError("InvalidArgument: --listen " + listen_host +
                   " is no address other nodes' clients can reach: give --advertise HOST:PORT");
  } else {
    self.tcp = listen_host + ":" + std::to_string(port);
  }
  self.rdma = a.rdma_listen;
  self.host = cluster::HostName();
  self.unix_path = std::filesystem::absolute(g.dir + "/serve.sock").string();
  auto stats = Check(store->Stats());
  self.capacity = stats.pool().capacity + stats.disk().capacity;
  self.version = EC_STORE_VERSION;
  self.incarnation = join.incarnation;
  self.keep = a.cluster_keep;
  ClusterMembership m;
  m.fence = join.fence;
  m.guard = Check(cluster::NodeGuard::Start(etcd, join.name, join.id, store, m.fence.get()));
  store->SetAdmission(
      [g = m.guard.get()](std::string_view ns, std::string_view key) { return g->Admit(ns, key); });
  m.admission.reset(store);
  const std::string why = "node " + join.id + " was out of cluster " + join.name +
                          ": puts and erases of its keys went elsewhere meanwhile";
  m.registration = Check(cluster::Registration::Start(
      std::move(etcd), join.name, self, join.ttl, join.rejoin.take_over,
      [store, why] {
        if (auto n = cluster::DropAll(store, why); !n.ok())
          spdlog::error("dropping the entries failed: {}", n.status().ToString());
      },
      m.fence.get()));
  // Serving once its own view holds it (the watch sees the record it just put).
  const auto until = std::chrono::steady_clock::now() + join.ttl;
  while (!m.fence->serving() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (Status st = m.fence->Check(); !st.ok())
    spdlog::warn("cluster {}: {}", join.name, st.message());
  spdlog::info("cluster {}: joined as {} at {} (incarnation {}, lease TTL {}{})", join.name,
               self.id, self.tcp, self.incarnation, a.cluster_ttl,
               m.registration->kept() ? ", its entries kept: back within its lease" : "");
  return m;
}

void ClusterMembership::Leave(const std::function<void()>& stop_server) {
  if (fence) fence->Stop();
  if (registration) registration->Stop();
  stop_server();
  admission.reset();
  guard.reset();  // the registration stays: /healthz reads it until the endpoint stops
}

int ClusterStatusCommand(const Globals& g) {
  if (g.cluster.empty())
    throw CliError("InvalidArgument: say which cluster: --cluster etcd://HOST:PORT/NAME");
  net::ClientOptions co = ClientOptionsOf(g);
  co.retries = 0;  // a node that does not answer is shown as such, not waited for twice
  auto cache =
      Check(cluster::ClusterCache::Open(g.cluster, {.client = co, .etcd = EtcdAccessOf(g)}));
  auto nodes = cache->StatsByNode();
  // Each node's lease: seconds left of the TTL it was granted ("-" where etcd cannot say).
  std::map<std::string, std::string> lease_left;
  std::string name;
  auto etcd =
      Check(cluster::EtcdClient::Parse(g.cluster, &name, std::chrono::seconds(2), EtcdAccessOf(g)));
  if (auto range = etcd.PrefixAt(cluster::NodesPrefix(name)); range.ok())
    for (size_t i = 0; i < range->kvs.size(); ++i)
      if (auto ttl = etcd.TimeToLive(range->leases[i]); ttl.ok())
        lease_left[range->kvs[i].first.substr(cluster::NodesPrefix(name).size())] =
            std::to_string(ttl->first) + "s/" + std::to_string(ttl->second) + "s";
  // A node's entries, the bytes in its pool and on its disk, and its hits over every tier.
  auto totals = [](const StoreStats& s) {
    uint64_t hits = 0;
    for (const TierStats& t : s.tiers) hits += t.hits;
    return std::array<uint64_t, 4>{s.keydir_entries, s.pool().bytes, s.disk().bytes, hits};
  };
  if (g.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& n : nodes) {
      auto j = nlohmann::json::parse(n.node.ToJson());
      j["answers"] = n.stats.ok();
      if (auto l = lease_left.find(n.node.id); l != lease_left.end()) j["lease_ttl"] = l->second;
      if (n.stats.ok()) {
        auto [entries, pool, disk, hits] = totals(*n.stats);
        j["entries"] = entries, j["pool_bytes"] = pool, j["disk_bytes"] = disk, j["hits"] = hits;
      } else {
        j["error"] = n.stats.status().ToString();
      }
      arr.push_back(std::move(j));
    }
    std::cout << nlohmann::json{{"cluster", cache->name()}, {"nodes", arr}}.dump(JsonIndent(g))
              << "\n";
    return 0;
  }
  std::printf("cluster %s: %zu node(s)\n", cache->name().c_str(), nodes.size());
  std::printf("%-20s %-21s %7s %9s %8s %9s %9s %8s %6s %s\n", "NODE", "ADDRESS", "LEASE",
              "CAPACITY", "ENTRIES", "POOL", "DISK", "HITS", "INCARN", "VERSION");
  for (const auto& n : nodes) {
    std::string entries = "-", pool = "-", disk = "-", hits = "down";
    if (n.stats.ok()) {
      auto t = totals(*n.stats);
      entries = std::to_string(t[0]), pool = HumanBytes(t[1]), disk = HumanBytes(t[2]);
      hits = std::to_string(t[3]);
    }
    auto l = lease_left.find(n.node.id);
    std::printf("%-20s %-21s %7s %9s %8s %9s %9s %8s %6llu %s\n", n.node.id.c_str(),
                n.node.tcp.c_str(), l == lease_left.end() ? "-" : l->second.c_str(),
                HumanBytes(n.node.capacity).c_str(), entries.c_str(), pool.c_str(), disk.c_str(),
                hits.c_str(), static_cast<unsigned long long>(n.node.incarnation),
                n.node.version.c_str());
  }
  return 0;
}

int LocateCommand(const Globals& g, const std::string& ns, const std::vector<std::string>& keys) {
  Target t = Target::Open(g, Use::kInspect);
  auto where = Check(t.cache().Locate(ns, keys));
  t.Close();
  const std::string here = t.cluster() ? "" : (g.server.empty() ? "local" : g.server);
  if (g.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < keys.size(); ++i) {
      nlohmann::json at = nlohmann::json::array();
      for (const Location& l : where[i])
        at.push_back({{"node", l.node.empty() ? here : l.node}, {"medium", TierName(l.medium)}});
      rows.push_back({{"key", keys[i]}, {"at", std::move(at)}});
    }
    std::cout << nlohmann::json{{"namespace", ns}, {"keys", std::move(rows)}}.dump(JsonIndent(g))
              << "\n";
    return 0;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    std::cout << keys[i];
    if (where[i].empty()) std::cout << "  (held nowhere)";
    for (const Location& l : where[i])
      std::cout << "  " << (l.node.empty() ? here : l.node) << ":" << TierName(l.medium);
    std::cout << "\n";
  }
  return 0;
}

ops::ServerState::ClusterCounts ClusterMembership::Counts() const {
  ops::ServerState::ClusterCounts c;
  c.on = true;
  if (guard) {
    const cluster::NodeGuard::Counts n = guard->counts();
    c.members = n.members, c.member = n.member, c.view_revision = n.revision;
    c.view_changes = n.changes, c.bad_records = n.bad_records, c.keys_dropped = n.dropped;
  }
  c.registered = registration && registration->registered();
  c.etcd_reachable = registration && registration->etcd_answered();
  if (fence) {
    c.serving = fence->serving();
    const auto age = fence->view()->age();
    c.view_age_seconds = age.count() < 0 ? -1.0 : std::chrono::duration<double>(age).count();
  }
  return c;
}

}  // namespace ecstore::cli
