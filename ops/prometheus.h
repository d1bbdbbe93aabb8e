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
  // Connections by state: waiting for a request on the event loop, being served, leaving a
  // reply to a slow reader; and those not yet greeted (of the open ones).
  uint64_t waiting = 0, busy = 0, sending = 0, ungreeted = 0;
  unsigned workers = 0, workers_busy = 0;
  double loop_lag_seconds = 0;  // how late the connections' 100 ms tick last ran
  double uptime_seconds = 0;
  net::Prefetcher::Counters prefetch;  // PREFETCH hints queued, dropped, acted on
  struct EventCounts {  // the entry events' publisher (serve --events), where there is one
    bool on = false;
    uint64_t batches = 0, events = 0, replays = 0;
  } events;
  // When the serving TLS certificate expires (Unix seconds; 0: no TLS).
  double tls_not_after = 0;
  struct ClusterCounts {  // a cluster member (serve --cluster), where it is one
    bool on = false;
    uint64_t members = 0;          // in the node's view
    bool member = false;           // its view holds the node
    bool registered = false;       // its record is in etcd under a live lease
    bool serving = false;          // its fence is open: it answers reads and writes
    bool etcd_reachable = false;   // etcd answered the last keep-alive
    double view_age_seconds = -1;  // since etcd last confirmed the view (-1: never)
    int64_t view_revision = 0;
    uint64_t view_changes = 0, bad_records = 0, keys_dropped = 0;
  } cluster;
};

std::string RenderPrometheus(const StoreStats& stats, const net::MetricsSnapshot& served,
                             const ServerState& state);

}  // namespace ecstore::ops
