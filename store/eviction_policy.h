// Eviction policies rank entries (by id) from coldest to hottest. LRU is the default; a
// value-aware policy (hits x recompute cost / size) plugs in behind the same interface.
// Thread rules: not synchronized; the Store calls it under its metadata mutex.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace ecstore {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual const char* Name() const = 0;
  virtual void Insert(uint64_t id, uint64_t bytes, double recompute_cost) = 0;
  virtual void Touch(uint64_t id) = 0;
  virtual void Remove(uint64_t id) = 0;
  // Up to `max` ids, coldest first. The caller skips ids it cannot evict (leased).
  virtual std::vector<uint64_t> Coldest(size_t max) const = 0;
  virtual size_t size() const = 0;
  virtual void Reserve(size_t /*n*/) {}
};

class LruPolicy : public EvictionPolicy {
 public:
  const char* Name() const override { return "lru"; }
  void Insert(uint64_t id, uint64_t bytes, double recompute_cost) override;
  void Touch(uint64_t id) override;
  void Remove(uint64_t id) override;
  std::vector<uint64_t> Coldest(size_t max) const override;
  size_t size() const override { return pos_.size(); }
  void Reserve(size_t n) override { pos_.reserve(n); }

 private:
  std::list<uint64_t> order_;  // front = most recent
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> pos_;
};

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(const std::string& name);  // "lru"

}  // namespace ecstore
