// Sizes and durations as people write them, parsed one way for the CLI, its config file and
// the Python package alike.
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace ecstore {

inline constexpr uint64_t kKiB = 1ull << 10;
inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;

// "256MiB", "4GiB", "1.5G", "2gb", "4096" -> bytes. KiB..TiB and K..T are binary (1024),
// KB..TB decimal (1000), as the help says. Plain decimals only (no sign, exponent, hex or
// spaces), at most 1 EiB; the error says how to write one.
Result<uint64_t> ParseSize(const std::string& text);
// "250ms", "90s", "15m", "2h", "7d" (a bare number is seconds) -> microseconds.
Result<uint64_t> ParseDuration(const std::string& text);

}  // namespace ecstore
