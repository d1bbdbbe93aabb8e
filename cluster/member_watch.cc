#include "cluster/member_watch.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ecstore::cluster {

std::optional<NodeInfo> MemberWatch::Read(const std::string& key, const std::string& value,
                                          int64_t lease) {
  auto n = NodeInfo::FromRecord(key, NodesPrefix(cluster_), value);
  // A node registers under a lease; a record without one is no live node's and never lapses.
  if (n.ok() && lease == 0)
    n = Status::InvalidArgument("no etcd lease holds it (a node's record is put under one)");
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
  keys_.clear();
  for (size_t i = 0; i < range.kvs.size(); ++i) {
    keys_.insert(range.kvs[i].first);
    if (auto n = Read(range.kvs[i].first, range.kvs[i].second, range.leases[i]))
      members.push_back(std::move(*n));
  }
  return members;
}

void MemberWatch::Applied(int64_t revision) {
  MutexLock l(&applied_mu_);
  applied_revision_ = revision;
  applied_keys_ = static_cast<int64_t>(keys_.size());
}

void MemberWatch::Refresh(int64_t revision) {
  int64_t asked = refreshed_for_.load();
  while (asked < revision)
    if (refreshed_for_.compare_exchange_weak(asked, revision)) return cancel_.Interrupt();
}

void MemberWatch::Pause(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  UniqueLock l(&wait_mu_);
  while (!stop_.load() && wait_cv_.WaitUntil(l, until)) {
  }
}

// A view is confirmed when etcd, asked after it was told, shows nothing under the prefix
// changed after the revision it reflects: the send time of that read is when it was current.
// Most seconds one point read suffices -- etcd's revision has not moved since the view was
// last known current, so nothing changed anywhere -- and only a moved revision costs a read
// of the prefix's keys. A view still behind a third of the bound later has a watch that does
// not deliver: it is made again.
void MemberWatch::Confirm(EtcdClient etcd) {
  const std::string prefix = NodesPrefix(cluster_);
  const auto every = std::max(std::chrono::milliseconds(50), fresh_->bound() / 3);
  SteadyClock::time_point behind_since{};  // the epoch: not behind
  int64_t current_at = 0;  // the latest store revision at which the view was known current
  while (!stop_) {
    int64_t revision, keys;
    {
      MutexLock l(&applied_mu_);
      revision = applied_revision_, keys = applied_keys_;
    }
    current_at = std::max(current_at, revision);
    auto sent = SteadyClock::now();
    auto now = etcd.Revision(prefix);
    bool confirmed = now.ok() && *now <= current_at;
    std::optional<bool> behind;
    if (now.ok() && !confirmed) {
      sent = SteadyClock::now();
      auto c = etcd.CountSince(prefix, revision + 1);
      confirmed = c.ok() && c->total == keys && c->changed == 0;
      if (confirmed) current_at = c->revision;
      if (c.ok()) behind = !confirmed;
    }
    if (confirmed) {
      fresh_->Confirmed(sent);
      behind_since = {};
    } else if (behind && behind_since == SteadyClock::time_point{}) {
      behind_since = sent;
    } else if (behind && sent - behind_since >= every) {
      spdlog::warn(
          "cluster {}: the members' watch is behind etcd (revision {}); reading them again",
          cluster_, revision);
      cancel_.Interrupt();
      behind_since = {};
    }
    Pause(every);
  }
}

Result<std::unique_ptr<MemberWatch>> MemberWatch::Start(EtcdClient etcd, std::string cluster,
                                                        OnChange on_change,
                                                        std::chrono::milliseconds idle,
                                                        Freshness* fresh) {
  std::unique_ptr<MemberWatch> w(
      new MemberWatch(std::move(etcd), std::move(cluster), std::move(on_change), idle, fresh));
  const auto sent = SteadyClock::now();
  auto range = w->etcd_.PrefixAt(NodesPrefix(w->cluster_));
  if (!range.ok())
    return Status::Unavailable("cluster " + w->cluster_ + ": cannot read its members from etcd (" +
                               range.status().message() + ")");
  w->members_ = w->Parse(*range);
  w->on_change_(w->members_, range->revision);
  w->Applied(range->revision);
  if (fresh) fresh->Confirmed(sent);
  // The confirming thread's own client, copied before the watch thread uses etcd_.
  EtcdClient confirming = w->etcd_.KeepingConnection();
  w->thread_ = std::thread([p = w.get(), rev = range->revision] { p->Run(rev); });
  if (fresh) w->confirm_ = std::thread([p = w.get(), e = std::move(confirming)] { p->Confirm(e); });
  return w;
}

MemberWatch::~MemberWatch() {
  stop_ = true;
  cancel_.Cancel();
  { MutexLock l(&wait_mu_); }
  wait_cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  if (confirm_.joinable()) confirm_.join();
}

void MemberWatch::Tell(std::vector<NodeInfo> members, int64_t revision) {
  members_ = members;
  ++changes_;
  on_change_(std::move(members), revision);
}

bool MemberWatch::Relist(int64_t* revision) {
  auto range = etcd_.PrefixAt(NodesPrefix(cluster_));
  if (!range.ok()) {
    if (current_.exchange(false))
      spdlog::warn("cluster {}: etcd unreachable ({}); routing by the last {} member(s) seen",
                   cluster_, range.status().message(), members_.size());
    Pause(std::chrono::milliseconds(500));
    return false;
  }
  Tell(Parse(*range), range->revision);
  *revision = range->revision;
  Applied(range->revision);
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
          if (e.deleted) {
            logged_bad_.erase(e.key);
            keys_.erase(e.key);
          } else {
            keys_.insert(e.key);
            n = Read(e.key, e.value, e.lease);
          }
          // A record that is not a node's is skipped; a node's earlier record under that key
          // stays until the key is deleted.
          if (e.deleted || n) {
            if (n) members.push_back(std::move(*n));
            spdlog::info("cluster {}: node {} {}", cluster_, id, e.deleted ? "left" : "joined");
            Tell(std::move(members), e.revision);
          }
          Applied(revision);
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
      Pause(std::chrono::milliseconds(500));
    }
  }
}

}  // namespace ecstore::cluster
