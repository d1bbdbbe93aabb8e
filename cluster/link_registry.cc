#include "cluster/link_registry.h"

#include <vector>

#include "base/mutex.h"

namespace ecstore::cluster {

namespace {

// Everything a connection is made with: links made with different options are not shared.
std::string KeyOf(const NodeInfo& n, const std::string& cluster, const net::ClientOptions& o,
                  std::chrono::milliseconds down_for, std::chrono::milliseconds idle_close) {
  std::string k;
  auto add = [&k](const std::string& s) {
    k += std::to_string(s.size());
    k += ':';
    k += s;
  };
  for (const std::string* s : {&cluster, &n.id, &n.tcp, &n.unix_path, &n.host, &n.rdma, &o.token})
    add(*s);
  for (long long v :
       {static_cast<long long>(n.incarnation), static_cast<long long>(o.timeout.count()),
        static_cast<long long>(o.connect_timeout.count()), static_cast<long long>(o.retries),
        static_cast<long long>(o.transport), static_cast<long long>(o.rdma_bounce_bytes),
        static_cast<long long>(o.put_arena), static_cast<long long>(down_for.count()),
        static_cast<long long>(idle_close.count())})
    add(std::to_string(v));
  if (o.tls)
    for (const std::string* s : {&o.tls->cert, &o.tls->key, &o.tls->ca, &o.tls->server_name})
      add(*s);
  return k;
}

}  // namespace

LinkRegistry& LinkRegistry::Process() {
  static LinkRegistry* r = new LinkRegistry();  // never destroyed: its thread may be running
  return *r;
}

LinkRegistry::LinkRegistry() {
  reaper_ = std::thread([this] { Reap(); });
  reaper_.detach();
}

std::shared_ptr<NodeLink> LinkRegistry::Share(const NodeInfo& info, const std::string& cluster,
                                              const net::ClientOptions& options,
                                              std::chrono::milliseconds down_for,
                                              std::chrono::milliseconds idle_close) {
  const std::string key = KeyOf(info, cluster, options, down_for, idle_close);
  MutexLock l(&mu_);
  auto& weak = links_[key];
  if (auto live = weak.lock()) return live;
  auto made = std::make_shared<NodeLink>(info, cluster, options, down_for, Connector{}, idle_close);
  weak = made;
  return made;
}

size_t LinkRegistry::links() {
  MutexLock l(&mu_);
  size_t n = 0;
  for (const auto& [key, weak] : links_) n += weak.expired() ? 0 : 1;
  return n;
}

size_t LinkRegistry::CloseIdle() {
  std::vector<std::shared_ptr<NodeLink>> live;
  {
    MutexLock l(&mu_);
    for (auto it = links_.begin(); it != links_.end();) {
      if (auto n = it->second.lock()) {
        live.push_back(std::move(n));
        ++it;
      } else {
        it = links_.erase(it);
      }
    }
  }
  size_t closed = 0;
  for (const auto& n : live) closed += n->CloseIfIdle() ? 1 : 0;  // outside mu_: it may wait
  return closed;
}

void LinkRegistry::Reap() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    CloseIdle();
  }
}

}  // namespace ecstore::cluster
