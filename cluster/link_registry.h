// LinkRegistry: this process's links to cluster nodes (cluster/node_link.h), shared by every
// ClusterCache that reaches a node with the same client options -- so an engine's threads
// and handles hold one connection per node between them, and a node serving 10,000 engines
// holds 10,000 connections, not one per thread or handle. A link lives while a view holds
// it (or a lease read through it); a thread of the registry's closes connections idle past
// their link's idle_close, which the next call makes again.
//
//   auto link = LinkRegistry::Process().Share(info, "prod", client_options, 1s, 60s);
//   link->Call([&](Cache& c) { return c.Lookup(ns, key); });
//
// Thread rules: thread-safe; Process() lives until the process ends.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "base/mutex.h"
#include "cluster/membership.h"
#include "cluster/node_link.h"
#include "net/connection.h"

namespace ecstore::cluster {

class LinkRegistry {
 public:
  static LinkRegistry& Process();
  // The live link to the node `info` (its id, address and incarnation) made with these
  // options, or a new one.
  std::shared_ptr<NodeLink> Share(const NodeInfo& info, const std::string& cluster,
                                  const net::ClientOptions& options,
                                  std::chrono::milliseconds down_for,
                                  std::chrono::milliseconds idle_close);
  size_t links();  // live links (tests)
  // Closes every connection idle past its link's idle_close now (the thread does so each
  // second); how many it closed.
  size_t CloseIdle();

 private:
  LinkRegistry();
  void Reap();  // the thread

  Mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<NodeLink>> links_ GUARDED_BY(mu_);
  std::thread reaper_;  // never joined: the registry lives as long as the process
};

}  // namespace ecstore::cluster
