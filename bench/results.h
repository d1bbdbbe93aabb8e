// The bench's results: every row the workloads add, the limit each row is held to, and the
// report made of them (the table on stdout, JSON, a chart).
// Thread rules: not synchronized; rows are added and reported from the bench's main thread.
#pragma once

#include <cstdint>
#include <string>

#include "bench/common.h"

namespace ecstore::bench {

struct Record {
  std::string workload, system;
  double gbps = 0, ops_per_s = 0, p50_us = 0, p99_us = 0;
  double fragmentation = -1;
  std::string note;
};

Record& Add(Record r);
// The first row of (workload, system), or nullptr.
Record* Find(const std::string& workload, const std::string& system);
// Holds the row (workload, system) to another limit than its workload's: the "limit" row of
// `limit_workload`.
void HoldToLimit(const std::string& workload, const std::string& system,
                 const std::string& limit_workload);

// Reads timed one by one: their bytes, seconds and latencies, reported as a row.
struct TimedReads {
  uint64_t bytes = 0, count = 0;
  double secs = 0;
  Latencies lat;
  void Add(Clock::time_point start, uint64_t n) {
    secs += Since(start);
    lat.Add(start);
    bytes += n;
    ++count;
  }
  void Report(const char* workload, const char* system, const std::string& note) {
    if (count > 0)
      ::ecstore::bench::Add(
          {workload, system, bytes / secs / 1e9, count / secs, lat.P(0.5), lat.P(0.99), -1, note});
  }
};

// A limit measured before and after the workloads becomes one row: the faster run, with both
// in the note.
void MergeRepeatedLimits();
// The table on stdout, each row with its ratios to its limit and to the baseline; the JSON
// and the chart where cfg asks for them.
void Report(const Config& cfg);

}  // namespace ecstore::bench
