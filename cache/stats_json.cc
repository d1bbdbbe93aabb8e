#include "cache/stats_json.h"

#include <nlohmann/json.hpp>

namespace ecstore {
namespace {

using nlohmann::json;

json TierJson(const TierStats& t) {
  return {{"entries", t.entries},       {"bytes", t.bytes},         {"hits", t.hits},
          {"misses", t.misses},         {"evictions", t.evictions}, {"spills", t.spills},
          {"promotions", t.promotions}, {"capacity", t.capacity}};
}

TierStats TierFrom(Tier tier, const json& j) {
  TierStats t;
  t.tier = tier;
  t.capacity = j.value("capacity", uint64_t{0});
  t.entries = j.value("entries", uint64_t{0});
  t.bytes = j.value("bytes", uint64_t{0});
  t.hits = j.value("hits", uint64_t{0});
  t.misses = j.value("misses", uint64_t{0});
  t.evictions = j.value("evictions", uint64_t{0});
  t.spills = j.value("spills", uint64_t{0});
  t.promotions = j.value("promotions", uint64_t{0});
  return t;
}

}  // namespace

std::string StatsToJson(const StoreStats& s, int indent, const std::string& extra_json_object) {
  json j = json::object();
  for (const TierStats& t : s.tiers) j[TierName(t.tier)] = TierJson(t);
  for (Tier t : {Tier::kPool, Tier::kDisk})  // the schema always has both
    if (!j.contains(TierName(t))) j[TierName(t)] = TierJson(s.of(t));
  j["pool"]["allocated"] = s.of(Tier::kPool).used;
  j["pool"]["fragmentation"] = s.pool_fragmentation;
  j["pool"]["huge_pages"] = s.pool_huge_pages;
  j["pool"]["huge_page_bytes"] = s.pool_huge_page_bytes;
  j["pool"]["pinned"] = s.pool_locked;
  j["pool"]["prefault_seconds"] = s.pool_prefault_seconds;
  j["pool"]["prefault_threads"] = s.pool_prefault_threads;
  j["disk"]["quota"] = s.of(Tier::kDisk).capacity;
  j["disk"]["file_bytes"] = s.of(Tier::kDisk).used;
  j["disk"]["segments"] = s.segments;
  j["corrupt_dropped"] = s.corrupt_dropped;
  j["spill_errors"] = s.spill_errors;
  j["compactions"] = s.compactions;
  j["misses"] = s.misses;
  j["lookups"] = {{"hits", s.lookup_hits}, {"misses", s.lookup_misses}};
  j["version"] = s.version;
  j["uptime_seconds"] = s.uptime_seconds;
  j["connections"] = s.connections;
  j["client_leases"] = s.client_leases;
  j["leases"] = s.leases;
  j["keydir"] = {{"entries", s.keydir_entries}, {"compact_rows", s.keydir_compact_rows}};
  json extra = json::parse(extra_json_object, nullptr, false);
  if (extra.is_object()) j.update(extra);
  return j.dump(indent);
}

Result<StoreStats> StatsFromJson(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("pool") || !j.contains("disk"))
    return Status::InvalidArgument("not a stats object: " + std::string(text.substr(0, 80)));
  StoreStats s;
  for (Tier t : kAllTiers)
    if (j.contains(TierName(t)) && j[TierName(t)].is_object())
      s.at(t) = TierFrom(t, j[TierName(t)]);
  const json& p = j["pool"];
  const json& d = j["disk"];
  s.at(Tier::kPool).used = p.value("allocated", uint64_t{0});
  s.pool_fragmentation = p.value("fragmentation", 0.0);
  s.pool_huge_pages = p.value("huge_pages", false);
  s.pool_huge_page_bytes = p.value("huge_page_bytes", uint64_t{0});  // absent from older daemons
  s.pool_locked = p.value("pinned", false);
  s.pool_prefault_seconds = p.value("prefault_seconds", 0.0);
  s.pool_prefault_threads = p.value("prefault_threads", 0u);
  s.at(Tier::kDisk).capacity = d.value("quota", uint64_t{0});
  s.at(Tier::kDisk).used = d.value("file_bytes", uint64_t{0});
  s.segments = d.value("segments", uint64_t{0});
  s.corrupt_dropped = j.value("corrupt_dropped", uint64_t{0});
  s.spill_errors = j.value("spill_errors", uint64_t{0});
  s.compactions = j.value("compactions", uint64_t{0});
  s.misses = j.value("misses", uint64_t{0});
  if (auto l = j.find("lookups"); l != j.end() && l->is_object()) {
    s.lookup_hits = l->value("hits", uint64_t{0});
    s.lookup_misses = l->value("misses", uint64_t{0});
  }
  s.leases = j.value("leases", uint64_t{0});
  if (auto k = j.find("keydir"); k != j.end() && k->is_object()) {
    s.keydir_entries = k->value("entries", uint64_t{0});
    s.keydir_compact_rows = k->value("compact_rows", uint64_t{0});
  }
  s.version = j.value("version", std::string());
  s.uptime_seconds = j.value("uptime_seconds", 0.0);
  s.connections = j.value("connections", uint64_t{0});
  s.client_leases = j.value("client_leases", uint64_t{0});
  return s;
}

}  // namespace ecstore
