// What the `ec-store` commands print: tables for people, JSON for scripts, and the error
// type commands throw. Thread rules: single-threaded (writes to stdout/stderr).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/cache.h"

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
std::string TimeString(uint64_t us);  // "2026-11-22T08:00:00Z"
nlohmann::json InfoJson(const EntryInfo& e);
void PrintInfoTable(const std::vector<EntryInfo>& rows);
void PrintInfo(const EntryInfo& info);  // `inspect`'s text form
// One stats writer for a local store and a server: the same fields, plus the transport.
void PrintStats(const StoreStats& s, const std::string& transport, bool as_json);
void ReportSkipped(const std::vector<std::string>& skipped);

}  // namespace ecstore::cli
