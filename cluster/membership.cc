#include "cluster/membership.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace ecstore::cluster {

using nlohmann::json;

std::string NodeInfo::ToJson() const {
  return json{{"id", id},           {"tcp", tcp},
              {"rdma", rdma},       {"host", host},
              {"unix", unix_path},  {"capacity", capacity},
              {"version", version}, {"incarnation", incarnation}}
      .dump();
}

Result<NodeInfo> NodeInfo::FromJson(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("id") || !j.contains("tcp"))
    return Status::InvalidArgument("not a node's record: " + text);
  NodeInfo n;
  n.id = j.value("id", "");
  n.tcp = j.value("tcp", "");
  n.rdma = j.value("rdma", "");
  n.host = j.value("host", "");
  n.unix_path = j.value("unix", "");
  n.capacity = j.value("capacity", uint64_t{0});
  n.version = j.value("version", "");
  n.incarnation = j.value("incarnation", uint64_t{0});
  return n;
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

std::string NodesPrefix(const std::string& cluster) { return "/ec-store/" + cluster + "/nodes/"; }

Result<std::vector<NodeInfo>> Members(EtcdClient& etcd, const std::string& cluster) {
  auto kvs = etcd.Prefix(NodesPrefix(cluster));
  if (!kvs.ok()) return kvs.status();
  std::vector<NodeInfo> out;
  for (const auto& [key, value] : *kvs) {
    auto n = NodeInfo::FromJson(value);
    if (n.ok())
      out.push_back(std::move(n).value());
    else
      spdlog::warn("cluster {}: skipping {}: {}", cluster, key, n.status().ToString());
  }
  return out;
}

Result<std::unique_ptr<Registration>> Registration::Start(EtcdClient etcd, std::string cluster,
                                                          NodeInfo self, std::chrono::seconds ttl) {
  std::unique_ptr<Registration> r(
      new Registration(std::move(etcd), std::move(cluster), std::move(self), ttl));
  EC_RETURN_IF_ERROR(r->Register());
  r->thread_ = std::thread([p = r.get()] { p->KeepAlive(); });
  return r;
}

Status Registration::Register() {
  auto lease = etcd_.GrantLease(ttl_);
  if (!lease.ok()) return lease.status();
  Status st = etcd_.Put(NodesPrefix(cluster_) + self_.id, self_.ToJson(), *lease);
  if (!st.ok()) return st;
  lease_ = *lease;
  registered_ = true;
  return Status::Ok();
}

void Registration::KeepAlive() {
  // A third of the TTL between renewals: two may be lost before the lease lapses.
  const auto every = std::chrono::milliseconds(ttl_) / 3;
  std::unique_lock<std::mutex> l(mu_);
  while (!cv_.wait_for(l, every, [&] { return stop_; })) {
    l.unlock();
    auto ttl = etcd_.KeepAlive(lease_);
    Status st = ttl.ok() ? Status::Ok() : ttl.status();
    if (st.IsNotFound()) st = Register();  // it lapsed (etcd was away too long): join again
    if (st.ok() != registered_.load())
      st.ok() ? spdlog::info("cluster {}: registered again as {}", cluster_, self_.id)
              : spdlog::warn(
                    "cluster {}: keeping the registration alive failed ({}); still "
                    "serving, trying again",
                    cluster_, st.ToString());
    registered_ = st.ok();
    l.lock();
  }
}

void Registration::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  Status st = etcd_.Revoke(lease_);
  if (!st.ok())
    spdlog::warn("cluster {}: leaving failed ({}); the node leaves when its lease lapses", cluster_,
                 st.ToString());
}

Result<std::string> NodeId(const std::string& dir, const std::string& given) {
  const std::string path = dir + "/node-id";
  std::string id = given;
  if (id.empty()) {
    std::ifstream in(path);
    std::getline(in, id);
  }
  if (id.empty()) {
    std::random_device rd;
    std::ostringstream s;
    s << std::hex << rd() << rd();
    id = "node-" + s.str();
  }
  if (id.find('/') != std::string::npos || id.size() > 128)
    return Status::InvalidArgument("node id '" + id + "': at most 128 characters, no '/'");
  std::ofstream out(path, std::ios::trunc);
  out << id << "\n";
  if (!out) return Status::IOError("cannot write " + path);
  return id;
}

Result<uint64_t> NextIncarnation(const std::string& dir) {
  const std::string path = dir + "/node-incarnation";
  uint64_t n = 0;
  {
    std::ifstream in(path);
    in >> n;
  }
  std::ofstream out(path, std::ios::trunc);
  out << ++n << "\n";
  if (!out) return Status::IOError("cannot write " + path);
  return n;
}

}  // namespace ecstore::cluster
