// MemberWatch: a cluster's members as etcd has them, followed on a thread of its own. It reads
// the members once at Start, then watches their prefix and tells `on_change` each new list
// (a join, a leave, a new incarnation). While etcd is unreachable it keeps the last list,
// current() turns false and it reads the members again until etcd answers.
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
#include <memory>
#include <mutex>
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

 private:
  MemberWatch(EtcdClient etcd, std::string cluster, OnChange on_change,
              std::chrono::milliseconds idle)
      : etcd_(std::move(etcd)),
        cluster_(std::move(cluster)),
        on_change_(std::move(on_change)),
        idle_(idle) {}
  void Run(int64_t revision);  // the thread: from the revision the members were read at
  // Reads the members again: true once etcd answered (the list told), false after a pause.
  bool Relist(int64_t* revision);
  void Tell(std::vector<NodeInfo> members);

  EtcdClient etcd_;
  const std::string cluster_;
  const OnChange on_change_;
  const std::chrono::milliseconds idle_;
  std::vector<NodeInfo> members_;  // the last list told (the watch thread's after Start)
  std::atomic<bool> current_{true};
  std::atomic<uint64_t> changes_{0};
  EtcdClient::WatchCancel cancel_;
  std::atomic<bool> stop_{false};
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  std::thread thread_;
};

}  // namespace ecstore::cluster
