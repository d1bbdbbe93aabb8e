#include "bench/fio.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace ecstore::bench {

std::optional<FioResult> RunFio(const std::string& path, bool write, uint64_t bytes,
                                std::string* why) {
  if (std::system("command -v fio >/dev/null 2>&1") != 0) {
    *why = "fio is not installed (scripts/install-deps.sh installs it)";
    return std::nullopt;
  }
  const std::string cmd =
      "fio --name=limit --filename='" + path +
      "' --rw=" + (write ? "write --end_fsync=1" : "read") +
      " --bs=1M --iodepth=32 --ioengine=io_uring --direct=1 --size=" + std::to_string(bytes) +
      " --output-format=json 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    *why = "could not start fio";
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  auto j = nlohmann::json::parse(out.substr(std::min(out.find('{'), out.size())), nullptr, false);
  if (rc != 0 || j.is_discarded() || !j.contains("jobs") || j["jobs"].empty()) {
    *why = "fio failed (exit " + std::to_string(rc) + "): " + out.substr(0, 200);
    return std::nullopt;
  }
  const auto& side = j["jobs"][0][write ? "write" : "read"];
  FioResult r;
  r.gbps = side["bw_bytes"].get<double>() / 1e9;
  const auto& pct = side["clat_ns"]["percentile"];
  r.p50_us = pct.value("50.000000", 0.0) / 1e3;
  r.p99_us = pct.value("99.000000", 0.0) / 1e3;
  return r;
}

}  // namespace ecstore::bench
