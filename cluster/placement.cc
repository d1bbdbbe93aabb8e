#include "cluster/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <utility>

#include "cluster/slot_table.h"

namespace ecstore::cluster {

Ring::Ring(std::vector<Member> members, int slot_bits, const Ring* previous)
    : members_(std::move(members)), slot_bits_(slot_bits) {
  scored_.reserve(members_.size());
  for (const Member& m : members_)
    scored_.push_back({m.id, XXH3_64bits(m.id.data(), m.id.size()), m.weight});
  if (slot_bits_ <= 0 || slot_bits_ > SlotTable::kMaxBits) {
    slot_bits_ = 0;
    return;
  }
  if (members_.empty() || members_.size() > SlotTable::kMaxMembers) return;  // ranked directly
  const SlotTable* before =
      previous && previous->slot_bits_ == slot_bits_ ? previous->table_.get() : nullptr;
  table_ = std::make_shared<SlotTable>(slot_bits_, scored_, before);
}

bool Ring::table_ready() const { return table_ && table_->ready(); }

void Ring::WaitForTable() const {
  if (table_) table_->Wait();
}

std::vector<size_t> Ring::Choices(std::string_view ns, std::string_view key, size_t n) const {
  // The key hashed once, seeded by its namespace's hash.
  const uint64_t h =
      XXH3_64bits_withSeed(key.data(), key.size(), XXH3_64bits(ns.data(), ns.size()));
  if (slot_bits_ == 0) return Rank(h, n);
  const auto slot = static_cast<uint32_t>(h >> (64 - slot_bits_));
  std::vector<size_t> out;
  if (table_ && table_->Lookup(slot, n, &out)) return out;
  return Rank(slot, n);
}

std::vector<size_t> Ring::Rank(uint64_t point, size_t n) const {
  std::vector<std::pair<double, size_t>> scored;
  scored.reserve(members_.size());
  for (size_t i = 0; i < members_.size(); ++i)
    scored.emplace_back(RendezvousScore(point, scored_[i]), i);
  n = std::min(n, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(n), scored.end(),
                    [&](const auto& a, const auto& b) {
                      return RanksBefore(a.first, scored_[a.second], b.first, scored_[b.second]);
                    });
  std::vector<size_t> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(scored[i].second);
  return out;
}
std::vector<size_t> CopyOrder(const Ring& ring, const std::vector<std::string>& hosts,
                              std::string_view ns, std::string_view key, size_t n) {
  const size_t all = ring.members().size();
  n = std::min(n, all);
  // The first n choices are on n hosts nearly always; look further only when they are not.
  for (size_t k = n;; k = std::min(all, 2 * k)) {
    std::vector<size_t> distinct, repeated;
    for (size_t i : ring.Choices(ns, key, k)) {
      const bool seen = std::any_of(distinct.begin(), distinct.end(),
                                    [&](size_t d) { return hosts[d] == hosts[i]; });
      (seen ? repeated : distinct).push_back(i);
    }
    if (distinct.size() >= n || k == all) {
      distinct.insert(distinct.end(), repeated.begin(), repeated.end());
      distinct.resize(n);
      return distinct;
    }
  }
}

}  // namespace ecstore::cluster
