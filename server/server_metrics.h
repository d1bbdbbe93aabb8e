// ServerMetrics: what a Server counts as it answers requests -- requests by operation,
// transport and outcome, bytes in and out, and latency histograms by operation and
// transport, gets also by the tier that served them. ops/prometheus.h renders a Snapshot.
// Thread rules: Record/RecordGet from any connection thread (relaxed atomics, no lock);
// Snapshot from any thread (each counter is read once; a scrape may see a request counted
// in one family and not yet in another).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "net/op_table.h"
#include "net/protocol.h"

namespace ecstore::net {

enum class Outcome : uint8_t { kOk, kNotFound, kError };
enum class Wire : uint8_t { kTcp, kShm, kRdma };
const char* OutcomeName(Outcome o);
const char* WireName(Wire w);
// The operation label of an opcode: GET, GET_SHM and GET_RDMA are all "get" (the transport
// label tells them apart); "" for replies.
const char* OpLabel(Op op);

// Upper bounds of the latency buckets, in seconds (the last bucket is +Inf).
inline constexpr std::array<double, 14> kLatencyBounds = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1, 5};

struct HistogramSnapshot {
  std::array<uint64_t, kLatencyBounds.size() + 1> buckets{};  // not cumulative
  uint64_t count = 0;
  double sum_seconds = 0;
};

struct MetricsSnapshot {
  struct Requests {
    std::string op;
    Wire wire;
    Outcome outcome;
    uint64_t count;
  };
  struct Latency {
    std::string op;  // "get" in by_tier
    Wire wire;
    std::string tier;  // by_tier only: device, pool, disk, or "none" (a miss)
    HistogramSnapshot hist;
  };
  std::vector<Requests> requests;  // the non-zero ones
  std::vector<Latency> latency;    // by operation and transport
  std::vector<Latency> get_by_tier;
  uint64_t bytes_in = 0, bytes_out = 0, requests_total = 0, errors_total = 0;
  uint64_t refused_tokens = 0;
  std::array<uint64_t, 3> refused{};  // by Refusal
};

// Why a connection or a request was refused (ecstore_refused_requests_total{reason}).
enum class Refusal : uint8_t { kToken, kPermission, kTls };
const char* RefusalName(Refusal r);  // "token", "permission", "tls"

class ServerMetrics {
 public:
  // One answered request: payload bytes received and sent, and how long it took from its
  // header to its reply.
  void Record(Op op, Wire wire, Outcome outcome, uint64_t bytes_in, uint64_t bytes_out,
              double seconds);
  // A get (any transport) served from `tier` (nullopt: a miss).
  void RecordGet(Wire wire, std::optional<Tier> tier, double seconds);
  void RecordRefusedToken() {
    refused_tokens_.fetch_add(1, std::memory_order_relaxed);
    RecordRefused(Refusal::kToken);
  }
  void RecordRefused(Refusal r) {
    refused_[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  }
  MetricsSnapshot Snapshot() const;

 private:
  // kOps: one past the largest request opcode (the op table's).
  static constexpr size_t kOps = RequestOpLimit(), kWires = 3, kOutcomes = 3, kTiers = 4;
  struct Histogram {
    std::array<std::atomic<uint64_t>, kLatencyBounds.size() + 1> buckets{};
    std::atomic<uint64_t> count{0}, sum_ns{0};
    void Add(double seconds);
    HistogramSnapshot Read() const;
  };
  std::array<std::atomic<uint64_t>, kOps * kWires * kOutcomes> requests_{};
  std::array<Histogram, kOps * kWires> latency_{};
  std::array<Histogram, kWires * kTiers> get_by_tier_{};
  std::atomic<uint64_t> bytes_in_{0}, bytes_out_{0}, refused_tokens_{0};
  std::array<std::atomic<uint64_t>, 3> refused_{};
};

}  // namespace ecstore::net
