#include "bench/disk_stats.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <sstream>

namespace ecstore::bench {
namespace {

uint64_t ProcSelfIo(const std::string& which) {
  std::ifstream in("/proc/self/io");
  std::string name;
  uint64_t v = 0;
  while (in >> name >> v)
    if (name == which) return v;
  return 0;
}

// io_ticks (the 10th statistic after the name) of the device numbered major:minor.
std::optional<uint64_t> IoTicks(unsigned major_no, unsigned minor_no) {
  std::ifstream in("/proc/diskstats");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    unsigned ma = 0, mi = 0;
    std::string name;
    uint64_t v[10] = {};
    if (!(f >> ma >> mi >> name)) continue;
    for (uint64_t& x : v) f >> x;
    if (f && ma == major_no && mi == minor_no) return v[9];
  }
  return std::nullopt;
}

}  // namespace

DiskCounters SampleDisk(const std::string& dir) {
  DiskCounters c;
  c.read_bytes = ProcSelfIo("read_bytes:");
  c.written_bytes = ProcSelfIo("write_bytes:");
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) c.busy_ms = IoTicks(major(st.st_dev), minor(st.st_dev));
  return c;
}

double BusyFraction(const DiskCounters& before, const DiskCounters& after, double secs) {
  if (!before.busy_ms || !after.busy_ms || secs <= 0) return -1;
  return static_cast<double>(*after.busy_ms - *before.busy_ms) / 1e3 / secs;
}

}  // namespace ecstore::bench
