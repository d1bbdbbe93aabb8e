#include "cli/output.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <string_view>
#include <vector>

#include "cache/stats_json.h"

namespace ecstore::cli {

using nlohmann::json;

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

std::string PoolPages(const StoreStats& s) {
  const uint64_t cap = s.pool().capacity;
  if (s.pool_huge_pages || (cap && s.pool_huge_page_bytes >= cap)) return "huge pages";
  if (!cap || !s.pool_huge_page_bytes) return "4 KiB pages";
  return "huge pages for " + std::to_string(100 * s.pool_huge_page_bytes / cap) + " % of it";
}

std::string TimeString(uint64_t us) {
  std::time_t t = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string HexString(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

json InfoJson(const EntryInfo& e) {
  json tiers = json::array();
  for (Tier t : kAllTiers)
    if (e.tiers.has(t)) tiers.push_back(TierName(t));
  return {{"key", e.key},
          {"namespace", e.ns},
          {"tier", TierName(e.tier())},
          {"tiers", tiers},
          {"on_disk", e.on_disk()},
          {"bytes", e.bytes},
          {"dtype", DTypeName(e.meta.dtype)},
          {"shape", e.meta.shape},
          {"created", TimeString(e.created_us)},
          {"last_access", TimeString(e.last_access_us)},
          {"hits", e.hits},
          // 64 bits: a JSON number past 2^53 is rounded by most readers (jq among them).
          {"checksum", HexString(e.checksum)}};
}

// How much of each key a terminal's table shows: at least 12 characters, and enough that no
// two listed keys share the shown part, so it can be pasted back as a prefix (get --prefix,
// inspect --prefix).
size_t ShownKeyLength(const std::vector<EntryInfo>& rows) {
  std::vector<std::string_view> keys;
  for (const EntryInfo& e : rows) keys.push_back(e.key);
  std::sort(keys.begin(), keys.end());
  size_t shown = 12;
  for (size_t i = 1; i < keys.size(); ++i) {
    size_t common = 0;
    while (common < keys[i].size() && common < keys[i - 1].size() &&
           keys[i][common] == keys[i - 1][common])
      ++common;
    shown = std::max(shown, common + 1);
  }
  return shown;
}

void PrintInfoTable(const std::vector<EntryInfo>& rows, bool full_keys,
                    const std::vector<std::string>* nodes) {
  const size_t shown = full_keys ? SIZE_MAX : ShownKeyLength(rows);
  size_t width = 12, ns_width = 12, node_width = 4;  // namespaces and nodes are never cut
  for (size_t i = 0; i < rows.size(); ++i) {
    width = std::max(width, std::min(shown, rows[i].key.size()));
    ns_width = std::max(ns_width, rows[i].ns.size());
    if (nodes) node_width = std::max(node_width, (*nodes)[i].size());
  }
  const int nsw = static_cast<int>(ns_width);
  const int nw = nodes ? static_cast<int>(node_width) + 1 : 0;  // with its separating space
  std::printf("%-*s %-*s %-6s %10s %-6s %-14s %6s %-20s%*s\n", static_cast<int>(width), "KEY", nsw,
              "NAMESPACE", "TIER", "BYTES", "DTYPE", "SHAPE", "HITS", "LAST ACCESS", nw,
              nodes ? "NODE" : "");
  for (size_t i = 0; i < rows.size(); ++i) {
    const EntryInfo& e = rows[i];
    std::string key = e.key.substr(0, shown);
    std::printf("%-*s %-*s %-6s %10s %-6s %-14s %6llu %-20s%*s\n", static_cast<int>(width),
                key.c_str(), nsw, e.ns.c_str(), TierName(e.tier()), HumanBytes(e.bytes).c_str(),
                DTypeName(e.meta.dtype), e.meta.ShapeString().c_str(),
                static_cast<unsigned long long>(e.hits), TimeString(e.last_access_us).c_str(), nw,
                nodes ? (*nodes)[i].c_str() : "");
  }
}

void PrintInfo(const EntryInfo& info) {
  std::printf(
      "key:          %s\nnamespace:    %s\ntier:         %s%s\nbytes:        %llu (%s)\n"
      "dtype:        %s\nshape:        [%s]\ncreated:      %s\nlast access:  %s\nhits:       "
      "  %llu\n",
      info.key.c_str(), info.ns.c_str(), TierName(info.tier()),
      info.on_disk() && info.tier() != Tier::kDisk ? " (also on disk)" : "",
      static_cast<unsigned long long>(info.bytes), HumanBytes(info.bytes).c_str(),
      DTypeName(info.meta.dtype), info.meta.ShapeString().c_str(),
      TimeString(info.created_us).c_str(), TimeString(info.last_access_us).c_str(),
      static_cast<unsigned long long>(info.hits));
}

void PrintStats(const StoreStats& s, const std::string& transport, bool as_json, int indent,
                const std::string& extra) {
  if (as_json) {
    json fields = json::parse(extra);
    fields["transport"] = transport;
    std::cout << StatsToJson(s, indent, fields.dump()) << "\n";
    return;
  }
  std::printf("%-6s %8s %12s %8s %8s %10s %8s %10s\n", "TIER", "ENTRIES", "BYTES", "HITS", "MISSES",
              "EVICTIONS", "SPILLS", "PROMOTIONS");
  for (const TierStats& t : s.tiers)
    std::printf("%-6s %8llu %12s %8llu %8llu %10llu %8llu %10llu\n", TierName(t.tier),
                (unsigned long long)t.entries, HumanBytes(t.bytes).c_str(),
                (unsigned long long)t.hits, (unsigned long long)t.misses,
                (unsigned long long)t.evictions, (unsigned long long)t.spills,
                (unsigned long long)t.promotions);
  const TierStats pool = s.pool(), disk = s.disk();
  std::printf("pool: %s of %s allocated, fragmentation %.2f%%, %s%s", HumanBytes(pool.used).c_str(),
              HumanBytes(pool.capacity).c_str(), 100 * s.pool_fragmentation,
              s.pool_locked ? "pinned" : "not pinned", (", " + PoolPages(s)).c_str());
  if (s.pool_prefault_threads)
    std::printf(", faulted in at open in %.2f s by %u thread(s)", s.pool_prefault_seconds,
                s.pool_prefault_threads);
  std::printf("\n");
  std::printf("disk: %s in %llu segment(s), quota %s\n", HumanBytes(disk.used).c_str(),
              (unsigned long long)s.segments, HumanBytes(disk.capacity).c_str());
  std::printf("keydir: %llu entries, %llu of them compact rows (idle, on disk only)\n",
              (unsigned long long)s.keydir_entries, (unsigned long long)s.keydir_compact_rows);
  std::printf("transport: %s\n", transport.c_str());
}

Progress::Progress(std::string what, std::string unit, bool enabled)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      on_(enabled && isatty(2)),
      start_(std::chrono::steady_clock::now()) {}

void Progress::Update(uint64_t done, uint64_t total) {
  done_ = done, total_ = total;
  auto now = std::chrono::steady_clock::now();
  if (on_ && now - drawn_ >= std::chrono::milliseconds(100)) {
    drawn_ = now;
    Draw();
  }
}

void Progress::Draw() {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string of = total_ ? "/" + std::to_string(total_) : "";
  std::fprintf(stderr, "\r%s: %llu%s %s, %.1f/s", what_.c_str(), (unsigned long long)done_,
               of.c_str(), unit_.c_str(), secs > 0 ? static_cast<double>(done_) / secs : 0.0);
}

void Progress::Done() {
  if (!on_ || done_ == 0) return;
  Draw();
  std::fprintf(stderr, "\n");
}

void ReportSkipped(const std::vector<std::string>& skipped) {
  for (const std::string& why : skipped)
    std::fprintf(stderr, "ec-store: skipped %s\n", why.c_str());
}

}  // namespace ecstore::cli
