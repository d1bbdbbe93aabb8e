#include "server/server_metrics.h"

#include <algorithm>

namespace ecstore::net {

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kNotFound:
      return "not_found";
    default:
      return "error";
  }
}

const char* WireName(Wire w) {
  switch (w) {
    case Wire::kTcp:
      return "tcp";
    case Wire::kShm:
      return "shm";
    default:
      return "rdma";
  }
}

const char* OpLabel(Op op) {
  const OpRow* r = FindOp(op);
  return r ? r->label : "";
}

namespace {
constexpr Tier kTierOrder[] = {Tier::kDevice, Tier::kPool, Tier::kDisk};
// GET, GET_SHM and GET_RDMA share one set of series (the transport label tells them apart),
// and so do PUT, PUT_SHM and PUT_DEVICE.
Op Canonical(Op op) {
  const OpRow* r = FindOp(op);
  return r ? r->counted_as : op;
}

size_t TierIndex(std::optional<Tier> t) {
  for (size_t i = 0; i < 3; ++i)
    if (t && *t == kTierOrder[i]) return i;
  return 3;  // a miss
}
}  // namespace

void ServerMetrics::Histogram::Add(double seconds) {
  size_t b =
      static_cast<size_t>(std::lower_bound(kLatencyBounds.begin(), kLatencyBounds.end(), seconds) -
                          kLatencyBounds.begin());
  buckets[b].fetch_add(1, std::memory_order_relaxed);
  count.fetch_add(1, std::memory_order_relaxed);
  sum_ns.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

HistogramSnapshot ServerMetrics::Histogram::Read() const {
  HistogramSnapshot h;
  for (size_t i = 0; i < buckets.size(); ++i)
    h.buckets[i] = buckets[i].load(std::memory_order_relaxed);
  h.count = count.load(std::memory_order_relaxed);
  h.sum_seconds = static_cast<double>(sum_ns.load(std::memory_order_relaxed)) / 1e9;
  return h;
}

void ServerMetrics::Record(Op op, Wire wire, Outcome outcome, uint64_t bytes_in, uint64_t bytes_out,
                           double seconds) {
  const size_t o = static_cast<size_t>(Canonical(op));
  if (o >= kOps || !*OpLabel(op)) return;
  const size_t w = static_cast<size_t>(wire);
  requests_[(o * kWires + w) * kOutcomes + static_cast<size_t>(outcome)].fetch_add(
      1, std::memory_order_relaxed);
  latency_[o * kWires + w].Add(seconds);
  bytes_in_.fetch_add(bytes_in, std::memory_order_relaxed);
  bytes_out_.fetch_add(bytes_out, std::memory_order_relaxed);
}

void ServerMetrics::RecordGet(Wire wire, std::optional<Tier> tier, double seconds) {
  get_by_tier_[static_cast<size_t>(wire) * kTiers + TierIndex(tier)].Add(seconds);
}

MetricsSnapshot ServerMetrics::Snapshot() const {
  MetricsSnapshot s;
  for (size_t o = 0; o < kOps; ++o) {
    const char* label = OpLabel(static_cast<Op>(o));
    if (!*label || Canonical(static_cast<Op>(o)) != static_cast<Op>(o)) continue;
    for (size_t w = 0; w < kWires; ++w) {
      for (size_t x = 0; x < kOutcomes; ++x) {
        uint64_t n = requests_[(o * kWires + w) * kOutcomes + x].load(std::memory_order_relaxed);
        if (n == 0) continue;
        s.requests.push_back({label, static_cast<Wire>(w), static_cast<Outcome>(x), n});
        s.requests_total += n;
        if (static_cast<Outcome>(x) == Outcome::kError) s.errors_total += n;
      }
      HistogramSnapshot h = latency_[o * kWires + w].Read();
      if (h.count) s.latency.push_back({label, static_cast<Wire>(w), "", h});
    }
  }
  static const char* kTierNames[] = {"device", "pool", "disk", "none"};
  for (size_t w = 0; w < kWires; ++w)
    for (size_t t = 0; t < kTiers; ++t) {
      HistogramSnapshot h = get_by_tier_[w * kTiers + t].Read();
      if (h.count) s.get_by_tier.push_back({"get", static_cast<Wire>(w), kTierNames[t], h});
    }
  s.bytes_in = bytes_in_.load(std::memory_order_relaxed);
  s.bytes_out = bytes_out_.load(std::memory_order_relaxed);
  s.refused_tokens = refused_tokens_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < refused_.size(); ++i)
    s.refused[i] = refused_[i].load(std::memory_order_relaxed);
  return s;
}

const char* RefusalName(Refusal r) {
  switch (r) {
    case Refusal::kToken:
      return "token";
    case Refusal::kPermission:
      return "permission";
    case Refusal::kTls:
      return "tls";
  }
  return "unknown";
}

}  // namespace ecstore::net
