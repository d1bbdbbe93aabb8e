#include "store/eviction_policy.h"

#include <algorithm>

namespace ecstore {

double RecomputeCost(const TensorMeta& meta) {
  if (meta.recompute_cost > 0) return meta.recompute_cost;
  const double rows =
      meta.shape.empty() ? 0 : static_cast<double>(std::max<int64_t>(0, meta.shape[0]));
  return 4.9 + 0.0352 * rows;  // (400 rows, 19 ms) and (2304 rows, 86 ms)
}

void LruPolicy::Link(Node* n) {
  n->second = {nullptr, newest_};
  if (newest_) newest_->second.newer = n;
  newest_ = n;
  if (!oldest_) oldest_ = n;
}

void LruPolicy::Unlink(Node* n) {
  Links& l = n->second;
  (l.newer ? l.newer->second.older : newest_) = l.older;
  (l.older ? l.older->second.newer : oldest_) = l.newer;
}

void LruPolicy::Insert(uint64_t id, uint64_t, double) {
  auto [it, added] = nodes_.try_emplace(id);
  if (!added) Unlink(&*it);
  Link(&*it);
}

void LruPolicy::Touch(uint64_t id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  Unlink(&*it);
  Link(&*it);
}

void LruPolicy::Remove(uint64_t id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  Unlink(&*it);
  nodes_.erase(it);
}

std::vector<uint64_t> LruPolicy::Coldest(size_t max) const {
  std::vector<uint64_t> out;
  for (const Node* n = oldest_; n && out.size() < max; n = n->second.newer) out.push_back(n->first);
  return out;
}

void GdsfPolicy::Rank(uint64_t id, Item& it) {
  it.priority = clock_ + it.hits * it.value;
  it.seq = seq_++;
  order_.emplace(it.priority, it.seq, id);
}

void GdsfPolicy::Insert(uint64_t id, uint64_t bytes, double recompute_cost) {
  Remove(id);
  Item it{0, 0, recompute_cost / (std::max<double>(static_cast<double>(bytes), 1.0) / (1 << 20)),
          1};
  Rank(id, items_.emplace(id, it).first->second);
}

void GdsfPolicy::Touch(uint64_t id) {
  auto f = items_.find(id);
  if (f == items_.end()) return;
  Item& it = f->second;
  order_.erase({it.priority, it.seq, id});
  ++it.hits;
  Rank(id, it);
}

void GdsfPolicy::Remove(uint64_t id) {
  auto f = items_.find(id);
  if (f == items_.end()) return;
  const Item& it = f->second;
  auto pos = order_.find({it.priority, it.seq, id});
  // The clock rises to the priority of what leaves from the cold end (an eviction), so
  // entries inserted or hit later outrank ones that stopped being used.
  if (pos == order_.begin()) clock_ = std::max(clock_, it.priority);
  order_.erase(pos);
  items_.erase(f);
}

std::vector<uint64_t> GdsfPolicy::Coldest(size_t max) const {
  std::vector<uint64_t> out;
  for (auto it = order_.begin(); it != order_.end() && out.size() < max; ++it)
    out.push_back(std::get<2>(*it));
  return out;
}

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(const std::string& name) {
  if (name == "lru" || name.empty()) return std::make_unique<LruPolicy>();
  if (name == "gdsf") return std::make_unique<GdsfPolicy>();
  return nullptr;
}

}  // namespace ecstore
