// What the block device did while a workload ran: the process's bytes read and written
// (/proc/self/io) and how long the device that holds a directory had I/O in flight
// (/proc/diskstats' io_ticks). A pass whose device was busy nearly all its wall time is bound
// by the disk: only moving fewer bytes makes it faster.
// Thread rules: pure functions over /proc; call from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ecstore::bench {

struct DiskCounters {
  uint64_t read_bytes = 0, written_bytes = 0;  // this process's, through the block layer
  std::optional<uint64_t> busy_ms;             // the device's io_ticks; none when not found
};

// Samples the counters for the device that holds `dir`.
DiskCounters SampleDisk(const std::string& dir);

// Fraction of `secs` the device was busy between two samples; negative when unknown.
double BusyFraction(const DiskCounters& before, const DiskCounters& after, double secs);

}  // namespace ecstore::bench
