// fio as a second, independent disk limit: the same sequential O_DIRECT transfer (io_uring,
// 1 MiB requests, 32 deep, the bench's directory) done by the tool the field trusts, so the
// bench's own probe (which runs through the store's IoService) is checked, not taken on
// faith. Absent fio, the bench says so and reports its probe alone.
// Thread rules: pure functions (each call runs one fio process and waits for it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ecstore::bench {

struct FioResult {
  double gbps = 0;
  double p50_us = 0, p99_us = 0;  // completion latency of one 1 MiB request
};

// Writes (write=true, with an fsync at the end) or reads `bytes` of `path`. nullopt with
// *why when fio is not installed or fails.
std::optional<FioResult> RunFio(const std::string& path, bool write, uint64_t bytes,
                                std::string* why);

}  // namespace ecstore::bench
