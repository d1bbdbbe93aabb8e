// Flag values of the `ec-store` command line, and the flag names its errors point at.
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"

namespace ecstore::cli {

using ecstore::ParseDuration;  // base/units.h
using ecstore::ParseSize;
// The candidate closest to `word` (a misspelling: at most two edits, or a prefix of it), or
// "" when none is close.
std::string ClosestOf(const std::string& word, const std::vector<std::string>& candidates);
// The library's errors speak of Options fields and library terms; on the command line the
// same advice names the flag.
std::string WithFlagHints(std::string msg);

}  // namespace ecstore::cli
