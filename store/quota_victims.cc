#include "store/quota_victims.h"

#include <algorithm>
#include <utility>

#include "store/eviction_policy.h"

namespace ecstore {

double QuotaVictims::Coldness(uint64_t now_us, uint64_t last_access_us, uint64_t hits,
                              uint64_t bytes, const TensorMeta& meta) const {
  if (!value_aware_) return static_cast<double>(last_access_us);
  const double mib = std::max<double>(static_cast<double>(bytes), 1.0) / (1 << 20);
  const double age_s = static_cast<double>(now_us - std::min(now_us, last_access_us)) / 1e6 + 1;
  return static_cast<double>(std::max<uint64_t>(hits, 1)) * RecomputeCost(meta) / mib / age_s;
}

std::vector<KeydirSlot> QuotaVictims::Coldest(const KeydirTable& table, uint64_t now_us,
                                              size_t max) {
  constexpr size_t kRankAllBelow = 4096, kSamplesPerVictim = 16;
  std::vector<std::pair<double, const KeydirSlot*>> ranked;
  auto consider = [&](const KeydirSlot& s) {
    if (const ColdRow* r = s.row()) {  // a row is never held
      ranked.emplace_back(Coldness(now_us, r->last_access_us, r->hits, r->bytes, r->meta()), &s);
      return;
    }
    const Entry& e = *s.entry();
    if (e.disk && !e.erased && e.leases == 0 && !e.loading && !e.spilling)
      ranked.emplace_back(Coldness(now_us, e.last_access_us, e.hits, e.bytes, e.meta), &s);
  };
  if (table.size() <= kRankAllBelow) {
    for (const KeydirSlot& s : table.slots()) consider(s);
  } else {
    for (size_t i = 0; i < max * kSamplesPerVictim; ++i) {
      sample_state_ = sample_state_ * 6364136223846793005ull + 1442695040888963407ull;
      consider(table.Sample(sample_state_ >> 20));
    }
    std::sort(ranked.begin(), ranked.end());
    ranked.erase(std::unique(ranked.begin(), ranked.end()), ranked.end());  // drawn twice
  }
  const size_t n = std::min(max, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<ptrdiff_t>(n), ranked.end());
  std::vector<KeydirSlot> out;
  for (size_t i = 0; i < n; ++i) out.push_back(*ranked[i].second);
  return out;
}

}  // namespace ecstore
