#include "server/admin_requests.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cache/stats_json.h"

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
                                const std::string& transport, const std::string& server_transports,
                                const std::string& tls_json) {
  nlohmann::json extra{{"transport", transport}, {"server_transports", server_transports}};
  if (!tls_json.empty()) extra["tls"] = nlohmann::json::parse(tls_json, nullptr, false);
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
    auto r = store->Compact(1.0);
    if (!r.ok()) return r.status();
    j = {{"before", r->before}, {"after", r->after}};
    spdlog::info("compaction requested by {}: disk {} -> {} bytes", peer, r->before, r->after);
  }
  return JsonBody(j.dump());
}

Result<Answer> AnswerKeys(Store* store, Op op, BodyReader* r) {
  Answer a;
  if (op == Op::kErase) {
    auto k = ParseKeyBody(r);
    if (!k.ok()) return k.status();
    a.error = store->Erase(k->ns, k->key);
    return a;
  }
  auto keys = ParseLookupBody(r);
  if (!keys.ok()) return keys.status();
  BodyWriter w;
  if (op == Op::kLookup) {
    w.U32(static_cast<uint32_t>(keys->size()));
    for (const KeyRef& k : *keys) {
      auto info = store->Lookup(k.ns, k.key);
      w.U8(info.ok());
      if (info.ok()) WriteInfo(&w, *info);
    }
    return Answer{Status::Ok(), Op::kLookupOk, w.data()};
  }
  std::vector<std::pair<std::string, std::string>> ns_keys;
  for (KeyRef& k : *keys) ns_keys.emplace_back(std::move(k.ns), std::move(k.key));
  std::vector<bool> erased;
  Status st = store->EraseMany(ns_keys, &erased);
  if (!st.ok() && std::find(erased.begin(), erased.end(), true) == erased.end())
    return Answer{st, Op::kError, {}};  // nothing erased (the store is closed, read-only...)
  return Answer{Status::Ok(), Op::kEraseManyOk, EraseManyReplyBody(erased, st)};
}

}  // namespace ecstore::net
