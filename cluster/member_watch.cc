#include "cluster/member_watch.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ecstore::cluster {

std::optional<NodeInfo> MemberWatch::Read(const std::string& key, const std::string& value) {
  auto n = NodeInfo::FromRecord(key, NodesPrefix(cluster_), value);
  if (n.ok()) {
    logged_bad_.erase(key);
    return std::move(n).value();
  }
  ++bad_records_;
  auto [it, fresh] = logged_bad_.try_emplace(key, value);
  if (fresh || it->second != value) {
    it->second = value;
    spdlog::warn("cluster {}: skipping {}: {}", cluster_, key, n.status().message());
  }
  return std::nullopt;
}

std::vector<NodeInfo> MemberWatch::Parse(const EtcdClient::Range& range) {
  std::vector<NodeInfo> members;
  for (const auto& [key, value] : range.kvs)
    if (auto n = Read(key, value)) members.push_back(std::move(*n));
  return members;
}

Result<std::unique_ptr<MemberWatch>> MemberWatch::Start(EtcdClient etcd, std::string cluster,
                                                        OnChange on_change,
                                                        std::chrono::milliseconds idle) {
  std::unique_ptr<MemberWatch> w(
      new MemberWatch(std::move(etcd), std::move(cluster), std::move(on_change), idle));
  auto range = w->etcd_.PrefixAt(NodesPrefix(w->cluster_));
  if (!range.ok())
    return Status::Unavailable("cluster " + w->cluster_ + ": cannot read its members from etcd (" +
                               range.status().message() + ")");
  w->members_ = w->Parse(*range);
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

void MemberWatch::Follow(int64_t* rev, bool* relisted) {
  int64_t& revision = *rev;
  bool& listed = *relisted;
  const std::string prefix = NodesPrefix(cluster_);
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
          std::optional<NodeInfo> n;
          if (e.deleted)
            logged_bad_.erase(e.key);
          else if (!(n = Read(e.key, e.value)))
            return;  // skipped; a node's earlier record stays until its key is deleted
          if (n) members.push_back(std::move(*n));
          spdlog::info("cluster {}: node {} {}", cluster_, id, e.deleted ? "left" : "joined");
          Tell(std::move(members));
        },
        &cancel_, idle_);
    if (!st.ok()) listed = false;  // etcd went away, or compacted: read the members again
  }
}

void MemberWatch::Run(int64_t revision) {
  // Whatever goes wrong in a pass (an allocation, a callback), the thread lives on and reads
  // the members again: a client that stopped following its cluster would route blind.
  bool listed = true;
  while (!stop_) {
    try {
      Follow(&revision, &listed);
    } catch (const std::exception& ex) {
      spdlog::error("cluster {}: following the members failed ({}); reading them again", cluster_,
                    ex.what());
      listed = false;
      std::unique_lock<std::mutex> l(wait_mu_);
      wait_cv_.wait_for(l, std::chrono::milliseconds(500), [&] { return stop_.load(); });
    }
  }
}

}  // namespace ecstore::cluster
