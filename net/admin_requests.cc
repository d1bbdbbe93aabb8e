#include "net/admin_requests.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "store/stats_json.h"

namespace ecstore::net {

namespace {
std::string JsonBody(const std::string& js) {
  BodyWriter w;
  w.U32(static_cast<uint32_t>(js.size()));
  w.Raw(js.data(), js.size());
  return w.data();
}
}  // namespace

Result<std::string> AnswerStats(Store* store, uint64_t connections, uint64_t client_leases,
                                const std::string& transport,
                                const std::string& server_transports) {
  nlohmann::json extra{{"transport", transport}, {"server_transports", server_transports}};
  auto stats = store->Stats();
  if (!stats.ok()) return stats.status();
  stats->connections = connections;
  stats->client_leases = client_leases;
  return JsonBody(StatsToJson(*stats, -1, extra.dump()));
}

Result<std::string> AnswerAdmin(Store* store, Op op, const std::string& peer) {
  nlohmann::json j;
  if (op == Op::kVerify) {
    auto rep = store->Verify(nullptr);
    if (!rep.ok()) return rep.status();
    j = {{"checked", rep->checked},
         {"bytes", rep->bytes},
         {"corrupt", rep->corrupt},
         {"errors", rep->errors}};
    spdlog::info("verify requested by {}: {} entries checked, {} corrupt dropped, {} unreadable",
                 peer, rep->checked, rep->corrupt.size(), rep->errors.size());
  } else {
    auto before = store->Stats();
    Status st = before.ok() ? store->Compact(1.0) : before.status();
    auto after = st.ok() ? store->Stats() : Result<StoreStats>(st);
    if (!after.ok()) return after.status();
    j = {{"before", before->disk().used}, {"after", after->disk().used}};
    spdlog::info("compaction requested by {}: disk {} -> {} bytes", peer, before->disk().used,
                 after->disk().used);
  }
  return JsonBody(j.dump());
}

}  // namespace ecstore::net
