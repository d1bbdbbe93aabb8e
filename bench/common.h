// What every workload of ec-store-bench shares: the run's settings (Config), the entry mix
// and its payloads, timing, and opening a store as the workloads do.
// Thread rules: Config and Payloads belong to the bench's main thread; Progress, Die and the
// pure helpers may be called from any thread (a workload's second thread included).
#pragma once
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor_meta.h"
#include "base/units.h"
#include "net/client.h"
#include "store/store.h"

namespace ecstore::bench {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t);

struct Latencies {
  std::vector<double> us;
  void Add(Clock::time_point start) { us.push_back(Since(start) * 1e6); }
  double P(double q) {
    if (us.empty()) return 0;
    std::sort(us.begin(), us.end());
    return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))];
  }
};

// The command line, parsed (bench_main.cc).
struct Config {
  std::string dir = "./bench-out/store";
  std::string json_path, png_path;
  bool quick = false;
  std::set<std::string> workloads;
  std::string rdma_addr = "10.0.0.1";  // the Soft-RoCE guest's rxe0 address
  std::vector<uint64_t> index_sizes;   // --index-entries: the index workload's store sizes
  std::string policy;                  // --policy: Options::eviction_policy ("" = the default)
  double high_watermark = 0, low_watermark = 0;  // --watermarks H,L (0: the defaults)
  int drift_every = 0, drift_step = -1;  // --drift EVERY,STEP for the policy traces (0: defaults)
  // `rdma` runs only when asked for: it needs an RDMA device (or the Soft-RoCE VM).
  bool Want(const std::string& w) const {
    // rdma needs a device; fleet and etcd_fleet run for minutes: only when named.
    return workloads.empty() ? w != "rdma" && w != "fleet" && w != "etcd_fleet"
                             : workloads.count(w) > 0;
  }
};

// One line on stderr, overwritten by the next: what the bench is doing now.
void Progress(const std::string& msg);
// Exits the bench (status 1) with `what` and the status, unless it is ok.
void Die(const Status& st, const char* what);
// The value, or Die.
template <typename T>
T Must(Result<T> r, const char* what) {
  Die(r.status(), what);
  return std::move(r).value();
}

// The design's entry mix (design.md / vllm-ec-connector.md): Qwen2.5-VL-7B 560px and 1344px,
// Qwen3-VL-8B 560px and 1344px, with their weights.
struct Shape {
  int rows, width;
  double weight;
};
inline constexpr Shape kShapes[] = {
    {400, 3584, 0.4}, {324, 16384, 0.3}, {2304, 3584, 0.2}, {1764, 16384, 0.1}};

// A shape index drawn with the mix's weights.
int PickShape(std::mt19937_64& rng);
std::vector<uint8_t> Embedding(size_t elems, uint64_t seed);

// One embedding per shape, made once; an entry's payload is its shape's with the entry's
// number stamped into the first bytes.
class Payloads {
 public:
  Payloads();
  // A distinct entry's bytes; valid until the next Get of the same shape.
  std::span<const uint8_t> Get(int shape, uint64_t key);
  static TensorMeta Meta(int shape) {
    return {DType::kBF16, {kShapes[shape].rows, kShapes[shape].width}};
  }

 private:
  std::vector<std::vector<uint8_t>> base_;
};

std::string Key(uint64_t i);  // 64 hex chars, like vLLM's mm_hash

struct Entry {
  std::string key;
  int shape;
};
// Entries of the mix, drawn with `seed`, until they hold target_bytes.
std::vector<Entry> MakeEntries(uint64_t target_bytes, uint64_t seed);
uint64_t Bytes(const Entry& e);

// A store as the workloads open it: a pool of `pool` bytes, a 64 GiB disk quota, 1 GiB
// segments, and the command line's policy and watermarks. Exits the bench if it cannot.
std::unique_ptr<Store> OpenStore(const Config& cfg, const std::string& dir, uint64_t pool,
                                 bool promote = true);

// `ec-store` (beside this binary) run with `args` -- e.g. a serve -- as a child process; its
// pid once it has printed its first line (serve: listening), or -1. Stop it with SIGTERM.
pid_t StartEcStore(const std::vector<std::string>& args);

// `ec-store serve` on this host over a fresh `dir`, its pool `pool` bytes, its disk quota and
// policy as OpenStore's, with a client connected through its unix socket (shared memory).
// Stopped (SIGTERM, a clean close) and `dir` removed on destruction. client() is null where
// it did not start; why() then says so.
class Daemon {
 public:
  // `ec-store serve` on `dir` with a pool of `pool` bytes. fresh: `dir` is emptied first and
  // removed at the end; else the store there is served and left as it was made.
  Daemon(const Config& cfg, std::string dir, uint64_t pool, bool fresh = true);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  net::Client* client() const { return client_.get(); }
  const std::string& why() const { return why_; }
  // Another client of the daemon (a scheduler's, beside the worker's client()).
  Result<std::unique_ptr<net::Client>> Connect() const;
  // "N misses, pool hits H, disk hits D": the pass's misses and the daemon's hit counts.
  std::string Tally(uint64_t misses) const;

 private:
  std::string dir_, why_;
  bool fresh_;
  pid_t pid_ = -1;
  std::unique_ptr<net::Client> client_;
};

// Ranks 0..n-1 drawn with probability ~ 1/(rank+1)^s.
class Zipf {
 public:
  Zipf(size_t n, double s);
  size_t operator()(std::mt19937_64& rng) const;

 private:
  std::vector<double> cdf_;
};

}  // namespace ecstore::bench
