#include "cluster/member_watch.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ecstore::cluster {

namespace {
std::vector<NodeInfo> Parse(const EtcdClient::Range& range) {
  std::vector<NodeInfo> members;
  for (const auto& [key, value] : range.kvs)
    if (auto n = NodeInfo::FromJson(value); n.ok()) members.push_back(std::move(n).value());
  return members;
}
}  // namespace

Result<std::unique_ptr<MemberWatch>> MemberWatch::Start(EtcdClient etcd, std::string cluster,
                                                        OnChange on_change,
                                                        std::chrono::milliseconds idle) {
  std::unique_ptr<MemberWatch> w(
      new MemberWatch(std::move(etcd), std::move(cluster), std::move(on_change), idle));
  auto range = w->etcd_.PrefixAt(NodesPrefix(w->cluster_));
  if (!range.ok())
    return Status::Unavailable("cluster " + w->cluster_ + ": cannot read its members from etcd (" +
                               range.status().message() + ")");
  w->members_ = Parse(*range);
  w->on_change_(w->members_);
  w->thread_ = std::thread([p = w.get(), rev = range->revision] { p->Run(rev); });
  return w;
}

MemberWatch::~MemberWatch() {
  stop_ = true;
  cancel_.Cancel();
  { std::lock_guard<std::mutex> l(wait_mu_); }
  wait_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MemberWatch::Tell(std::vector<NodeInfo> members) {
  members_ = members;
  ++changes_;
  on_change_(std::move(members));
}

bool MemberWatch::Relist(int64_t* revision) {
  auto range = etcd_.PrefixAt(NodesPrefix(cluster_));
  if (!range.ok()) {
    if (current_.exchange(false))
      spdlog::warn("cluster {}: etcd unreachable ({}); routing by the last {} member(s) seen",
                   cluster_, range.status().message(), members_.size());
    std::unique_lock<std::mutex> l(wait_mu_);
    wait_cv_.wait_for(l, std::chrono::milliseconds(500), [&] { return stop_.load(); });
    return false;
  }
  Tell(Parse(*range));
  *revision = range->revision;
  if (!current_.exchange(true))
    spdlog::info("cluster {}: etcd reachable again; {} member(s)", cluster_, members_.size());
  return true;
}

void MemberWatch::Run(int64_t revision) {
  const std::string prefix = NodesPrefix(cluster_);
  bool listed = true;
  while (!stop_) {
    if (!listed) {
      listed = Relist(&revision);
      continue;
    }
    Status st = etcd_.Watch(
        prefix, revision + 1,
        [&](const EtcdClient::Event& e) {
          revision = std::max(revision, e.revision);
          const std::string id = e.key.substr(prefix.size());
          std::vector<NodeInfo> members = members_;
          std::erase_if(members, [&](const NodeInfo& n) { return n.id == id; });
          if (!e.deleted)
            if (auto n = NodeInfo::FromJson(e.value); n.ok())
              members.push_back(std::move(n).value());
          spdlog::info("cluster {}: node {} {}", cluster_, id, e.deleted ? "left" : "joined");
          Tell(std::move(members));
        },
        &cancel_, idle_);
    if (!st.ok()) listed = false;  // etcd went away, or compacted: read the members again
  }
}

}  // namespace ecstore::cluster
