// MemberWatch: a cluster's members as etcd has them, followed on a thread of its own. It reads
// the members once at Start, then watches their prefix and tells `on_change` each new list
// (a join, a leave, a new incarnation). While etcd is unreachable it keeps the last list,
// current() turns false and it reads the members again until etcd answers. A record that is
// not a node's, or that holds no lease (a hand's put: nothing keeps it alive or takes it
// away), is skipped and counted; nothing a record holds can stop the thread.
//
// With a Freshness (cluster/consistency.h), a second thread asks etcd every third of its
// bound whether anything under the prefix changed since the revision the last list told was
// read at, and confirms the view when nothing did. A watch that hangs while the members
// change (a proxy that forwards nothing, a stream etcd stopped feeding) is restarted.
//
//   Freshness fresh(kFreshFor);
//   auto w = MemberWatch::Start(etcd, "prod", [&](std::vector<NodeInfo> m, int64_t rev) { ... },
//                               30s, &fresh);
//   fresh.fresh();   // whether etcd confirmed the last list told within the bound
//
// Thread rules: on_change is called on the calling thread during Start, then on the watch
// thread only; Start and the destructor (which stops the threads) from the owner's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "cluster/consistency.h"
#include "cluster/etcd.h"
#include "cluster/membership.h"

namespace ecstore::cluster {

class MemberWatch {
 public:
  // Each list with the etcd revision it reflects (a change's, or a read's).
  using OnChange = std::function<void(std::vector<NodeInfo>, int64_t revision)>;
  // Unavailable where etcd cannot be read now.
  // `fresh` (may be null: no confirmations) outlives the watch.
  static Result<std::unique_ptr<MemberWatch>> Start(EtcdClient etcd, std::string cluster,
                                                    OnChange on_change,
                                                    std::chrono::milliseconds idle,
                                                    Freshness* fresh = nullptr);
  ~MemberWatch();
  bool current() const { return current_.load(); }
  uint64_t changes() const { return changes_.load(); }  // lists told after the first
  // A node refused a request routed by the list of `revision` as older than its own: the
  // members are read again, once however many requests were refused for that list.
  void Refresh(int64_t revision);
  // Records under the members' prefix that were not a node's (malformed, mistyped, out of
  // range, or an id other than their key's): skipped, each logged once, counted here.
  uint64_t bad_records() const { return bad_records_.load(); }

 private:
  MemberWatch(EtcdClient etcd, std::string cluster, OnChange on_change,
              std::chrono::milliseconds idle, Freshness* fresh)
      : etcd_(std::move(etcd)),
        cluster_(std::move(cluster)),
        on_change_(std::move(on_change)),
        idle_(idle),
        fresh_(fresh) {}
  void Run(int64_t revision);  // the thread: from the revision the members were read at
  // Watches until stopped, reading the members first where *listed is false; may throw.
  void Follow(int64_t* revision, bool* listed);
  // Reads the members again: true once etcd answered (the list told), false after a pause.
  bool Relist(int64_t* revision);
  void Tell(std::vector<NodeInfo> members, int64_t revision);
  // The node in a record, or nothing (counted; logged when the key or its value is new).
  std::optional<NodeInfo> Read(const std::string& key, const std::string& value, int64_t lease);
  std::vector<NodeInfo> Parse(const EtcdClient::Range& range);
  // The revision and key count the view told so far reflects (the watch thread).
  void Applied(int64_t revision) EXCLUDES(applied_mu_);
  void Confirm(EtcdClient etcd);  // the confirming thread
  void Pause(std::chrono::milliseconds d);

  EtcdClient etcd_;
  const std::string cluster_;
  const OnChange on_change_;
  const std::chrono::milliseconds idle_;
  Freshness* const fresh_;
  std::vector<NodeInfo> members_;  // the last list told (the watch thread's after Start)
  std::atomic<bool> current_{true};
  std::atomic<uint64_t> changes_{0};
  std::atomic<uint64_t> bad_records_{0};
  std::atomic<int64_t> refreshed_for_{0};          // the last list Refresh read again for
  std::map<std::string, std::string> logged_bad_;  // key -> the bad value last logged
  std::set<std::string> keys_;  // every key under the prefix, node or not (the watch thread's)
  Mutex applied_mu_;
  int64_t applied_revision_ GUARDED_BY(applied_mu_) = 0;
  int64_t applied_keys_ GUARDED_BY(applied_mu_) = 0;
  EtcdClient::WatchCancel cancel_;
  std::atomic<bool> stop_{false};
  Mutex wait_mu_;  // guards no field: Pause waits on it (stop_ is atomic)
  CondVar wait_cv_;
  std::thread thread_, confirm_;
};

}  // namespace ecstore::cluster
