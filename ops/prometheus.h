// The daemon's /metrics in the Prometheus text exposition format (version 0.0.4): the
// store's tiers (StoreStats: the same numbers `ec-store stats` prints) and what the server
// has answered (ServerMetrics), with uptime and version. Names start with `ecstore_`;
// counters end in `_total`, sizes are in bytes, times in seconds.
// Thread rules: pure functions.
#pragma once

#include <string>

#include "cache/cache.h"
#include "server/prefetcher.h"
#include "server/server_metrics.h"

namespace ecstore::ops {

struct ServerState {
  uint64_t connections = 0;
  uint64_t client_leases = 0;
  double uptime_seconds = 0;
  net::Prefetcher::Counters prefetch;  // PREFETCH hints queued, dropped, acted on
};

std::string RenderPrometheus(const StoreStats& stats, const net::MetricsSnapshot& served,
                             const ServerState& state);

}  // namespace ecstore::ops
