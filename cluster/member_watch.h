// MemberWatch: a cluster's members as etcd has them, followed on a thread of its own. It reads
// the members once at Start, then watches their prefix and tells `on_change` each new list
// (a join, a leave, a new incarnation). While etcd is unreachable it keeps the last list,
// current() turns false and it reads the members again until etcd answers. A record that is
// not a node's is skipped and counted; nothing a record holds can stop the thread.
//
//   auto w = MemberWatch::Start(etcd, "prod", [&](std::vector<NodeInfo> m) { ... }, 30s);
//   w.value()->current();   // whether the last list told is etcd's now
//
// Thread rules: on_change is called on the calling thread during Start, then on the watch
// thread only; Start and the destructor (which stops the thread) from the owner's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "cluster/etcd.h"
#include "cluster/membership.h"

namespace ecstore::cluster {

class MemberWatch {
 public:
  using OnChange = std::function<void(std::vector<NodeInfo>)>;
  // Unavailable where etcd cannot be read now.
  static Result<std::unique_ptr<MemberWatch>> Start(EtcdClient etcd, std::string cluster,
                                                    OnChange on_change,
                                                    std::chrono::milliseconds idle);
  ~MemberWatch();
  bool current() const { return current_.load(); }
  uint64_t changes() const { return changes_.load(); }  // lists told after the first
  // Records under the members' prefix that were not a node's (malformed, mistyped, out of
  // range, or an id other than their key's): skipped, each logged once, counted here.
  uint64_t bad_records() const { return bad_records_.load(); }

 private:
  MemberWatch(EtcdClient etcd, std::string cluster, OnChange on_change,
              std::chrono::milliseconds idle)
      : etcd_(std::move(etcd)),
        cluster_(std::move(cluster)),
        on_change_(std::move(on_change)),
        idle_(idle) {}
  void Run(int64_t revision);  // the thread: from the revision the members were read at
  // Watches until stopped, reading the members first where *listed is false; may throw.
  void Follow(int64_t* revision, bool* listed);
  // Reads the members again: true once etcd answered (the list told), false after a pause.
  bool Relist(int64_t* revision);
  void Tell(std::vector<NodeInfo> members);
  // The node in a record, or nothing (counted; logged when the key or its value is new).
  std::optional<NodeInfo> Read(const std::string& key, const std::string& value);
  std::vector<NodeInfo> Parse(const EtcdClient::Range& range);

  EtcdClient etcd_;
  const std::string cluster_;
  const OnChange on_change_;
  const std::chrono::milliseconds idle_;
  std::vector<NodeInfo> members_;  // the last list told (the watch thread's after Start)
  std::atomic<bool> current_{true};
  std::atomic<uint64_t> changes_{0};
  std::atomic<uint64_t> bad_records_{0};
  std::map<std::string, std::string> logged_bad_;  // key -> the bad value last logged
  EtcdClient::WatchCancel cancel_;
  std::atomic<bool> stop_{false};
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  std::thread thread_;
};

}  // namespace ecstore::cluster
