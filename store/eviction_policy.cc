#include "store/eviction_policy.h"

namespace ecstore {

void LruPolicy::Insert(uint64_t id, uint64_t, double) {
  Remove(id);
  order_.push_front(id);
  pos_[id] = order_.begin();
}

void LruPolicy::Touch(uint64_t id) {
  auto it = pos_.find(id);
  if (it == pos_.end()) return;
  order_.splice(order_.begin(), order_, it->second);
}

void LruPolicy::Remove(uint64_t id) {
  auto it = pos_.find(id);
  if (it == pos_.end()) return;
  order_.erase(it->second);
  pos_.erase(it);
}

std::vector<uint64_t> LruPolicy::Coldest(size_t max) const {
  std::vector<uint64_t> out;
  for (auto it = order_.rbegin(); it != order_.rend() && out.size() < max; ++it) out.push_back(*it);
  return out;
}

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(const std::string& name) {
  if (name == "lru" || name.empty()) return std::make_unique<LruPolicy>();
  return nullptr;
}

}  // namespace ecstore
