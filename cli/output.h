// What the `ec-store` commands print: tables for people, JSON for scripts, and the error
// type commands throw. Thread rules: single-threaded (writes to stdout/stderr).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/status.h"
#include "cache/cache.h"

namespace ecstore::cli {

// A failed command: Run prints it (with flag hints) and exits 1.
class CliError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void Check(const Status& st) {
  if (!st.ok()) throw CliError(st.ToString());
}
template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) throw CliError(r.status().ToString());
  return std::move(r).value();
}

std::string HumanBytes(uint64_t n);
// "huge pages", "4 KiB pages" or "huge pages for 63 % of it": what the kernel granted.
std::string PoolPages(const StoreStats& s);
std::string TimeString(uint64_t us);  // "2026-11-22T08:00:00Z"
nlohmann::json InfoJson(const EntryInfo& e);
// Keys are shortened to 17 characters and "..." unless `full_keys`.
// nodes (through a cluster): each row's node, shown in a NODE column.
void PrintInfoTable(const std::vector<EntryInfo>& rows, bool full_keys,
                    const std::vector<std::string>* nodes = nullptr);
void PrintInfo(const EntryInfo& info);  // `inspect`'s text form
// One stats writer for a local store and a server: the same fields, plus the transport.
// `extra`: more fields of the JSON object (a JSON object's text).
void PrintStats(const StoreStats& s, const std::string& transport, bool as_json, int indent,
                const std::string& extra = "{}");
void ReportSkipped(const std::vector<std::string>& skipped);

// A progress line on stderr -- "verify: 120/400 entries, 85.3/s" -- drawn only when enabled
// and stderr is a terminal, at most ten times a second; Done ends the line with the totals.
class Progress {
 public:
  Progress(std::string what, std::string unit, bool enabled);
  void Update(uint64_t done, uint64_t total = 0);
  void Done();

 private:
  void Draw();
  std::string what_, unit_;
  bool on_;
  uint64_t done_ = 0, total_ = 0;
  std::chrono::steady_clock::time_point start_, drawn_{};
};

}  // namespace ecstore::cli
