#include "cluster/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace ecstore::cluster {

Ring::Ring(std::vector<Member> members) : members_(std::move(members)) {
  seeds_.reserve(members_.size());
  for (const Member& m : members_) seeds_.push_back(XXH3_64bits(m.id.data(), m.id.size()));
}

std::vector<size_t> Ring::Choices(std::string_view ns, std::string_view key, size_t n) const {
  // The key hashed once, seeded by its namespace's hash; each node's score mixes that with
  // the node's seed. Weighted: -w / ln(u) with u uniform in (0, 1), whose maximum picks each
  // node with probability w / sum(w) (Schindelhauer and Schomaker's weighted HRW).
  const uint64_t h =
      XXH3_64bits_withSeed(key.data(), key.size(), XXH3_64bits(ns.data(), ns.size()));
  std::vector<std::pair<double, size_t>> scored;
  scored.reserve(members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    const uint64_t mixed = XXH3_64bits_withSeed(&h, sizeof(h), seeds_[i]);
    const double u = (static_cast<double>(mixed >> 11) + 0.5) / 9007199254740992.0;  // (0,1)
    scored.emplace_back(-members_[i].weight / std::log(u), i);
  }
  n = std::min(n, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(n), scored.end(),
                    [&](const auto& a, const auto& b) {
                      // Ties (never in practice) go by id, so every client orders alike.
                      return a.first != b.first ? a.first > b.first
                                                : members_[a.second].id < members_[b.second].id;
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
