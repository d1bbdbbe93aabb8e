// Eviction policies rank entries (by id) from coldest to hottest: LRU (the default), and GDSF
// (GreedyDual-Size-Frequency: priority = clock + hits x recompute cost / size, so an entry
// that is cheap to recompute per byte and rarely reused goes first; the clock ages entries
// that stop being hit). `ec-store-bench --workloads policy` replays traces through both.
// Thread rules: not synchronized; the owning tier calls it under the keydir's mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/tensor_meta.h"

namespace ecstore {

// What recomputing an entry costs, in encoder milliseconds: the entry's own hint, else an
// estimate that grows with its rows (tokens). Fitted to a Qwen2.5-VL-7B-shaped vision tower
// on an H100: ~19 ms for a 560x560 image (400 rows), ~86 ms for 1344x1344 (2304 rows).
double RecomputeCost(const TensorMeta& meta);

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual const char* Name() const = 0;
  // Whether Insert's recompute_cost matters (callers skip computing it otherwise: reading an
  // entry's shape is a cache miss, 7% of a 1M-entry open).
  virtual bool UsesCost() const { return true; }
  virtual void Insert(uint64_t id, uint64_t bytes, double recompute_cost) = 0;
  virtual void Touch(uint64_t id) = 0;
  virtual void Remove(uint64_t id) = 0;
  // Up to `max` ids, coldest first. The caller skips ids it cannot evict (leased).
  virtual std::vector<uint64_t> Coldest(size_t max) const = 0;
  virtual size_t size() const = 0;
  virtual void Reserve(size_t /*n*/) {}
};

// One hash node per entry, linked newest to oldest through the nodes themselves (their
// addresses are stable): 56 B and one allocation an entry, against 72 B and two for a
// std::list beside a map of iterators -- it tracks every disk entry of a store.
class LruPolicy : public EvictionPolicy {
 public:
  LruPolicy() = default;
  LruPolicy(const LruPolicy&) = delete;  // the links point into this object's nodes
  LruPolicy& operator=(const LruPolicy&) = delete;
  const char* Name() const override { return "lru"; }
  bool UsesCost() const override { return false; }
  void Insert(uint64_t id, uint64_t bytes, double recompute_cost) override;
  void Touch(uint64_t id) override;
  void Remove(uint64_t id) override;
  std::vector<uint64_t> Coldest(size_t max) const override;
  size_t size() const override { return nodes_.size(); }
  void Reserve(size_t n) override { nodes_.reserve(n); }

 private:
  struct Links;
  using Node = std::pair<const uint64_t, Links>;
  struct Links {
    Node* newer = nullptr;
    Node* older = nullptr;
  };
  void Link(Node* n);  // as the newest
  void Unlink(Node* n);
  std::unordered_map<uint64_t, Links> nodes_;
  Node* newest_ = nullptr;
  Node* oldest_ = nullptr;
};

class GdsfPolicy : public EvictionPolicy {
 public:
  const char* Name() const override { return "gdsf"; }
  void Insert(uint64_t id, uint64_t bytes, double recompute_cost) override;
  void Touch(uint64_t id) override;
  void Remove(uint64_t id) override;
  std::vector<uint64_t> Coldest(size_t max) const override;
  size_t size() const override { return items_.size(); }
  void Reserve(size_t n) override { items_.reserve(n); }

 private:
  struct Item {
    double priority;
    uint64_t seq;  // ties: the older first
    double value;  // recompute cost per MiB
    uint32_t hits;
  };
  void Rank(uint64_t id, Item& it);
  double clock_ = 0;  // the priority of the last entry to leave from the cold end
  uint64_t seq_ = 0;
  std::unordered_map<uint64_t, Item> items_;
  std::set<std::tuple<double, uint64_t, uint64_t>> order_;  // (priority, seq, id), coldest first
};

// "lru" (also ""), "gdsf"; nullptr for another name.
std::unique_ptr<EvictionPolicy> NewEvictionPolicy(const std::string& name);

}  // namespace ecstore
