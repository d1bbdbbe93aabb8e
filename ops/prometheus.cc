#include "ops/prometheus.h"

#include <cstdio>
#include <string_view>

namespace ecstore::ops {
namespace {

// Writes families: "# HELP" and "# TYPE" once, then its samples.
class Writer {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void Sample(std::string_view name, const std::string& labels, double v) {
    char num[64];
    std::snprintf(num, sizeof(num), "%.17g", v);
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += ' ';
    out_ += num;
    out_ += '\n';
  }
  void Metric(std::string_view name, std::string_view type, std::string_view help, double v) {
    Family(name, type, help);
    Sample(name, "", v);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string Label(std::string_view k, std::string_view v) {
  return std::string(k) + "=\"" + std::string(v) + "\"";
}

void Tiers(Writer& w, const StoreStats& s) {
  struct Field {
    const char* name;
    const char* type;
    const char* help;
    uint64_t TierStats::*member;
  };
  static const Field kFields[] = {
      {"ecstore_tier_entries", "gauge", "Entries with a copy in the tier.", &TierStats::entries},
      {"ecstore_tier_payload_bytes", "gauge", "Payload bytes of the tier's entries.",
       &TierStats::bytes},
      {"ecstore_tier_used_bytes", "gauge",
       "Bytes the tier uses (pools: blocks with their rounding; disk: segment files).",
       &TierStats::used},
      {"ecstore_tier_capacity_bytes", "gauge", "The tier's size (pools) or quota (disk).",
       &TierStats::capacity},
      {"ecstore_tier_hits_total", "counter", "Gets served from the tier.", &TierStats::hits},
      {"ecstore_tier_misses_total", "counter", "Gets the tier could not serve.",
       &TierStats::misses},
      {"ecstore_tier_evictions_total", "counter", "Entries evicted from the tier.",
       &TierStats::evictions},
      {"ecstore_tier_spills_total", "counter", "Entries written out of the tier to a slower one.",
       &TierStats::spills},
      {"ecstore_tier_promotions_total", "counter", "Entries brought into the tier.",
       &TierStats::promotions},
  };
  for (const Field& f : kFields) {
    w.Family(f.name, f.type, f.help);
    for (const TierStats& t : s.tiers)
      w.Sample(f.name, Label("tier", TierName(t.tier)), static_cast<double>(t.*(f.member)));
  }
}

void Store(Writer& w, const StoreStats& s) {
  w.Metric("ecstore_misses_total", "counter", "Gets of entries no tier holds.",
           static_cast<double>(s.misses));
  w.Family("ecstore_lookups_total", "counter",
           "Existence checks (lookup, contains), by whether the entry was found.");
  w.Sample("ecstore_lookups_total", Label("outcome", "hit"), static_cast<double>(s.lookup_hits));
  w.Sample("ecstore_lookups_total", Label("outcome", "miss"), static_cast<double>(s.lookup_misses));
  w.Metric("ecstore_corrupt_records_total", "counter",
           "Records dropped because their checksum or header was wrong.",
           static_cast<double>(s.corrupt_dropped));
  w.Metric("ecstore_spill_errors_total", "counter", "Failed moves out of a pool (disk errors).",
           static_cast<double>(s.spill_errors));
  w.Metric("ecstore_compactions_total", "counter", "Segments compacted.",
           static_cast<double>(s.compactions));
  w.Metric("ecstore_disk_segments", "gauge", "Segment files of the disk tier.",
           static_cast<double>(s.segments));
  w.Metric("ecstore_leases", "gauge", "Leases held now (zero-copy readers, pins, copies).",
           static_cast<double>(s.leases));
  w.Metric("ecstore_keydir_entries", "gauge", "Entries in the keydir.",
           static_cast<double>(s.keydir_entries));
  w.Metric("ecstore_keydir_compact_rows", "gauge",
           "Keydir entries kept as compact rows (idle, on disk only).",
           static_cast<double>(s.keydir_compact_rows));
  w.Metric("ecstore_pool_fragmentation_ratio", "gauge",
           "Free pool bytes outside the largest free extent, over the capacity.",
           s.pool_fragmentation);
  w.Metric("ecstore_pool_huge_page_bytes", "gauge",
           "Pool bytes the kernel put in huge pages (hugetlb or transparent).",
           static_cast<double>(s.pool_huge_page_bytes));
  // 0 while the pool has capacity: RLIMIT_MEMLOCK refused the lock (the start-up log says
  // how to raise it), and host<->device copies run at pageable speed.
  w.Metric("ecstore_pool_pinned_bytes", "gauge", "Pool bytes locked in memory (mlock).",
           s.pool_locked ? static_cast<double>(s.pool().capacity) : 0.0);
}

void Histogram(Writer& w, std::string_view name, const std::string& labels,
               const net::HistogramSnapshot& h) {
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cum = 0;
  char le[32];
  for (size_t i = 0; i < net::kLatencyBounds.size(); ++i) {
    cum += h.buckets[i];
    std::snprintf(le, sizeof(le), "%g", net::kLatencyBounds[i]);
    w.Sample(bucket, labels + "," + Label("le", le), static_cast<double>(cum));
  }
  w.Sample(bucket, labels + "," + Label("le", "+Inf"), static_cast<double>(h.count));
  w.Sample(std::string(name) + "_sum", labels, h.sum_seconds);
  w.Sample(std::string(name) + "_count", labels, static_cast<double>(h.count));
}

void Served(Writer& w, const net::MetricsSnapshot& m, const ServerState& st) {
  w.Family("ecstore_requests_total", "counter",
           "Requests answered, by operation, transport and outcome.");
  for (const auto& r : m.requests)
    w.Sample("ecstore_requests_total",
             Label("op", r.op) + "," + Label("transport", net::WireName(r.wire)) + "," +
                 Label("outcome", net::OutcomeName(r.outcome)),
             static_cast<double>(r.count));
  w.Family("ecstore_request_duration_seconds", "histogram",
           "Time from a request's header to its reply, by operation and transport.");
  for (const auto& l : m.latency)
    Histogram(w, "ecstore_request_duration_seconds",
              Label("op", l.op) + "," + Label("transport", net::WireName(l.wire)), l.hist);
  w.Family("ecstore_get_duration_seconds", "histogram",
           "Time to serve a get, by transport and the tier it was served from (none: a miss).");
  for (const auto& l : m.get_by_tier)
    Histogram(w, "ecstore_get_duration_seconds",
              Label("transport", net::WireName(l.wire)) + "," + Label("tier", l.tier), l.hist);
  w.Family("ecstore_bytes_total", "counter", "Payload bytes received (in) and served (out).");
  w.Sample("ecstore_bytes_total", Label("direction", "in"), static_cast<double>(m.bytes_in));
  w.Sample("ecstore_bytes_total", Label("direction", "out"), static_cast<double>(m.bytes_out));
  w.Metric("ecstore_refused_tokens_total", "counter", "Clients refused for a wrong token.",
           static_cast<double>(m.refused_tokens));
  w.Family("ecstore_refused_requests_total", "counter",
           "Connections and requests refused: a wrong secret (token), a right the principal "
           "lacks (permission), a failed TLS handshake or a plain client on a TLS port (tls).");
  for (auto r : {net::Refusal::kToken, net::Refusal::kPermission, net::Refusal::kTls})
    w.Sample("ecstore_refused_requests_total", Label("reason", net::RefusalName(r)),
             static_cast<double>(m.refused[static_cast<size_t>(r)]));
  w.Metric("ecstore_connections", "gauge", "Client connections open now.",
           static_cast<double>(st.connections));
  w.Family("ecstore_connections_by_state", "gauge",
           "Client connections: waiting for a request on the event loop, being served by a "
           "worker, or sending a reply a slow reader has not taken; ungreeted: not yet said "
           "HELLO (any state).");
  for (auto [name, n] : {std::pair{"waiting", st.waiting},
                         {"busy", st.busy},
                         {"sending", st.sending},
                         {"ungreeted", st.ungreeted}})
    w.Sample("ecstore_connections_by_state", Label("state", name), static_cast<double>(n));
  w.Metric("ecstore_workers", "gauge", "Threads that serve requests.",
           static_cast<double>(st.workers));
  w.Metric("ecstore_workers_busy", "gauge", "Workers serving a connection now.",
           static_cast<double>(st.workers_busy));
  w.Metric("ecstore_event_loop_lag_seconds", "gauge",
           "How late the connections' 100 ms timer (deadlines, lease expiry) last ran.",
           st.loop_lag_seconds);
  w.Metric("ecstore_client_leases", "gauge", "Leases clients hold now (shared memory, RDMA).",
           static_cast<double>(st.client_leases));
  w.Metric("ecstore_uptime_seconds", "gauge", "Seconds since the server started.",
           st.uptime_seconds);
  w.Family("ecstore_prefetch_hints_total", "counter",
           "PREFETCH hints queued, dropped (the queue was full) and acted on.");
  w.Sample("ecstore_prefetch_hints_total", Label("outcome", "queued"),
           static_cast<double>(st.prefetch.hints));
  w.Sample("ecstore_prefetch_hints_total", Label("outcome", "dropped"),
           static_cast<double>(st.prefetch.dropped));
  w.Sample("ecstore_prefetch_hints_total", Label("outcome", "done"),
           static_cast<double>(st.prefetch.done));
  if (st.tls_not_after > 0)
    w.Metric("ecstore_tls_certificate_expiry_timestamp_seconds", "gauge",
             "When the certificate the daemon serves TLS with expires (Unix time); a rotated "
             "pair counts from its reload.",
             st.tls_not_after);
  if (st.events.on) {
    w.Metric("ecstore_events_batches_total", "counter",
             "Entry event batches published (serve --events; each a sequence number).",
             static_cast<double>(st.events.batches));
    w.Metric("ecstore_events_total", "counter", "Entry events (stored, removed) published.",
             static_cast<double>(st.events.events));
    w.Metric("ecstore_events_replays_total", "counter",
             "Replay and snapshot requests answered (subscribers that missed batches or "
             "started late).",
             static_cast<double>(st.events.replays));
  }
  w.Family("ecstore_build_info", "gauge", "The ec-store version serving.");
  w.Sample("ecstore_build_info", Label("version", EC_STORE_VERSION), 1);
}

// A member's place in its cluster: what an operator alerts on when a node drops out of the
// ring, cannot reach etcd, or serves from a view etcd has not confirmed.
void Cluster(Writer& w, const ServerState::ClusterCounts& c) {
  auto flag = [](bool b) { return b ? 1.0 : 0.0; };
  struct Row {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const Row rows[] = {
      {"ecstore_cluster_members", "gauge", "Members in this node's view of its cluster.",
       static_cast<double>(c.members)},
      {"ecstore_cluster_member", "gauge", "1 while this node's own view lists it.", flag(c.member)},
      {"ecstore_cluster_registered", "gauge",
       "1 while this node's record is in etcd under a live lease.", flag(c.registered)},
      {"ecstore_cluster_serving", "gauge",
       "1 while the node's fence is open (its lease and view confirmed); 0: it refuses every "
       "read and write until they are.",
       flag(c.serving)},
      {"ecstore_cluster_etcd_reachable", "gauge",
       "1 while etcd answers the node's keep-alives (whatever it answers).",
       flag(c.etcd_reachable)},
      {"ecstore_cluster_view_revision", "gauge",
       "The etcd revision the node's view of the members reflects.",
       static_cast<double>(c.view_revision)},
      {"ecstore_cluster_view_changes_total", "counter",
       "Changes of the member list the node's watch has seen.",
       static_cast<double>(c.view_changes)},
      {"ecstore_cluster_bad_records_total", "counter",
       "Member records under the cluster's prefix that did not parse (ignored).",
       static_cast<double>(c.bad_records)},
      {"ecstore_cluster_keys_dropped_total", "counter",
       "Entries dropped because a membership change moved them off this node.",
       static_cast<double>(c.keys_dropped)},
  };
  for (const Row& r : rows) w.Metric(r.name, r.type, r.help, r.value);
  if (c.view_age_seconds >= 0)  // absent until etcd first confirms the view
    w.Metric("ecstore_cluster_view_age_seconds", "gauge",
             "Seconds since etcd last confirmed the node's view of the members.",
             c.view_age_seconds);
}

}  // namespace

std::string RenderPrometheus(const StoreStats& stats, const net::MetricsSnapshot& served,
                             const ServerState& state) {
  Writer w;
  Tiers(w, stats);
  Store(w, stats);
  Served(w, served, state);
  if (state.cluster.on) Cluster(w, state.cluster);
  return w.Take();
}

}  // namespace ecstore::ops
