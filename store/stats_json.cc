#include "store/stats_json.h"

#include <nlohmann/json.hpp>

namespace ecstore {
namespace {

using nlohmann::json;

json TierJson(const TierStats& t) {
  return {{"entries", t.entries},      {"bytes", t.bytes},         {"hits", t.hits},
          {"misses", t.misses},        {"evictions", t.evictions}, {"spills", t.spills},
          {"promotions", t.promotions}};
}

TierStats TierFrom(const json& j) {
  TierStats t;
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
  json j{{"pool", TierJson(s.pool)}, {"disk", TierJson(s.disk)}};
  j["pool"]["capacity"] = s.pool_capacity;
  j["pool"]["allocated"] = s.pool_allocated;
  j["pool"]["fragmentation"] = s.pool_fragmentation;
  j["pool"]["huge_pages"] = s.pool_huge_pages;
  j["pool"]["pinned"] = s.pool_locked;
  j["disk"]["quota"] = s.disk_quota;
  j["disk"]["file_bytes"] = s.disk_file_bytes;
  j["disk"]["segments"] = s.segments;
  j["corrupt_dropped"] = s.corrupt_dropped;
  j["spill_errors"] = s.spill_errors;
  j["compactions"] = s.compactions;
  j["misses"] = s.misses;
  json extra = json::parse(extra_json_object, nullptr, false);
  if (extra.is_object()) j.update(extra);
  return j.dump(indent);
}

Result<StoreStats> StatsFromJson(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("pool") || !j.contains("disk"))
    return Status::InvalidArgument("not a stats object: " + std::string(text.substr(0, 80)));
  StoreStats s;
  const json& p = j["pool"];
  const json& d = j["disk"];
  s.pool = TierFrom(p);
  s.disk = TierFrom(d);
  s.pool_capacity = p.value("capacity", uint64_t{0});
  s.pool_allocated = p.value("allocated", uint64_t{0});
  s.pool_fragmentation = p.value("fragmentation", 0.0);
  s.pool_huge_pages = p.value("huge_pages", false);
  s.pool_locked = p.value("pinned", false);
  s.disk_quota = d.value("quota", uint64_t{0});
  s.disk_file_bytes = d.value("file_bytes", uint64_t{0});
  s.segments = d.value("segments", uint64_t{0});
  s.corrupt_dropped = j.value("corrupt_dropped", uint64_t{0});
  s.spill_errors = j.value("spill_errors", uint64_t{0});
  s.compactions = j.value("compactions", uint64_t{0});
  s.misses = j.value("misses", uint64_t{0});
  return s;
}

}  // namespace ecstore
