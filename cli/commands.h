// The `ec-store` command line: inspects, fills and evicts a store directory.
// Thread rules: single-threaded; Run owns the Store it opens.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace ecstore::cli {

int Run(int argc, char** argv);
// "256MiB", "4GiB", "1.5G", "4096" -> bytes.
Result<uint64_t> ParseSize(const std::string& text);
// "90s", "15m", "2h", "7d" -> microseconds.
Result<uint64_t> ParseDuration(const std::string& text);

}  // namespace ecstore::cli
