#include "cluster/membership.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/mutex.h"
#include "net/socket.h"

namespace ecstore::cluster {

using nlohmann::json;

std::string NodeInfo::ToJson() const {
  return json{{"id", id},           {"tcp", tcp},
              {"rdma", rdma},       {"host", host},
              {"unix", unix_path},  {"capacity", capacity},
              {"version", version}, {"incarnation", incarnation},
              {"keep", keep},       {"slots", slots}}
      .dump();
}

namespace {
// A string field: absent or null reads as empty where `required` is false.
Status StringField(const json& j, const char* name, bool required, std::string* out) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    if (required) return Status::InvalidArgument(std::string("no '") + name + "'");
    return Status::Ok();
  }
  if (!it->is_string())
    return Status::InvalidArgument(std::string("'") + name + "' is not a string");
  *out = it->get<std::string>();
  if (out->size() > 4096) return Status::InvalidArgument(std::string("'") + name + "' is too long");
  return Status::Ok();
}

Status CountField(const json& j, const char* name, uint64_t max, uint64_t* out) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_unsigned())
    return Status::InvalidArgument(std::string("'") + name + "' is not a whole number >= 0");
  *out = it->get<uint64_t>();
  if (*out > max) return Status::InvalidArgument(std::string("'") + name + "' is out of range");
  return Status::Ok();
}

Status CheckAddress(const char* name, const std::string& value) {
  if (value.empty()) return Status::Ok();
  auto hp = net::ParseHostPort(value);
  if (!hp.ok() || hp->port == 0 || hp->host.empty())
    return Status::InvalidArgument(std::string("'") + name + "' is not HOST:PORT");
  return Status::Ok();
}
}  // namespace

Result<NodeInfo> NodeInfo::FromJson(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("not a node's record (not a JSON object)");
  NodeInfo n;
  Status st = StringField(j, "id", true, &n.id);
  if (st.ok() &&
      (n.id.empty() || n.id.size() > 256 || n.id.find('/') != std::string::npos ||
       !std::all_of(n.id.begin(), n.id.end(), [](char c) { return c > ' ' && c < 127; })))
    st = Status::InvalidArgument("'id' is not 1-256 printable characters without '/'");
  if (st.ok()) st = StringField(j, "tcp", true, &n.tcp);
  if (st.ok() && n.tcp.empty()) st = Status::InvalidArgument("'tcp' is empty");
  if (st.ok()) st = CheckAddress("tcp", n.tcp);
  if (st.ok()) st = StringField(j, "rdma", false, &n.rdma);
  if (st.ok()) st = CheckAddress("rdma", n.rdma);
  if (st.ok()) st = StringField(j, "host", false, &n.host);
  if (st.ok()) st = StringField(j, "unix", false, &n.unix_path);
  if (st.ok()) st = StringField(j, "version", false, &n.version);
  // Capacity weighs placement: past 1 EiB a record would take every key.
  if (st.ok()) st = CountField(j, "capacity", uint64_t{1} << 60, &n.capacity);
  if (st.ok()) st = CountField(j, "incarnation", UINT64_MAX, &n.incarnation);
  if (st.ok()) st = CountField(j, "keep", 64, &n.keep);
  if (st.ok() && n.keep == 0) st = Status::InvalidArgument("'keep' is 0");
  // A record without slots is from a node that ranks each key (0).
  uint64_t slots = 0;
  if (st.ok()) st = CountField(j, "slots", SlotTable::kMaxBits, &slots);
  n.slots = static_cast<int>(slots);
  if (!st.ok()) return Status::InvalidArgument("not a node's record: " + st.message());
  return n;
}

Result<NodeInfo> NodeInfo::FromRecord(const std::string& key, const std::string& prefix,
                                      const std::string& value) {
  auto n = FromJson(value);
  if (!n.ok()) return n;
  if (key.size() <= prefix.size() || key.compare(0, prefix.size(), prefix) != 0 ||
      key.substr(prefix.size()) != n->id)
    return Status::InvalidArgument("not a node's record: its id '" + n->id +
                                   "' is not the key's last part");
  return n;
}

Layout Layout::Of(const std::vector<NodeInfo>& members_by_id, const Layout* previous) {
  Layout l;
  std::vector<Member> ring;
  // Slots only where every member places by the same slots: while a cluster mixes versions
  // (a rolling upgrade), all rank each key, as the older nodes do.
  int slots = members_by_id.empty() ? 0 : members_by_id.front().slots;
  for (const NodeInfo& m : members_by_id) {
    if (m.slots != slots) slots = 0;
    ring.push_back({m.id, m.capacity ? static_cast<double>(m.capacity) : 1.0});
    // Replicas spread by the address clients reach the node at -- checked by the node at
    // start (serve --advertise), unlike the host name it reports.
    l.hosts.push_back(m.tcp.substr(0, m.tcp.rfind(':')));
    l.keep = l.keep ? std::min<size_t>(l.keep, m.keep) : m.keep;
  }
  l.ring = Ring(std::move(ring), slots, previous ? &previous->ring : nullptr);
  return l;
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
    auto n = NodeInfo::FromRecord(key, NodesPrefix(cluster), value);
    if (n.ok())
      out.push_back(std::move(n).value());
    else
      spdlog::warn("cluster {}: skipping {}: {}", cluster, key, n.status().ToString());
  }
  return out;
}

Result<std::unique_ptr<Registration>> Registration::Start(EtcdClient etcd, std::string cluster,
                                                          NodeInfo self, std::chrono::seconds ttl,
                                                          int64_t take_over,
                                                          std::function<void()> on_rejoin,
                                                          NodeFence* fence) {
  std::unique_ptr<Registration> r(new Registration(
      std::move(etcd), std::move(cluster), std::move(self), ttl, std::move(on_rejoin), fence));
  Status st = r->Register(take_over);
  r->kept_ = take_over != 0 && st.ok();
  if (st.IsNotFound()) {
    // The earlier incarnation's record lapsed after CheckRejoin read it: writers may have
    // routed around this id since, so what it holds may be out of date.
    spdlog::warn("cluster {}: {}'s earlier record lapsed before it was taken over; joining afresh",
                 r->cluster_, r->self_.id);
    if (r->on_rejoin_) r->on_rejoin_();
    st = r->Register(0);
  }
  EC_RETURN_IF_ERROR(st);
  r->thread_ = std::thread([p = r.get()] { p->KeepAlive(); });
  return r;
}

Status Registration::Register(int64_t take_over) {
  const auto sent = SteadyClock::now();
  auto lease = etcd_.GrantLease(ttl_);
  if (!lease.ok()) return lease.status();
  const std::string key = NodesPrefix(cluster_) + self_.id;
  auto made = etcd_.PutIf(key, take_over, self_.ToJson(), *lease);
  if (made.ok() && *made) {
    lease_ = *lease;
    registered_ = true;
    if (fence_) fence_->LeaseConfirmed(sent);
    return Status::Ok();
  }
  (void)etcd_.Revoke(*lease);
  if (!made.ok()) return made.status();
  auto other = etcd_.Get(key);
  if (take_over != 0 && other.status().IsNotFound())
    return Status::NotFound("node " + self_.id + "'s earlier record lapsed");
  auto info = other.ok() ? NodeInfo::FromJson(other->value) : Result<NodeInfo>(other.status());
  return Status::InvalidArgument(
      "node id " + self_.id + " is in use in cluster " + cluster_ + " by the node at " +
      (info.ok() ? info->tcp : std::string("an address its record does not say")) +
      ": give this node its own --node-id or store directory");
}

Status Registration::Renew() {
  const auto sent = SteadyClock::now();
  auto ttl = etcd_.KeepAlive(lease_);
  if (!ttl.ok()) return ttl.status();
  auto rec = etcd_.Get(NodesPrefix(cluster_) + self_.id);
  if (!rec.ok()) return rec.status();  // NotFound: deleted, the node is out of the ring
  if (rec->lease != lease_)
    return Status::InvalidArgument("its id " + self_.id + " was taken by another node's record");
  if (fence_) fence_->LeaseConfirmed(sent);
  return Status::Ok();
}

void Registration::KeepAlive() {
  // A quarter of the TTL between renewals: two may be lost, or slow, before the fence (the
  // TTL less its margin from the last acknowledged one) closes.
  const auto every = std::chrono::milliseconds(ttl_) / 4;
  UniqueLock l(&mu_);
  for (;;) {
    const auto until = std::chrono::steady_clock::now() + every;
    while (!stop_ && cv_.WaitUntil(l, until)) {
    }
    if (stop_) break;
    l.unlock();
    Status st = Renew();
    if ((st.IsNotFound() || st.IsInvalidArgument()) && fence_) fence_->LeaseLost();
    if (st.IsNotFound()) {
      // The lease lapsed or the record went: clients routed around this node, and puts
      // and erases of its keys went elsewhere. What it holds may be out of date.
      spdlog::warn("cluster {}: {} was out of the ring ({}); joining again", cluster_, self_.id,
                   st.ToString());
      if (on_rejoin_) on_rejoin_();
      (void)etcd_.Revoke(lease_);
      st = Register(0);
    }
    if (st.ok() != registered_.load())
      st.ok() ? spdlog::info("cluster {}: registered again as {}", cluster_, self_.id)
              : spdlog::warn(
                    "cluster {}: keeping the registration alive failed ({}); still "
                    "serving, trying again",
                    cluster_, st.ToString());
    registered_ = st.ok();
    etcd_answered_ = !st.IsUnavailable();
    l.lock();
  }
}

void Registration::Stop() {
  if (fence_) fence_->Stop();  // refusing before any reader can see the node leave
  {
    MutexLock l(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  Status st = etcd_.Revoke(lease_);
  if (!st.ok())
    spdlog::warn("cluster {}: leaving failed ({}); the node leaves when its lease lapses", cluster_,
                 st.ToString());
}

std::string MemberUri(const std::string& cluster, const std::string& id) {
  return "ecstore://" + cluster + "/node/" + id;
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
