// The one JSON schema of StoreStats: what `ec-store --json stats` prints, locally and through
// a server (which adds "transport" and "server_transports"), and what STATS carries on the
// wire. Thread rules: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "cache/cache.h"

namespace ecstore {

// {"pool": {entries, bytes, hits, misses, evictions, spills, promotions, capacity, allocated,
//  fragmentation, huge_pages, huge_page_bytes, pinned}, "disk": {... tier counters, quota,
//  file_bytes, segments}, corrupt_dropped, spill_errors, compactions, misses}, plus `extra` (a JSON
// object's members, e.g. "transport") when given.
std::string StatsToJson(const StoreStats& s, int indent = -1,
                        const std::string& extra_json_object = "{}");
// Reads StatsToJson's output back (unknown members are ignored, missing ones are 0).
Result<StoreStats> StatsFromJson(std::string_view json);

}  // namespace ecstore
