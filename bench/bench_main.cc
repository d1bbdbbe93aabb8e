// ec-store-bench: named workloads in the manner of LevelDB's db_bench. Every figure is
// reported as a ratio to the machine's own limits (memcpy, raw O_DIRECT disk) and to the
// file-based baseline, measured in the same run.
//   ec-store-bench [--quick] [--workloads put,get_hot,...] [--dir D] [--json F] [--png F]
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "bench/results.h"
#include "bench/workloads.h"

namespace ecstore::bench {
namespace {

[[noreturn]] void Usage(int status) {
  std::fprintf(stderr,
               "usage: ec-store-bench [--quick] [--workloads put,get_hot,get_disk,spill,mixed,"
               "remote,rdma,device,policy,index,alloc] [--rdma-addr IP] [--dir DIR] [--json FILE] "
               "[--png FILE] [--index-entries N,N,...] [--policy freq|lru|gdsf] [--watermarks H,L] "
               "[--drift EVERY,STEP]\n");
  std::exit(status);
}

[[noreturn]] void BadValue(const char* flag, const char* wants, const std::string& v) {
  std::fprintf(stderr, "ec-store-bench: %s wants %s, not '%s'\n", flag, wants, v.c_str());
  std::exit(2);
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  for (size_t p = 0; p <= s.size();) {
    size_t e = std::min(s.find(',', p), s.size());
    out.push_back(s.substr(p, e - p));
    p = e + 1;
  }
  return out;
}

// One of the flags that take a value (ParseArgs knows which).
void ParseValue(const std::string& a, const std::string& v, Config* cfg) {
  if (a == "--dir") {
    cfg->dir = v;
  } else if (a == "--json") {
    cfg->json_path = v;
  } else if (a == "--png") {
    cfg->png_path = v;
  } else if (a == "--rdma-addr") {
    cfg->rdma_addr = v;
  } else if (a == "--policy") {
    cfg->policy = v;
  } else if (a == "--watermarks") {
    double& h = cfg->high_watermark;
    double& l = cfg->low_watermark;
    if (std::sscanf(v.c_str(), "%lf,%lf", &h, &l) != 2 || !(l > 0 && l < h && h <= 1))
      BadValue("--watermarks", "HIGH,LOW with 0 < LOW < HIGH <= 1", v);
  } else if (a == "--drift") {
    if (std::sscanf(v.c_str(), "%d,%d", &cfg->drift_every, &cfg->drift_step) != 2 ||
        cfg->drift_every < 1 || cfg->drift_step < 0)
      BadValue("--drift",
               "EVERY,STEP (the policy trace's top ranks shift by STEP every EVERY requests; "
               "EVERY >= 1, STEP >= 0)",
               v);
  } else if (a == "--index-entries") {
    for (const std::string& n : SplitCommas(v)) {
      char* end = nullptr;
      const unsigned long long x = std::strtoull(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || x == 0) BadValue("--index-entries", "N,N,... (N >= 1)", v);
      cfg->index_sizes.push_back(x);
    }
  } else if (a == "--workloads") {
    for (const std::string& w : SplitCommas(v)) cfg->workloads.insert(w);
  }
}

Config ParseArgs(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      cfg.quick = true;
      continue;
    }
    if (a == "--help") Usage(0);
    static const std::set<std::string> kTakeValues = {
        "--dir",   "--json",       "--png",       "--rdma-addr",    "--policy",
        "--drift", "--watermarks", "--workloads", "--index-entries"};
    if (!kTakeValues.count(a)) Usage(2);
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ec-store-bench: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    ParseValue(a, argv[i + 1], &cfg);
    ++i;
  }
  const std::set<std::string> known = {"put",  "get_hot", "get_disk", "spill", "mixed", "remote",
                                       "rdma", "device",  "policy",   "index", "alloc"};
  for (auto& w : cfg.workloads)
    if (!known.count(w)) {
      std::fprintf(stderr, "ec-store-bench: unknown workload '%s'\n", w.c_str());
      std::exit(2);
    }
  return cfg;
}

}  // namespace
}  // namespace ecstore::bench

int main(int argc, char** argv) {
  using namespace ecstore::bench;
  const Config cfg = ParseArgs(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  MeasureMemcpy(cfg);
  if (cfg.Want("get_disk") || cfg.Want("spill")) MeasureDisk(cfg);
  Payloads pl;
  if (cfg.Want("put") || cfg.Want("get_hot") || cfg.Want("get_disk")) HotAndDiskWorkloads(cfg, pl);
  if (cfg.Want("spill")) SpillWorkload(cfg, pl);
  if (cfg.Want("mixed")) MixedWorkload(cfg, pl);
  if (cfg.Want("remote")) RemoteWorkload(cfg, pl);
  if (cfg.Want("rdma")) RdmaWorkload(cfg, pl);
  if (cfg.Want("device")) DeviceWorkload(cfg, pl);
  if (cfg.Want("policy")) PolicyWorkload(cfg);
  if (cfg.Want("index")) IndexWorkload(cfg);
  if (cfg.Want("alloc")) AllocWorkload(cfg);
  if (cfg.Want("get_disk") || cfg.Want("spill")) MeasureDisk(cfg);  // again: the disk drifts
  MergeRepeatedLimits();
  Report(cfg);
  std::filesystem::remove_all(cfg.dir);
  return 0;
}
