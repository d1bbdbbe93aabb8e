// Eviction policies rank entries (by id) from coldest to hottest: LRU (the default), GDSF
// (GreedyDual-Size-Frequency: priority = clock + hits x cost / size, so an entry that is
// cheap to get back per byte and rarely reused goes first; the clock ages entries that stop
// being hit), and Freq (recent requests per key x cost / size, the requests counted whether
// or not the entry is held). The cost is what a miss of the entry costs where the policy is
// used: a memory pool passes RefetchCost (a read back from disk), the policy bench
// RecomputeCost. `ec-store-bench --workloads policy` replays traces through all three.
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
#include "store/frequency_sketch.h"

namespace ecstore {

// What recomputing an entry costs, in encoder milliseconds: the entry's own hint, else an
// estimate that grows with its rows (tokens). Fitted to a Qwen2.5-VL-7B-shaped vision tower
// on a datacenter GPU: ~19 ms for a 560x560 image (400 rows), ~86 ms for 1344x1344 (2304).
double RecomputeCost(const TensorMeta& meta);
// What an entry evicted from a memory pool costs when it is next requested, in milliseconds:
// a read of its bytes back from the disk tier, which holds a copy of every pool entry
// (write-back spills each one; eviction spills any not yet spilled). A fixed cost per read
// plus the bytes at the disk's rate (0.1 ms, 1.5 GB/s: a modest disk's raw O_DIRECT read); per
// byte nearly the same for every entry, so the pools rank by requests. Recomputation is
// what the disk quota's victims cost (RecomputeCost). Replayed on the mixed bench's steps at
// its pool budget, freq weighed this way reads 2.44 MB/op back from disk against 2.86 with
// recompute cost per MiB (LRU 2.89; a clairvoyant popularity ranking 1.94).
double RefetchCost(uint64_t bytes);

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual const char* Name() const = 0;
  // Whether Insert's recompute_cost matters (callers skip computing it otherwise: reading an
  // entry's shape is a cache miss, 7% of a 1M-entry open).
  virtual bool UsesCost() const { return true; }
  // key_hash names the entry's key across ids (an entry re-made after eviction gets a new
  // id); the 3-argument form uses the id.
  virtual void Insert(uint64_t id, uint64_t bytes, double recompute_cost, uint64_t key_hash) = 0;
  void Insert(uint64_t id, uint64_t bytes, double recompute_cost) {
    Insert(id, bytes, recompute_cost, id);
  }
  virtual void Touch(uint64_t id) = 0;  // a hit
  // A request for a key the tier does not hold (a miss, a read served from elsewhere): only
  // a policy that counts requests per key uses it.
  virtual void Requested(uint64_t /*key_hash*/) {}
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
  using EvictionPolicy::Insert;
  const char* Name() const override { return "lru"; }
  bool UsesCost() const override { return false; }
  void Insert(uint64_t id, uint64_t bytes, double recompute_cost, uint64_t key_hash) override;
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

// Where an entry stands in a PriorityPolicy's order.
struct PolicyPlace {
  double priority = 0;
  uint64_t seq = 0;  // ties: the older first
};

// What GDSF and Freq share: entries (Item, with a PolicyPlace `at`) in order of a priority,
// the lowest first.
template <typename Item>
class PriorityPolicy : public EvictionPolicy {
 public:
  std::vector<uint64_t> Coldest(size_t max) const override {
    std::vector<uint64_t> out;
    for (auto it = order_.begin(); it != order_.end() && out.size() < max; ++it)
      out.push_back(std::get<2>(*it));
    return out;
  }
  size_t size() const override { return items_.size(); }
  void Reserve(size_t n) override { items_.reserve(n); }

 protected:
  using Place = PolicyPlace;
  std::unordered_map<uint64_t, Item> items_;
  void Rank(uint64_t id, double priority, Place* at) {  // (re)placed as the newest of its rank
    *at = {priority, seq_++};
    order_.emplace(at->priority, at->seq, id);
  }
  void Unrank(uint64_t id, const Place& at) { order_.erase({at.priority, at.seq, id}); }
  bool IsColdest(uint64_t id, const Place& at) const {
    return !order_.empty() && *order_.begin() == std::make_tuple(at.priority, at.seq, id);
  }
  void ClearOrder() { order_.clear(); }

 private:
  uint64_t seq_ = 0;
  std::set<std::tuple<double, uint64_t, uint64_t>> order_;  // (priority, seq, id), coldest first
};

struct GdsfItem {
  PolicyPlace at;
  double value = 0;  // recompute cost per MiB
  uint32_t hits = 0;
};

class GdsfPolicy : public PriorityPolicy<GdsfItem> {
 public:
  using EvictionPolicy::Insert;
  const char* Name() const override { return "gdsf"; }
  void Insert(uint64_t id, uint64_t bytes, double recompute_cost, uint64_t key_hash) override;
  void Touch(uint64_t id) override;
  void Remove(uint64_t id) override;

 private:
  double clock_ = 0;  // the priority of the last entry to leave from the cold end
};

// Frequency x value: keeps the entries with the highest recent request rate x recompute cost
// per MiB (Requests x value). Requests are counted per key -- hits and misses, held or not
// (Requested) -- in two FrequencySketches: a short one (counts halve every 2 x entries-held
// requests) and a long one (16 x). A key's rate is the long window's (less noise) unless the short
// window's count is more than one standard deviation (Poisson) away from what that rate predicts
// for it: the key's popularity changed, and the short window's rate is used. No clock: unlike GDSF,
// an entry's standing is its own rate, not when it came in. Measured (policy bench, encoder time
// saved over LRU at 5/10/20/50 % of the working set): on the default trace (500 of 20 000 items
// rise to the top every 20 000 requests) 20/16/11/5 %, with the gentler drift of 100 items
// 26/20/14/7 %, without drift 32/24/17/7 %; one sketch halving every 4 x (the previous freq)
// 19/14/11/5, 24/18/13/6 and 30/22/15/6 %.
struct FreqItem {
  uint64_t key = 0;
  double value = 0;  // recompute cost per MiB
  PolicyPlace at;
};

class FreqPolicy : public PriorityPolicy<FreqItem> {
 public:
  using EvictionPolicy::Insert;
  const char* Name() const override { return "freq"; }
  void Insert(uint64_t id, uint64_t bytes, double recompute_cost, uint64_t key_hash) override;
  void Touch(uint64_t id) override;
  void Remove(uint64_t id) override;
  void Requested(uint64_t key_hash) override { Count(key_hash); }
  // The key's recent requests, on the long window's scale: the long window's count, or where
  // the key's popularity changed, the short window's scaled by the ratio of their masses.
  double Requests(uint64_t key_hash) const;

  // The sketches' halving periods, in requests per entry held; and how far (in standard
  // deviations) the short window's count may stray from the long window's rate before the
  // key counts as changed. Chosen over the policy bench's traces with drift of 0, 100 and 500
  // items: a short window of 2 x against a long one of 16-64 x, with tests at 1-1.5
  // deviations, came within 3 points of these at every capacity; a short window of 1 x or a
  // test at 0.5 deviations lost up to 6 points.
  static constexpr uint64_t kShortPeriod = 2, kLongPeriod = 16;
  static constexpr double kChangeDeviations = 1.0;

 private:
  void Count(uint64_t key_hash);  // one request; ranks everything again after a halving
  void Rank(uint64_t id, FreqItem& it);
  FrequencySketch short_, long_;
};

// "lru" (also ""), "gdsf", "freq"; nullptr for another name.
std::unique_ptr<EvictionPolicy> NewEvictionPolicy(const std::string& name);

}  // namespace ecstore
