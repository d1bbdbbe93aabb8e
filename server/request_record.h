// RequestRecord: what one request did -- its outcome, bytes, key, the tier it was served
// from -- kept by its connection while the request is answered, then counted in the server's
// metrics and logged, once.
//
//   c->req.Begin();                       // a frame has come
//   c->req.outcome = Outcome::kNotFound;  // ... as the answer goes
//   c->req.Finish(&metrics, header, Wire::kShm, peer, slow_ms);
//
// Thread rules: belongs to its connection's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "cache/cache.h"
#include "net/protocol.h"
#include "server/server_metrics.h"

namespace ecstore::net {

struct RequestRecord {
  Outcome outcome = Outcome::kOk;
  uint64_t bytes_out = 0;
  uint64_t bytes_in = 0;            // of a PUT_SHM (a PUT's are its body)
  std::string ns, key;              // of a GET or PUT (a batch: its first key, and how many)
  std::optional<Tier> served_from;  // a GET's tier before it was served
  bool one_key_stream = false;      // a GET_SHM_STREAM of one key: metered as a get
  std::chrono::steady_clock::time_point start;

  void Begin();  // everything reset; start = now
  // Counted in `metrics` (a get's tier too, where `get` says it was one) and logged: a
  // warning where it took over slow_ms (> 0), else at debug level.
  void Finish(ServerMetrics* metrics, const FrameHeader& h, Wire wire, bool get,
              const std::string& peer, int64_t slow_ms) const;
};

}  // namespace ecstore::net
