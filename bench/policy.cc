#include "bench/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

#include "store/eviction_policy.h"

namespace ecstore::bench {
namespace {

struct Item {
  uint64_t bytes;
  double cost_ms;
};

struct Trace {
  std::vector<Item> items;
  std::vector<uint32_t> requests;
  uint64_t working_set = 0;  // bytes of the distinct items requested
  int drift_every = 0;
  std::vector<std::vector<double>> popularity;  // per drift epoch: each item's probability
};

Trace MakeTrace(const TraceParams& p) {
  // The design's mix: (rows, width) with weights.
  const struct {
    int rows, width;
    double weight;
  } shapes[] = {{400, 3584, 0.4}, {324, 16384, 0.3}, {2304, 3584, 0.2}, {1764, 16384, 0.1}};
  std::mt19937_64 rng(p.seed);
  std::uniform_real_distribution<double> u(0, 1);
  Trace t;
  for (int i = 0; i < p.items; ++i) {
    double x = u(rng), acc = 0;
    int s = 3;
    for (int k = 0; k < 4; ++k)
      if ((acc += shapes[k].weight) >= x) {
        s = k;
        break;
      }
    TensorMeta m{DType::kBF16, {shapes[s].rows, shapes[s].width}};
    t.items.push_back(
        {static_cast<uint64_t>(shapes[s].rows) * shapes[s].width * 2, RecomputeCost(m)});
  }
  // Zipf over ranks, by inverse CDF.
  std::vector<double> cdf(p.items);
  double sum = 0;
  for (int r = 0; r < p.items; ++r) cdf[r] = (sum += 1.0 / std::pow(r + 1, p.zipf_s));
  for (double& c : cdf) c /= sum;
  std::vector<uint32_t> item_of_rank(p.items);
  for (int r = 0; r < p.items; ++r) item_of_rank[r] = r;
  std::shuffle(item_of_rank.begin(), item_of_rank.end(), rng);
  std::vector<bool> seen(p.items);
  t.drift_every = p.drift_every;
  for (int q = 0; q < p.requests; ++q) {
    if (q % p.drift_every == 0) {
      if (q > 0)  // popularity drifts: new items rise to the top
        std::rotate(item_of_rank.begin(), item_of_rank.end() - p.drift_step, item_of_rank.end());
      std::vector<double>& pop = t.popularity.emplace_back(p.items);
      for (int r = 0; r < p.items; ++r) pop[item_of_rank[r]] = cdf[r] - (r ? cdf[r - 1] : 0);
    }
    const int rank =
        static_cast<int>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
    const uint32_t id = item_of_rank[std::min(rank, p.items - 1)];
    t.requests.push_back(id);
    if (!seen[id]) t.working_set += t.items[id].bytes, seen[id] = true;
  }
  return t;
}

// What a replay counts: every request, and the hits among them.
struct Tally {
  uint64_t requests = 0, hits = 0, hit_bytes = 0, bytes = 0;
  double saved = 0, total = 0;
  void Request(const Item& it) { ++requests, bytes += it.bytes, total += it.cost_ms; }
  void Hit(const Item& it) { ++hits, hit_bytes += it.bytes, saved += it.cost_ms; }
  PolicyRow Row(double fraction, const std::string& name) const {
    return {fraction,
            name,
            static_cast<double>(hits) / static_cast<double>(requests),
            static_cast<double>(hit_bytes) / static_cast<double>(bytes),
            saved / 1000,
            total / 1000};
  }
};

// A cache of `capacity` bytes in front of recomputation, driven by an EvictionPolicy.
PolicyRow Replay(const Trace& t, double fraction, const std::string& name) {
  auto policy = NewEvictionPolicy(name);
  const uint64_t capacity = static_cast<uint64_t>(fraction * static_cast<double>(t.working_set));
  std::vector<bool> in(t.items.size());
  uint64_t used = 0;
  Tally tally;
  for (uint32_t id : t.requests) {
    const Item& it = t.items[id];
    tally.Request(it);
    if (in[id]) {
      tally.Hit(it);
      policy->Touch(id);
      continue;
    }
    policy->Requested(id);  // a miss: counted by the policies that count requests per key
    if (it.bytes > capacity) continue;
    while (used + it.bytes > capacity) {
      uint64_t victim = policy->Coldest(1).at(0);
      policy->Remove(victim);
      in[victim] = false;
      used -= t.items[victim].bytes;
    }
    policy->Insert(id, it.bytes, it.cost_ms);
    in[id] = true;
    used += it.bytes;
  }
  return tally.Row(fraction, name);
}

// A bound for policies that estimate popularity from counts: keeps the items of highest true
// probability (what the trace draws each with, which no online policy knows) x recompute cost
// per MiB; on a miss it evicts the lowest until the newcomer fits. With `lag`, the probability
// is the mean over the last `lag` requests (a blend of the last two epochs', re-ranked every
// lag/10 requests): what an estimator free of counting noise but averaging over that window
// would know.
PolicyRow TruePopularity(const Trace& t, double fraction, size_t lag, const std::string& name) {
  const uint64_t capacity = static_cast<uint64_t>(fraction * static_cast<double>(t.working_set));
  const size_t epoch_len = static_cast<size_t>(t.drift_every);
  const size_t rerank = std::max<size_t>(1, lag / 10);
  auto value = [&](uint32_t id, size_t q) {
    const size_t e = q / epoch_len, into = q % epoch_len;
    double p = t.popularity[e][id];
    if (e > 0 && into < lag) {  // still partly the last epoch's
      const double old = static_cast<double>(lag - into) / static_cast<double>(lag);
      p = old * t.popularity[e - 1][id] + (1 - old) * p;
    }
    return p * t.items[id].cost_ms / (static_cast<double>(t.items[id].bytes) / (1 << 20));
  };
  std::set<std::pair<double, uint32_t>> order;  // (value, item), lowest first
  std::vector<double> key(t.items.size());
  std::vector<bool> in(t.items.size());
  uint64_t used = 0;
  Tally tally;
  for (size_t q = 0; q < t.requests.size(); ++q) {
    const uint32_t id = t.requests[q];
    const Item& it = t.items[id];
    const size_t into = q % epoch_len;
    if (into == 0 || (into <= lag && into % rerank == 0)) {  // the values moved: rank again
      std::set<std::pair<double, uint32_t>> again;
      for (const auto& [_, c] : order) again.emplace(key[c] = value(c, q), c);
      order.swap(again);
    }
    tally.Request(it);
    if (in[id]) {
      tally.Hit(it);
      order.erase({key[id], id});
    } else {
      if (it.bytes > capacity) continue;
      for (; used + it.bytes > capacity; order.erase(order.begin())) {
        in[order.begin()->second] = false;
        used -= t.items[order.begin()->second].bytes;
      }
      in[id] = true;
      used += it.bytes;
    }
    order.emplace(key[id] = value(id, q), id);
  }
  return tally.Row(fraction, name);
}

// Belady (for scale): on a miss, evict the cached items whose next use is furthest away.
PolicyRow Belady(const Trace& t, double fraction) {
  const uint64_t capacity = static_cast<uint64_t>(fraction * static_cast<double>(t.working_set));
  const size_t n = t.requests.size();
  std::vector<size_t> next(n);
  std::vector<size_t> last(t.items.size(), std::numeric_limits<size_t>::max());
  for (size_t q = n; q-- > 0;) {
    next[q] = last[t.requests[q]];
    last[t.requests[q]] = q;
  }
  std::set<std::pair<size_t, uint32_t>> by_next;  // (next use, item), furthest last
  std::vector<size_t> key(t.items.size());
  std::vector<bool> in(t.items.size());
  uint64_t used = 0;
  Tally tally;
  for (size_t q = 0; q < n; ++q) {
    const uint32_t id = t.requests[q];
    const Item& it = t.items[id];
    tally.Request(it);
    if (in[id]) {
      tally.Hit(it);
      by_next.erase({key[id], id});
    } else {
      if (it.bytes > capacity || next[q] == std::numeric_limits<size_t>::max()) continue;
      while (used + it.bytes > capacity) {
        auto far = std::prev(by_next.end());
        if (far->first < next[q]) break;  // everything cached is needed sooner: do not admit
        in[far->second] = false;
        used -= t.items[far->second].bytes;
        by_next.erase(far);
      }
      if (used + it.bytes > capacity) continue;
      in[id] = true;
      used += it.bytes;
    }
    key[id] = next[q];
    by_next.insert({next[q], id});
  }
  return tally.Row(fraction, "belady");
}

}  // namespace

std::vector<PolicyRow> RunPolicyBench(const TraceParams& p, const std::vector<double>& capacities) {
  Trace t = MakeTrace(p);
  std::vector<PolicyRow> rows;
  for (double c : capacities) {
    rows.push_back(Replay(t, c, "lru"));
    rows.push_back(Replay(t, c, "gdsf"));
    rows.push_back(Replay(t, c, "freq"));
    rows.push_back(TruePopularity(t, c, 0, "true-popularity"));
    rows.push_back(TruePopularity(t, c, 5000, "popularity-5k"));
    rows.push_back(Belady(t, c));
  }
  return rows;
}

}  // namespace ecstore::bench
