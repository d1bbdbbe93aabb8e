// ec-store-bench: named workloads in the manner of LevelDB's db_bench. Every figure is
// reported as a ratio to the machine's own limits (memcpy, raw O_DIRECT disk) and to the
// file-based baseline, measured in the same run.
//   ec-store-bench [--quick] [--workloads put,get_hot,...] [--dir D] [--json F] [--png F]
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "bench/results.h"
#include "bench/workloads.h"

namespace ecstore::bench {
namespace {

[[noreturn]] void Usage(int status) {
  std::fprintf(
      stderr,
      "usage: ec-store-bench [--quick] [--workloads put,get_hot,get_disk,spill,mixed,erase,"
      "mixed_gpu,remote,tls,conns,rdma,device,device_step,device_peer,policy,index,alloc,cluster,"
      "fleet,etcd_fleet,events] "
      "[--rdma-addr IP] [--dir "
      "DIR] "
      "[--json FILE] "
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

using Setter = std::function<void(const std::string& value, Config* cfg)>;

// The flags that take a value, each with what it sets (a bad value exits with status 2).
const std::map<std::string, Setter>& ValueFlags() {
  static const std::map<std::string, Setter> flags = {
      {"--dir", [](const std::string& v, Config* c) { c->dir = v; }},
      {"--json", [](const std::string& v, Config* c) { c->json_path = v; }},
      {"--png", [](const std::string& v, Config* c) { c->png_path = v; }},
      {"--rdma-addr", [](const std::string& v, Config* c) { c->rdma_addr = v; }},
      {"--policy", [](const std::string& v, Config* c) { c->policy = v; }},
      {"--watermarks",
       [](const std::string& v, Config* c) {
         double &h = c->high_watermark, &l = c->low_watermark;
         if (std::sscanf(v.c_str(), "%lf,%lf", &h, &l) != 2 || !(l > 0 && l < h && h <= 1))
           BadValue("--watermarks", "HIGH,LOW with 0 < LOW < HIGH <= 1", v);
       }},
      {"--drift",
       [](const std::string& v, Config* c) {
         if (std::sscanf(v.c_str(), "%d,%d", &c->drift_every, &c->drift_step) != 2 ||
             c->drift_every < 1 || c->drift_step < 0)
           BadValue("--drift",
                    "EVERY,STEP (the policy trace's top ranks shift by STEP every EVERY "
                    "requests; EVERY >= 1, STEP >= 0)",
                    v);
       }},
      {"--index-entries",
       [](const std::string& v, Config* c) {
         for (const std::string& n : SplitCommas(v)) {
           char* end = nullptr;
           const unsigned long long x = std::strtoull(n.c_str(), &end, 10);
           if (n.empty() || *end != '\0' || x == 0)
             BadValue("--index-entries", "N,N,... (N >= 1)", v);
           c->index_sizes.push_back(x);
         }
       }},
      {"--workloads",
       [](const std::string& v, Config* c) {
         for (const std::string& w : SplitCommas(v)) c->workloads.insert(w);
       }},
  };
  return flags;
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
    auto flag = ValueFlags().find(a);
    if (flag == ValueFlags().end()) Usage(2);
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ec-store-bench: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    flag->second(argv[++i], &cfg);
  }
  const std::set<std::string> known = {
      "put",    "get_hot", "get_disk", "spill",      "mixed",     "remote",      "rdma",
      "device", "policy",  "index",    "alloc",      "mixed_gpu", "erase",       "cluster",
      "tls",    "conns",   "fleet",    "etcd_fleet", "events",    "device_step", "device_peer"};
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
  if (cfg.Want("mixed_gpu")) MixedGpuWorkload(cfg, pl);
  if (cfg.Want("remote")) RemoteWorkload(cfg, pl);
  if (cfg.Want("tls")) TlsWorkload(cfg, pl);
  if (cfg.Want("conns")) ConnsWorkload(cfg, pl);
  if (cfg.Want("rdma")) RdmaWorkload(cfg, pl);
  if (cfg.Want("device")) DeviceWorkload(cfg, pl);
  if (cfg.Want("device_step")) DeviceStepWorkload(cfg);
  if (cfg.Want("device_peer")) DevicePeerWorkload(cfg);
  if (cfg.Want("policy")) PolicyWorkload(cfg);
  if (cfg.Want("cluster")) {
    ClusterWorkload(cfg);
    ClusterLiveWorkload(cfg);
  }
  if (cfg.Want("fleet")) FleetWorkload(cfg);
  if (cfg.Want("etcd_fleet")) EtcdFleetWorkload(cfg);
  if (cfg.Want("index")) IndexWorkload(cfg);
  if (cfg.Want("alloc")) AllocWorkload(cfg);
  if (cfg.Want("erase")) EraseWorkload(cfg);
  if (cfg.Want("events")) EventsWorkload(cfg, pl);
  if (cfg.Want("get_disk") || cfg.Want("spill")) MeasureDisk(cfg);  // again: the disk drifts
  MergeRepeatedLimits();
  Report(cfg);
  std::filesystem::remove_all(cfg.dir);
  return 0;
}
