// FakeNode: one node of a simulated fleet -- what it holds (keys and their notional bytes,
// no payload), evicted least recently used past its capacity, the claims made on it (on the
// simulation's clock), and whether it answers. The real ClusterCache reaches it as a Cache
// through its Connector, so a simulation runs the real routing, fallback and claims.
//
//   std::atomic<uint64_t> now_us{0};
//   FakeNode node("node-0001", 64ull << 30, &now_us);
//   options.connector = [&](const cluster::NodeInfo&) { return node.Connect(); };
//   node.SetDown(true);  // SIGKILL-like: every call is Unavailable until SetDown(false)
//
// Thread rules: thread-safe (one mutex per node); the clock is read, never written.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "cache/cache.h"

namespace ecstore::sim {

class FakeNode {
 public:
  FakeNode(std::string id, uint64_t capacity, const std::atomic<uint64_t>* clock_us);
  const std::string& id() const { return id_; }

  // A connection to the node: a Cache (with claims) whose calls are Unavailable while the
  // node is down.
  std::unique_ptr<Cache> Connect();
  void SetDown(bool down) { down_.store(down); }
  bool down() const { return down_.load(); }
  // The node's directory emptied: a start that drops what it held.
  void Clear();

  uint64_t bytes() const;
  size_t entries() const;
  uint64_t puts() const { return puts_.load(); }
  // The keys held ("ns\0key") and their notional bytes.
  std::vector<std::pair<std::string, uint64_t>> Held() const;

 private:
  class Face;
  struct Entry {
    uint64_t bytes = 0;
    std::list<std::string>::iterator lru;
  };
  static std::string Name(std::string_view ns, std::string_view key);
  bool Put(const std::string& name, uint64_t bytes);
  bool Touch(const std::string& name, uint64_t* bytes);  // a read: most recently used
  bool Has(const std::string& name, uint64_t* bytes) const;
  bool Erase(const std::string& name);
  ClaimAnswer Claim(const std::string& name, std::chrono::milliseconds ttl);
  std::vector<EntryInfo> List() const;

  const std::string id_;
  const uint64_t capacity_;
  const std::atomic<uint64_t>* const clock_us_;
  std::atomic<bool> down_{false};
  std::atomic<uint64_t> puts_{0};
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> held_ GUARDED_BY(mu_);
  std::list<std::string> lru_ GUARDED_BY(mu_);                        // most recent first
  std::unordered_map<std::string, uint64_t> claims_ GUARDED_BY(mu_);  // name -> lapses at (us)
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace ecstore::sim
