#include "server/request_record.h"

#include <spdlog/spdlog.h>

namespace ecstore::net {

void RequestRecord::Begin() {
  outcome = Outcome::kOk;
  bytes_out = 0;
  bytes_in = 0;
  ns.clear();
  key.clear();
  served_from.reset();
  one_key_stream = false;
  start = std::chrono::steady_clock::now();
}

void RequestRecord::Finish(ServerMetrics* metrics, const FrameHeader& h, Wire wire, bool get,
                           const std::string& peer, int64_t slow_ms) const {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t in = h.op == Op::kPut ? h.body_len : bytes_in;
  const Op op = one_key_stream ? Op::kGetShm : h.op;
  metrics->Record(op, wire, outcome, in, bytes_out, secs);
  if (get || one_key_stream)
    metrics->RecordGet(wire, outcome == Outcome::kOk ? served_from : std::nullopt, secs);
  const bool slow = slow_ms > 0 && secs * 1000 > static_cast<double>(slow_ms);
  if (slow || spdlog::should_log(spdlog::level::debug))
    spdlog::log(slow ? spdlog::level::warn : spdlog::level::debug,
                "{}{} {}/{} (request {}) from {} over {}: {}, {} bytes in, {} out, {:.3f} ms",
                slow ? "slow " : "", OpLabel(op), ns.empty() ? "-" : ns, key.empty() ? "-" : key,
                h.request_id, peer, WireName(wire), OutcomeName(outcome), in, bytes_out,
                secs * 1e3);
}

}  // namespace ecstore::net
