// Flag values of the `ec-store` command line, and the flag names its errors point at.
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace ecstore::cli {

// "256MiB", "4GiB", "1.5G", "4096" -> bytes.
Result<uint64_t> ParseSize(const std::string& text);
// "250ms", "90s", "15m", "2h", "7d" -> microseconds.
Result<uint64_t> ParseDuration(const std::string& text);
// The candidate closest to `word` (a misspelling: at most two edits, or a prefix of it), or
// "" when none is close.
std::string ClosestOf(const std::string& word, const std::vector<std::string>& candidates);
// The library's errors speak of Options fields and library terms; on the command line the
// same advice names the flag.
std::string WithFlagHints(std::string msg);

}  // namespace ecstore::cli
