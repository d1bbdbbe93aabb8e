// ec-store-bench: named workloads in the manner of LevelDB's db_bench. Every figure is
// reported as a ratio to the machine's own limits (memcpy, raw O_DIRECT disk) and to the
// file-based baseline, measured in the same run.
//   ec-store-bench [--quick] [--workloads put,get_hot,...] [--dir D] [--json F] [--png F]
#include <fcntl.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/embedding.h"
#include "bench/baseline.h"
#include "bench/device.h"
#include "bench/disk_stats.h"
#include "bench/fio.h"
#include "bench/pinned_buffer.h"
#include "bench/policy.h"
#include "bench/record_probe.h"
#include "bench/ref_allocators.h"
#include "bench/remote.h"
#include "disk/aligned_buffer.h"
#include "disk/io_queue.h"
#include "index/index.h"
#include "net/client.h"
#include "net/server.h"
#include "rdma/verbs.h"
#include "store/pool_allocator.h"
#include "store/store.h"

namespace ecstore::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Record {
  std::string workload, system;
  double gbps = 0, ops_per_s = 0, p50_us = 0, p99_us = 0;
  double fragmentation = -1;
  std::string note;
};
// Rows held to another limit than their workload's: (workload, system) -> the limit's workload.
std::map<std::pair<std::string, std::string>, std::string> g_row_limit;

struct Latencies {
  std::vector<double> us;
  void Add(Clock::time_point start) { us.push_back(Since(start) * 1e6); }
  double P(double q) {
    if (us.empty()) return 0;
    std::sort(us.begin(), us.end());
    return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))];
  }
};

struct Config {
  std::string dir = "./bench-out/store";
  std::string json_path, png_path;
  bool quick = false;
  std::set<std::string> workloads;
  std::string rdma_addr = "10.0.0.1";  // the Soft-RoCE guest's rxe0 address
  std::vector<uint64_t> index_sizes;   // --index-entries: the index workload's store sizes
  // `rdma` runs only when asked for: it needs an RDMA device (or the Soft-RoCE VM).
  bool Want(const std::string& w) const {
    return workloads.empty() ? w != "rdma" : workloads.count(w) > 0;
  }
};

std::vector<Record> g_records;
std::string g_policy;  // --policy: the stores' Options::eviction_policy ("" = the default)
double g_high_watermark = 0, g_low_watermark = 0;  // --watermarks H,L (0: the defaults)
int g_drift_every = 0,
    g_drift_step = -1;  // --drift EVERY,STEP for the policy traces (unset: defaults)
Clock::time_point g_start = Clock::now();

void Progress(const std::string& msg) {
  std::fprintf(stderr, "\r[bench %5.1fs] %-60s", Since(g_start), msg.c_str());
  std::fflush(stderr);
}

Record& Add(Record r) {
  g_records.push_back(std::move(r));
  return g_records.back();
}

Record* Find(const std::string& workload, const std::string& system) {
  for (auto& r : g_records)
    if (r.workload == workload && r.system == system) return &r;
  return nullptr;
}

// --------------------------------------------------------------- payloads

struct Shape {
  int rows, width;
  double weight;
};
// design.md / vllm-ec-connector.md: Qwen2.5-VL-7B 560px and 1344px, Qwen3-VL-8B 560px and 1344px.
const Shape kShapes[] = {
    {400, 3584, 0.4}, {324, 16384, 0.3}, {2304, 3584, 0.2}, {1764, 16384, 0.1}};

std::vector<uint8_t> Embedding(size_t elems, uint64_t seed) {
  return SyntheticEmbedding(elems, seed, 0.8f);
}

// A shape index drawn with the mix's weights.
int PickShape(std::mt19937_64& rng) {
  double x = std::uniform_real_distribution<double>(0, 1)(rng), acc = 0;
  for (int s = 0; s < 4; ++s)
    if ((acc += kShapes[s].weight) >= x) return s;
  return 3;
}

class Payloads {
 public:
  Payloads() {
    for (int s = 0; s < 4; ++s)
      base_.push_back(Embedding(static_cast<size_t>(kShapes[s].rows) * kShapes[s].width, 7 + s));
  }
  // A distinct entry: the shape's embedding with the key stamped into its first bytes.
  std::span<const uint8_t> Get(int shape, uint64_t key) {
    auto& b = base_[static_cast<size_t>(shape)];
    std::memcpy(b.data(), &key, 8);
    return {b.data(), b.size()};
  }
  static TensorMeta Meta(int shape) {
    return {DType::kBF16, {kShapes[shape].rows, kShapes[shape].width}};
  }

 private:
  std::vector<std::vector<uint8_t>> base_;
};

std::string Key(uint64_t i) {
  char buf[72];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx%016llx%016llx",
                (unsigned long long)(i * 0x9E3779B97F4A7C15ull), (unsigned long long)i,
                (unsigned long long)(~i), (unsigned long long)(i * 31));
  return buf;  // 64 hex chars, like vLLM's mm_hash
}

std::unique_ptr<Store> OpenStore(const std::string& dir, uint64_t pool, bool promote = true) {
  Options o;
  o.pool_bytes = pool;
  o.disk_quota_bytes = 64 * kGiB;
  o.promote_on_get = promote;
  o.segment_bytes = 1 * kGiB;
  if (!g_policy.empty()) o.eviction_policy = g_policy;
  if (g_high_watermark > 0) o.high_watermark = g_high_watermark, o.low_watermark = g_low_watermark;
  auto s = Store::Open(dir, o);
  if (!s.ok()) {
    std::fprintf(stderr, "\nbench: cannot open store: %s\n", s.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(s).value();
}

void Die(const Status& st, const char* what) {
  if (st.ok()) return;
  std::fprintf(stderr, "\nbench: %s: %s\n", what, st.ToString().c_str());
  std::exit(1);
}

// --------------------------------------------------------------- limits

void MeasureMemcpy(const Config& cfg) {
  Progress("limit: single-thread memcpy");
  const size_t n = 64 * kMiB;
  std::vector<uint8_t> a(n, 1), b(n, 2);
  int reps = cfg.quick ? 16 : 48;
  std::memcpy(b.data(), a.data(), n);
  Latencies lat;
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    auto t = Clock::now();
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), n);
    lat.Add(t);
  }
  double secs = Since(t0);
  Add({"memcpy", "limit", n * reps / secs / 1e9, reps / secs, lat.P(0.5), lat.P(0.99), -1,
       "64 MiB buffers"});
}

void MeasureDisk(const Config& cfg) {
  Progress("limit: raw O_DIRECT disk write/read (io_uring, QD32, 1 MiB)");
  std::filesystem::create_directories(cfg.dir);
  std::string path = cfg.dir + "/raw-disk-probe";
  auto fd = Env::Default()->OpenFile(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  Die(fd.status(), "open probe");
  auto io = IoService::Start(Env::Default(), 32, kMiB);  // the store's depth and chunk
  Die(io.status(), "io_uring");
  const uint64_t total = cfg.quick ? 1 * kGiB : 4 * kGiB, req = 64 * kMiB;
  // Preallocated, as the store's segments are (and as fio lays out its file): writes that
  // extend a file are a different, slower operation on ext4.
  Die(Env::Default()->Preallocate(fd->get(), total), "preallocate probe");
  PinnedBuffer buf(req);  // the pool's kind of memory, as the store's reads and writes use
  auto e = Embedding(req / 2, 99);
  std::memcpy(buf.data(), e.data(), req);
  auto run = [&](IoOp op) {
    Latencies lat;
    auto t0 = Clock::now();
    for (uint64_t off = 0; off < total; off += req) {
      auto t = Clock::now();
      Die((*io)->Run({{op, fd->get(), buf.data(), req, off, 0}}), "raw io");
      lat.Add(t);
    }
    if (op == IoOp::kWrite) Die((*io)->Run({{IoOp::kSync, fd->get(), nullptr, 0, 0, 0}}), "sync");
    double secs = Since(t0);
    Add({op == IoOp::kWrite ? "disk_write" : "disk_read", "limit", total / secs / 1e9,
         total / req / secs, lat.P(0.5), lat.P(0.99), -1,
         "O_DIRECT sequential into a preallocated file, 64 MiB requests split 1 MiB x QD32, "
         "to and from pinned huge-page memory as the pool is"});
  };
  run(IoOp::kWrite);
  run(IoOp::kRead);
  std::filesystem::remove(path);
  // The same transfers by fio: a probe that reads low would flatter every ratio against it.
  for (bool write : {true, false}) {
    Progress(std::string("limit: fio ") + (write ? "write" : "read"));
    std::string why;
    auto f = RunFio(path, write, total, &why);
    const char* w = write ? "disk_write" : "disk_read";
    if (f)
      Add({w, "fio", f->gbps, f->gbps * 1e9 / kMiB, f->p50_us, f->p99_us, -1,
           "fio: O_DIRECT io_uring, 1 MiB x QD32, same directory; latency per 1 MiB request"});
    else if (!Find(w, "fio"))
      std::fprintf(stderr, "\nno fio limit: %s\n", why.c_str());
  }
  std::filesystem::remove(path);
}

// --------------------------------------------------------------- store workloads

struct Entry {
  std::string key;
  int shape;
};

std::vector<Entry> MakeEntries(uint64_t target_bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Entry> out;
  uint64_t total = 0;
  while (total < target_bytes) {
    int s = PickShape(rng);
    out.push_back({Key(seed * 1000000 + out.size()), s});
    total += 2ull * kShapes[s].rows * kShapes[s].width;
  }
  return out;
}

uint64_t Bytes(const Entry& e) { return 2ull * kShapes[e.shape].rows * kShapes[e.shape].width; }

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

// Another read of the same entry that each get is paired with, entry by entry: the raw read
// of the store's own record (RecordReadProbe), or the baseline's cold read of its file. This
// disk drifts by up to 2x within a run; reads of the same entry moments apart drift alike,
// and the median of their per-entry ratio does not drift at all.
struct Companion {
  // Does what must not be timed (dropping the baseline's cached pages), then returns the
  // time it started the timed read, which has ended when it returns.
  std::function<Clock::time_point(size_t i)> read;
  TimedReads all, large;
  std::vector<double> ratio;  // per entry of 10 MB or more: the companion's seconds / the get's
  std::string Paired(const char* against) const {
    if (ratio.empty()) return "";
    std::vector<double> r = ratio;
    std::sort(r.begin(), r.end());
    char buf[160];
    std::snprintf(buf, sizeof(buf), "; per entry against %s: p25 %.2fx, p50 %.2fx, p75 %.2fx",
                  against, r[r.size() / 4], r[r.size() / 2], r[r.size() * 3 / 4]);
    return buf;
  }
};

// Gets every entry once into dst; returns the seconds taken, each get's latency in *lat.
// With `large`, also the gets of entries of at least 10 MB. Each get is paired with each of
// `with` reading the same entry (not counted in the seconds returned), in an order that
// rotates from entry to entry, so none goes first throughout.
double TimeGets(Store* store, const std::vector<Entry>& entries, std::span<uint8_t> dst,
                Latencies* lat, TimedReads* large = nullptr,
                const std::vector<Companion*>& with = {}) {
  double secs = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const bool big = Bytes(e) >= 10'000'000;
    std::vector<double> took(with.size());
    double get_secs = 0;
    for (size_t k = 0; k <= with.size(); ++k) {
      const size_t who = (k + i) % (with.size() + 1);
      if (who < with.size()) {
        Companion& c = *with[who];
        auto t = c.read(i);
        took[who] = Since(t);
        c.all.Add(t, Bytes(e));
        if (big) c.large.Add(t, Bytes(e));
        continue;
      }
      auto t = Clock::now();
      auto got = store->Get("bench", e.key, dst);
      lat->Add(t);
      get_secs = Since(t);
      Die(got.status(), "get_disk");
      if (large && big) large->Add(t, Bytes(e));
    }
    secs += get_secs;
    if (big)
      for (size_t w = 0; w < with.size(); ++w) with[w]->ratio.push_back(took[w] / get_secs);
  }
  return secs;
}

// The same disk gets while another thread puts at full speed into a small pool, so the
// evictor spills batch after batch through the same I/O service. A get should not wait for
// a whole spill batch queued before it (compare its p50/p99 with get_disk's).
void GetDiskDuringSpill(Store* store, const std::vector<Entry>& entries, uint64_t total,
                        AlignedBuffer& dst, Payloads& pl) {
  Progress("get_disk during spill: ec-store");
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (size_t i = 0; !stop; ++i) {
      const int shape = static_cast<int>(i % 4);
      Status st = store->Put("spill", "s" + std::to_string(i % 64), Payloads::Meta(shape),
                             pl.Get(shape, i));
      if (!st.ok() && !st.IsBusy()) Die(st, "put during get_disk");
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let spills get going
  Latencies lat;
  double secs = TimeGets(store, entries, {dst.data(), dst.size()}, &lat);
  stop = true;
  writer.join();
  Add({"get_disk_during_spill", "ec-store", total / secs / 1e9, entries.size() / secs, lat.P(0.5),
       lat.P(0.99), -1, "the get_disk reads while another thread's puts spill continuously"});
}

// Memory mapped as the pool is (pinned, huge pages where there are any), pre-faulted, as
// large as a data set's entries and holding them back to back: where put's limit copies the
// payloads to, and get_hot's copies them from.
class PinnedEntries {
 public:
  explicit PinnedEntries(const std::vector<Entry>& entries) : mem_(Total(entries)) {
    uint64_t off = 0;
    for (const Entry& e : entries) at_.push_back(off), off += Bytes(e);
  }
  uint8_t* entry(size_t i) const { return mem_.data() + at_[i]; }

 private:
  static uint64_t Total(const std::vector<Entry>& entries) {
    uint64_t n = 0;
    for (const Entry& e : entries) n += Bytes(e);
    return n;
  }
  PinnedBuffer mem_;
  std::vector<uint64_t> at_;
};

// put, get_hot, get_disk share one data set: hot in a pool that holds it, then on disk.
void HotAndDiskWorkloads(const Config& cfg, Payloads& pl) {
  const uint64_t pool = cfg.quick ? 768 * kMiB : 2 * kGiB;
  std::string sdir = cfg.dir + "/hot", bdir = cfg.dir + "/baseline-hot";
  std::filesystem::remove_all(sdir);
  std::filesystem::remove_all(bdir);
  auto entries = MakeEntries(pool * 3 / 4, 1);
  uint64_t total = 0;
  for (auto& e : entries) total += Bytes(e);
  const int rounds = cfg.quick ? 3 : 8;
  FileBaseline base(bdir);
  std::optional<PinnedEntries> pinned;
  if (cfg.Want("put") || cfg.Want("get_hot")) pinned.emplace(entries);
  auto store = OpenStore(sdir, pool);

  // Hands each entry's payload (made outside the timing) to `put`, timed put by put; adds the
  // row of `workload` and `system`.
  auto time_puts = [&](const char* workload, const char* system, const char* note,
                       const std::function<void(size_t, std::span<const uint8_t>)>& put) {
    Latencies lat;
    double secs = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      auto bytes = pl.Get(entries[i].shape, i);
      auto t = Clock::now();
      put(i, bytes);
      lat.Add(t);
      secs += Since(t);
    }
    Add({workload, system, total / secs / 1e9, entries.size() / secs, lat.P(0.5), lat.P(0.99), -1,
         note});
  };
  if (cfg.Want("put")) {
    // The limit is the same copy done the simplest way: the same payloads, from the same
    // sources, in the same order, memcpy'd into pinned memory as large as the pool's contents
    // (put also checksums them, which this leaves out).
    Progress("limit: memcpy of put's payloads into pinned memory");
    time_puts("memcpy_puts", "limit",
              "memcpy of put's payloads (same sources, same order) into pinned memory, no checksum",
              [&](size_t i, std::span<const uint8_t> b) {
                std::memcpy(pinned->entry(i), b.data(), b.size());
              });
  }
  if (cfg.Want("put") || cfg.Want("get_hot") || cfg.Want("get_disk")) {
    Progress("put: ec-store");
    time_puts("put", "ec-store", "copy into the pinned pool + xxh3 checksum",
              [&](size_t i, std::span<const uint8_t> b) {
                Die(store->Put("bench", entries[i].key, Payloads::Meta(entries[i].shape), b),
                    "put");
              });
    Progress("put: baseline");
    time_puts("put", "baseline", "buffered write of a safetensors file, no fsync",
              [&](size_t i, std::span<const uint8_t> b) {
                Die(base.Save(entries[i].key, Payloads::Meta(entries[i].shape), b),
                    "baseline save");
              });
    ::sync();  // its dirty pages must not be written back during the next measurements
  }

  AlignedBuffer dst(60 * kMiB);
  std::memset(dst.data(), 0, dst.size());
  if (cfg.Want("get_hot")) {
    // The limit is the same work done the simplest way: the same entry sizes, in the same
    // order, memcpy'd from memory mapped as the pool is (pinned, huge pages where there are
    // any) and as large as its contents, into the same reused, pre-faulted destination.
    Progress("limit: memcpy of the same entries into the same destination");
    {
      Latencies mlat;
      auto m0 = Clock::now();
      for (int r = 0; r < rounds; ++r)
        for (size_t i = 0; i < entries.size(); ++i) {
          auto t = Clock::now();
          std::memcpy(dst.data(), pinned->entry(i), Bytes(entries[i]));
          mlat.Add(t);
        }
      double msecs = Since(m0);
      Add({"memcpy_entries", "limit", rounds * total / msecs / 1e9, rounds * entries.size() / msecs,
           mlat.P(0.5), mlat.P(0.99), -1,
           "memcpy of get_hot's entries (same sizes, same order) into the same destination"});
    }
    pinned.reset();
    Progress("get_hot: ec-store copy-out");
    Latencies lat;
    auto t0 = Clock::now();
    for (int r = 0; r < rounds; ++r)
      for (auto& e : entries) {
        auto t = Clock::now();
        auto got = store->Get("bench", e.key, {dst.data(), dst.size()});
        lat.Add(t);
        Die(got.status(), "get_hot");
      }
    double secs = Since(t0);
    Add({"get_hot", "ec-store", rounds * total / secs / 1e9, rounds * entries.size() / secs,
         lat.P(0.5), lat.P(0.99), -1, "pool hit copied into a caller buffer"});
    Progress("get_hot: ec-store lease");
    Latencies llat;
    volatile uint8_t sink = 0;
    t0 = Clock::now();
    for (int r = 0; r < rounds; ++r)
      for (auto& e : entries) {
        auto t = Clock::now();
        auto lease = store->Acquire("bench", e.key);
        Die(lease.status(), "lease");
        sink = sink + lease->data()[0];  // entry ready to use: pinned bytes, zero copies
        llat.Add(t);
      }
    secs = Since(t0);
    Add({"get_hot", "ec-store-lease", 0, rounds * entries.size() / secs, llat.P(0.5), llat.P(0.99),
         -1, "entry ready to use: read lease on pinned pool memory"});
    Progress("get_hot: baseline warm");
    std::vector<uint8_t> file;
    uint64_t off;
    TensorMeta meta;
    Latencies blat;
    t0 = Clock::now();
    for (int r = 0; r < rounds; ++r)
      for (auto& e : entries) {
        auto t = Clock::now();
        if (!base.Exists(e.key)) Die(Status::NotFound(e.key), "baseline exists");
        Die(base.Load(e.key, &file, &off, &meta), "baseline load");
        blat.Add(t);
      }
    secs = Since(t0);
    Add({"get_hot", "baseline", rounds * total / secs / 1e9, rounds * entries.size() / secs,
         blat.P(0.5), blat.P(0.99), -1, "stat + open + read + parse, page cache warm"});
    Progress("get_hot: baseline cold");
    Latencies clat;
    t0 = Clock::now();
    double io_secs = 0;
    for (auto& e : entries) {
      base.DropCache(e.key);
      auto t = Clock::now();
      Die(base.Load(e.key, &file, &off, &meta), "baseline load");
      clat.Add(t);
      io_secs += Since(t);
    }
    Add({"get_hot", "baseline-cold", total / io_secs / 1e9, entries.size() / io_secs, clat.P(0.5),
         clat.P(0.99), -1, "page cache dropped for its files (posix_fadvise DONTNEED)"});
  }

  if (cfg.Want("get_disk")) {
    Progress("get_disk: ec-store (persisting the pool, reopening with an empty pool)");
    Die(store->Close(), "close");
    store.reset();
    store = OpenStore(sdir, 256 * kMiB, /*promote=*/false);
    Latencies lat;
    TimedReads large;
    std::vector<std::string> keys;
    for (const Entry& e : entries) keys.push_back(e.key);
    auto probe = RecordReadProbe::Open(sdir, "bench", keys);
    Die(probe.status(), "find the entries' records");
    Companion raw, cold;
    PinnedBuffer landing(kBlockSize + RoundUpBlock(60 * kMiB));
    raw.read = [&](size_t i) {
      auto t = Clock::now();
      Die((*probe)->Read(i, {landing.data(), landing.size()}).status(),
          "raw read of an entry's record");
      return t;
    };
    std::vector<uint8_t> file;
    uint64_t off;
    TensorMeta meta;
    cold.read = [&](size_t i) {
      base.DropCache(entries[i].key);
      auto t = Clock::now();
      Die(base.Load(entries[i].key, &file, &off, &meta), "baseline load");
      return t;
    };
    double secs =
        TimeGets(store.get(), entries, {dst.data(), dst.size()}, &lat, &large, {&raw, &cold});
    const char* raw_note =
        "O_DIRECT read of the store's own record of each entry (the same blocks), one request, "
        "into pinned huge-page memory as the pool is, no checksum; paired with the store's gets";
    raw.all.Report("disk_read_entries", "limit", raw_note);
    raw.large.Report("disk_read_entries_10MB+", "limit", raw_note);
    Add({"get_disk", "ec-store", total / secs / 1e9, entries.size() / secs, lat.P(0.5), lat.P(0.99),
         -1,
         "O_DIRECT io_uring read, xxh3 fed each piece as it lands, page cache bypassed; vs the "
         "same records read raw"});
    g_row_limit[{"get_disk", "ec-store"}] = "disk_read_entries";
    // The same gets, only those of entries >= 10 MB (the target).
    large.Report("get_disk", "ec-store-10MB+",
                 "the gets above of entries of 10 MB or more, one at a time" +
                     raw.Paired("its record's raw read") + cold.Paired("the baseline's cold read"));
    g_row_limit[{"get_disk", "ec-store-10MB+"}] = "disk_read_entries_10MB+";
    cold.all.Report("get_disk", "baseline",
                    "cold: read after posix_fadvise DONTNEED, paired entry by entry with the "
                    "store's gets; vs the same records read raw");
    g_row_limit[{"get_disk", "baseline"}] = "disk_read_entries";
    {
      // The same gets into a HostBuffer (the pool's kind of memory, as an engine's staging
      // buffers can be), paired with the same raw reads: where the read lands is then alike.
      Progress("get_disk: ec-store into a HostBuffer");
      PinnedBuffer host_dst(60 * kMiB);
      Companion raw3;
      raw3.read = raw.read;
      Latencies hlat;
      double hsecs = TimeGets(store.get(), entries, host_dst.span(0, host_dst.size()), &hlat,
                              nullptr, {&raw3});
      Add({"get_disk", "ec-store-hostbuf", total / hsecs / 1e9, entries.size() / hsecs, hlat.P(0.5),
           hlat.P(0.99), -1,
           "the one-at-a-time gets again, into a HostBuffer (pinned huge pages, as the pool)" +
               raw3.Paired("its record's raw read")});
      raw3.all.Report("disk_read_entries_hostbuf", "limit",
                      "the raw reads again, paired with the gets into a HostBuffer");
      g_row_limit[{"get_disk", "ec-store-hostbuf"}] = "disk_read_entries_hostbuf";
    }
    GetDiskDuringSpill(store.get(), entries, total, dst, pl);
    {
      // The same gets with the store's defaults: each entry is promoted into the pool (its
      // O_DIRECT read lands in huge pages) and teed into dst as the pieces land.
      Progress("get_disk: ec-store, promoting into the pool");
      Die(store->Close(), "close");
      store.reset();
      store = OpenStore(sdir, 256 * kMiB);
      probe = RecordReadProbe::Open(sdir, "bench", keys);  // the spill phase may have compacted
      Die(probe.status(), "find the entries' records");
      Companion raw2;
      raw2.read = raw.read;
      Latencies plat;
      TimedReads plarge;
      double psecs =
          TimeGets(store.get(), entries, {dst.data(), dst.size()}, &plat, &plarge, {&raw2});
      Add({"get_disk", "ec-store-promote", total / psecs / 1e9, entries.size() / psecs, plat.P(0.5),
           plat.P(0.99), -1,
           "Options' default: promoted into the pool, teed into the caller's buffer as the "
           "pieces land" +
               raw2.Paired("its record's raw read")});
      raw2.all.Report("disk_read_entries_promote", "limit",
                      "the raw reads above again, paired with the promoting gets");
      g_row_limit[{"get_disk", "ec-store-promote"}] = "disk_read_entries_promote";
    }
    // The same entries fetched as an engine's step does: GetMany of 8 at a time, their disk
    // reads issued together (promoted into the pool, then copied out).
    Progress("get_disk: ec-store GetMany batches of 8");
    Die(store->Close(), "close");
    store.reset();
    store = OpenStore(sdir, 768 * kMiB);
    {
      std::vector<AlignedBuffer> outs;
      for (int i = 0; i < 8; ++i) std::memset(outs.emplace_back(60 * kMiB).data(), 0, 60 * kMiB);
      PinnedBuffer landing(8 * 60 * kMiB);  // where GetMany's reads land too: the pool's kind
      Latencies blat;
      TimedReads raw_batches;
      double bsecs = 0;
      for (size_t at = 0; at < entries.size(); at += 8) {
        std::vector<std::string> batch_keys;
        std::vector<size_t> which;
        std::vector<std::span<uint8_t>> dsts;
        uint64_t bytes = 0;
        for (size_t i = at; i < std::min(entries.size(), at + 8); ++i) {
          batch_keys.push_back(entries[i].key);
          which.push_back(i);
          dsts.emplace_back(outs[i - at].data(), outs[i - at].size());
          bytes += Bytes(entries[i]);
        }
        std::vector<std::span<uint8_t>> lands;
        for (size_t k = 0; k < which.size(); ++k)
          lands.push_back(landing.span(k * 60 * kMiB, 60 * kMiB));
        auto read_raw = [&] {  // the same records, all in flight together
          auto t = Clock::now();
          Die((*probe)->ReadMany(which, lands).status(), "raw read of a batch's records");
          raw_batches.Add(t, bytes);
        };
        if (at / 8 % 2 == 1) read_raw();
        auto t = Clock::now();
        for (auto& r : store->GetMany("bench", batch_keys, dsts)) Die(r.status(), "get_disk batch");
        blat.Add(t);
        bsecs += Since(t);
        if (at / 8 % 2 == 0) read_raw();
      }
      raw_batches.Report("disk_read_batches", "limit",
                         "the same records read 8 at a time, all in flight together, into pinned "
                         "huge-page memory, no checksum; alternated batch by batch with GetMany");
      Add({"get_disk", "ec-store-batch", total / bsecs / 1e9, entries.size() / bsecs, blat.P(0.5),
           blat.P(0.99), -1,
           "GetMany of 8 entries: their O_DIRECT reads in flight together, verified, copied "
           "out; latency per batch"});
      g_row_limit[{"get_disk", "ec-store-batch"}] = "disk_read_batches";
    }
  }
  store.reset();
  std::filesystem::remove_all(sdir);
  std::filesystem::remove_all(bdir);
}

void SpillWorkload(const Config& cfg, Payloads& pl) {
  const uint64_t pool = cfg.quick ? 256 * kMiB : 1 * kGiB;
  const uint64_t volume = cfg.quick ? 1536 * kMiB : 6 * kGiB;
  std::string sdir = cfg.dir + "/spill", bdir = cfg.dir + "/baseline-spill";
  std::filesystem::remove_all(sdir);
  std::filesystem::remove_all(bdir);
  auto entries = MakeEntries(volume, 2);
  uint64_t total = 0;
  for (auto& e : entries) total += Bytes(e);
  {
    Progress("spill: ec-store, sustained puts at " + std::to_string(volume / pool) + "x the pool");
    auto store = OpenStore(sdir, pool);
    Latencies lat;
    auto t0 = Clock::now();
    for (size_t i = 0; i < entries.size(); ++i) {
      auto t = Clock::now();
      Die(store->Put("bench", entries[i].key, Payloads::Meta(entries[i].shape),
                     pl.Get(entries[i].shape, i)),
          "spill put");
      lat.Add(t);
    }
    Die(store->Flush(), "flush");
    double secs = Since(t0);
    StoreStats st = *store->Stats();
    Add({"spill", "ec-store", total / secs / 1e9, entries.size() / secs, lat.P(0.5), lat.P(0.99),
         -1,
         "puts + final Flush, everything durable; " + std::to_string(st.pool().spills) +
             " spills"});
  }
  std::filesystem::remove_all(sdir);
  {
    Progress("spill: baseline");
    FileBaseline base(bdir);
    Latencies lat;
    auto t0 = Clock::now();
    for (size_t i = 0; i < entries.size(); ++i) {
      auto t = Clock::now();
      Die(base.Save(entries[i].key, Payloads::Meta(entries[i].shape), pl.Get(entries[i].shape, i)),
          "baseline save");
      lat.Add(t);
    }
    double secs = Since(t0);
    Add({"spill", "baseline", total / secs / 1e9, entries.size() / secs, lat.P(0.5), lat.P(0.99),
         -1, "buffered writes, not durable (no fsync) and never evicted"});
    ::sync();
  }
  std::filesystem::remove_all(bdir);
}

class Zipf {
 public:
  Zipf(size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) cdf_[i] = (sum += 1.0 / std::pow(static_cast<double>(i + 1), s));
    for (double& c : cdf_) c /= sum;
  }
  size_t operator()(std::mt19937_64& rng) const {
    double x = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), x) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

// Bytes this process read from the block device (/proc/self/io read_bytes: page-cache
// misses and O_DIRECT reads, io_uring's workers included), or 0 where the kernel does not say.
// What a pass did to the disk since `before`: MB per op read and written by this process,
// and how much of the pass's wall time the device was busy.
std::string DiskNote(const std::string& dir, const DiskCounters& before, double secs, double ops) {
  DiskCounters after = SampleDisk(dir);
  char out[128];
  int n =
      std::snprintf(out, sizeof(out), "%.2f MB/op read from disk, %.2f written",
                    static_cast<double>(after.read_bytes - before.read_bytes) / 1e6 / ops,
                    static_cast<double>(after.written_bytes - before.written_bytes) / 1e6 / ops);
  double busy = BusyFraction(before, after, secs);
  if (busy >= 0) std::snprintf(out + n, sizeof(out) - n, ", disk busy %.0f%%", 100 * busy);
  return out;
}

// mixed, as an engine runs it: each step is a batch of kMixedBatch items drawn Zipf(0.99)
// from a working set 3x the memory budget. ec-store fetches a step's items together
// (GetMany, as vLLM's start_load_caches loads every item of a step) and puts the misses;
// the baseline checks and reads its files one after another, as ECExampleConnector does,
// with its page cache held to the same budget. Latency is per step.
constexpr int kMixedBatch = 4;

struct MixedRun {
  const std::vector<Entry>& entries;
  const std::vector<std::vector<size_t>>& plan;  // the items of each step, in order
  std::vector<std::span<uint8_t>>& dsts;
  Payloads& pl;
};

// One ec-store pass over the plan. With `prefetch`, a second thread calls Prefetch with the
// next step's items while this step is fetched, as the connector does when the scheduler
// first sees an item (before the step that uses it runs): its disk reads are then in flight
// while the current step's are. Returns GB/s.
double MixedStore(const std::string& sdir, uint64_t pool, MixedRun& run, bool prefetch) {
  std::filesystem::remove_all(sdir);
  auto store = OpenStore(sdir, pool);
  const double ops = static_cast<double>(run.plan.size()) * kMixedBatch;
  auto keys_of = [&](size_t i) {
    std::vector<std::string> keys;
    for (size_t k : run.plan[i]) keys.push_back(run.entries[k].key);
    return keys;
  };
  std::atomic<size_t> step_now{0};
  std::atomic<bool> done{false};
  std::thread prefetcher;
  if (prefetch)
    prefetcher = std::thread([&] {
      for (size_t seen = 0; !done;) {
        size_t next = step_now.load() + 1;
        if (next >= run.plan.size()) break;
        if (next == seen) {  // the next step's items are in: wait for the step to move on
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          continue;
        }
        store->Prefetch("bench", keys_of(next)).ok();  // absent items: nothing to promote
        seen = next;
      }
    });
  Latencies lat;
  uint64_t bytes = 0, misses = 0;
  const DiskCounters disk0 = SampleDisk(sdir);
  double fill = 0;  // the pool's use after each step, as a fraction of its budget
  auto t0 = Clock::now();
  for (size_t i = 0; i < run.plan.size(); ++i) {
    step_now = i;
    auto t = Clock::now();
    auto got = store->GetMany("bench", keys_of(i), run.dsts);
    for (size_t j = 0; j < run.plan[i].size(); ++j) {
      const Entry& e = run.entries[run.plan[i][j]];
      if (got[j].status().IsNotFound()) {
        ++misses;
        Die(store->Put("bench", e.key, Payloads::Meta(e.shape),
                       run.pl.Get(e.shape, run.plan[i][j])),
            "mixed put");
      } else {
        Die(got[j].status(), "mixed get");
      }
      bytes += Bytes(e);
    }
    lat.Add(t);
    const TierStats p = store->Stats()->pool();  // outside the timed step
    fill += static_cast<double>(p.used) / static_cast<double>(p.capacity);
  }
  double secs = Since(t0);
  done = true;
  if (prefetcher.joinable()) prefetcher.join();
  const std::string disk = DiskNote(sdir, disk0, secs, ops);
  StoreStats st = *store->Stats();
  char note[320];
  std::snprintf(note, sizeof(note),
                "%s%s; pool %.0f%% full on average; %llu misses; pool "
                "hits %llu, disk hits %llu, promotions %llu; p50/p99 per step",
                prefetch ? "Prefetch of the next step's items from a second thread; " : "",
                disk.c_str(), 100 * fill / static_cast<double>(run.plan.size()),
                (unsigned long long)misses, (unsigned long long)st.pool().hits,
                (unsigned long long)st.disk().hits, (unsigned long long)st.pool().promotions);
  Add({"mixed", prefetch ? "ec-store-prefetch" : "ec-store", bytes / secs / 1e9, ops / secs,
       lat.P(0.5), lat.P(0.99), -1, note});
  store.reset();
  std::filesystem::remove_all(sdir);
  return bytes / secs / 1e9;
}

void MixedWorkload(const Config& cfg, Payloads& pl) {
  const uint64_t pool = cfg.quick ? 256 * kMiB : 1 * kGiB;
  const int steps = (cfg.quick ? 500 : 4000) / kMixedBatch;
  std::string sdir = cfg.dir + "/mixed", bdir = cfg.dir + "/baseline-mixed";
  std::filesystem::remove_all(bdir);
  auto entries = MakeEntries(3 * pool, 3);  // working set 3x the memory budget
  Zipf zipf(entries.size(), 0.99);
  std::mt19937_64 rng(5);
  std::vector<std::vector<size_t>> plan(steps);
  for (auto& step : plan)
    while (step.size() < kMixedBatch) {
      size_t k = zipf(rng);
      if (std::find(step.begin(), step.end(), k) == step.end()) step.push_back(k);
    }
  std::vector<AlignedBuffer> dst;
  std::vector<std::span<uint8_t>> dsts;
  for (int i = 0; i < kMixedBatch; ++i) {
    dst.emplace_back(60 * kMiB);
    std::memset(dst.back().data(), 0, dst.back().size());
    dsts.push_back({dst.back().data(), dst.back().size()});
  }
  const double ops = static_cast<double>(steps) * kMixedBatch;
  MixedRun run{entries, plan, dsts, pl};
  Progress("mixed: ec-store, steps of " + std::to_string(kMixedBatch) + " items, GetMany");
  const double store_gbps = MixedStore(sdir, pool, run, false);
  Progress("mixed: ec-store with Prefetch one step ahead");
  const double prefetch_gbps = MixedStore(sdir, pool, run, true);
  {
    Progress("mixed: baseline, files one after another, page cache held to the same budget");
    FileBaseline base(bdir);
    base.SetBudget(pool);
    Latencies lat;
    uint64_t bytes = 0;
    const DiskCounters disk0 = SampleDisk(cfg.dir);  // bdir is made by the first save
    std::vector<uint8_t> file;
    uint64_t off;
    TensorMeta meta;
    auto t0 = Clock::now();
    for (const auto& step : plan) {
      auto t = Clock::now();
      for (size_t k : step) {
        const Entry& e = entries[k];
        if (base.Exists(e.key))
          Die(base.Load(e.key, &file, &off, &meta), "baseline load");
        else
          Die(base.Save(e.key, Payloads::Meta(e.shape), pl.Get(e.shape, k)), "baseline save");
        bytes += Bytes(e);
      }
      lat.Add(t);
    }
    double secs = Since(t0);
    const std::string disk = DiskNote(cfg.dir, disk0, secs, ops);
    double gbps = bytes / secs / 1e9;
    char note[300];
    std::snprintf(note, sizeof(note),
                  "%s; ec-store/baseline %.2fx, with prefetch "
                  "%.2fx; LRU files beyond the budget dropped (fadvise DONTNEED)",
                  disk.c_str(), store_gbps / gbps, prefetch_gbps / gbps);
    Add({"mixed", "baseline", gbps, ops / secs, lat.P(0.5), lat.P(0.99), -1, note});
  }
  std::filesystem::remove_all(bdir);
}

// Heap bytes in use (malloc'd and not freed, mmap'd chunks included). Unlike resident memory
// it does not hide what an open reuses of memory freed before it (building the index leaves
// hundreds of MB freed but resident, which made the open look ~2x smaller than it is).
uint64_t HeapInUse() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

void IndexWorkload(const Config& cfg) {
  std::vector<uint64_t> sizes = cfg.index_sizes;
  if (sizes.empty())
    sizes = cfg.quick ? std::vector<uint64_t>{100000} : std::vector<uint64_t>{100000, 1000000};
  for (uint64_t n : sizes) {
    std::string sdir = cfg.dir + "/index-" + std::to_string(n);
    std::filesystem::remove_all(sdir);
    std::filesystem::create_directories(sdir + "/segments");
    Progress("index: building a " + std::to_string(n) + "-entry store");
    {
      // One sparse segment holding n records' worth of space; rows point into it. The open
      // below is then the normal path: load SQLite, build the keydir, scan past the tail.
      const uint64_t rec = 8192;
      int fd = ::open((sdir + "/segments/seg-00000001.ecs").c_str(), O_RDWR | O_CREAT, 0644);
      if (fd < 0 || ftruncate(fd, static_cast<off_t>(n * rec)) != 0)
        Die(Status::IOError("sparse"), "index");
      ::close(fd);
      auto idx = Index::Open(sdir + "/index.sqlite");
      Die(idx.status(), "index open");
      for (uint64_t i = 0; i < n; ++i) {
        IndexRow r;
        r.ns = "bench";
        r.key = Key(i);
        r.seq = i + 1;
        r.loc = {1, i * rec, 4096, Codec::kNone};
        r.bytes = 4096;
        r.checksum = i;
        r.meta = {DType::kBF16, {2, 1024}};
        r.created_us = r.last_access_us = i;
        (*idx)->EnqueuePut(std::move(r));
      }
      (*idx)->EnqueueTail(1, n * rec);
      Die((*idx)->Flush(), "index flush");
    }
    Progress("index: open + recover " + std::to_string(n));
    const uint64_t heap0 = HeapInUse();
    auto t0 = Clock::now();
    auto store = OpenStore(sdir, 16 * kMiB);
    double open_s = Since(t0);
    // What the open keeps on the heap (the pool is mmap'd, not malloc'd): the keydir, the
    // disk tier's accounting, SQLite's cache. Per entry, the figure design.md's
    // memory target is about.
    const double per_entry =
        static_cast<double>(HeapInUse() - std::min(HeapInUse(), heap0)) / static_cast<double>(n);
    Progress("index: lookups " + std::to_string(n));
    std::mt19937_64 rng(1);
    std::vector<std::string> probe;
    for (int i = 0; i < 4096; ++i) probe.push_back(Key(rng() % n));
    const int lookups = cfg.quick ? 400000 : 2000000;
    Latencies lat;
    uint64_t found = 0;
    t0 = Clock::now();
    for (int i = 0; i < lookups; ++i) {
      bool timed = (i & 63) == 0;
      auto t = Clock::now();
      found += store->Lookup("bench", probe[static_cast<size_t>(i) & 4095]).ok();
      if (timed) lat.Add(t);
    }
    double secs = Since(t0);
    if (found != static_cast<uint64_t>(lookups)) Die(Status::Corruption("lookup missed"), "index");
    Add({"index_" + std::to_string(n / 1000) + "k", "ec-store", 0, lookups / secs, lat.P(0.5),
         lat.P(0.99), -1, "Lookup, 1 thread"});
    char note[160];
    std::snprintf(note, sizeof(note),
                  "Store::Open of a %lu-entry store; %.0f B of heap per entry after it (keydir, "
                  "disk accounting, index cache)",
                  static_cast<unsigned long>(n), per_entry);
    Add({"open_" + std::to_string(n / 1000) + "k", "ec-store", 0, 1 / open_s, open_s * 1e6,
         open_s * 1e6, -1, note});
    store.reset();
    std::filesystem::remove_all(sdir);
  }
}

class PoolAdapter : public RefAllocator {
 public:
  explicit PoolAdapter(uint64_t cap) : a_(cap) {}
  const char* Name() const override { return "ec-store"; }
  std::optional<RefBlock> Allocate(uint64_t n) override {
    auto b = a_.Allocate(n);
    if (!b) return std::nullopt;
    return RefBlock{b->offset, b->length};
  }
  void Free(const RefBlock& b) override { a_.Free({b.offset, b.length}); }
  uint64_t allocated() const override { return a_.allocated_bytes(); }
  uint64_t largest_free() const override { return a_.largest_free_extent(); }
  uint64_t stranded(uint64_t m) const override { return a_.StrandedBytes(m); }

 private:
  PoolAllocator a_;
};

// Churn at the 95% mark: allocate entries of the real mix until 95% of the pool holds payload
// (or the next entry does not fit), sample, free a random entry, repeat. Fragmentation is the
// share of the pool lost: rounding inside blocks plus free extents too small for the smallest
// entry of the mix. The stricter figure (all free space outside the largest extent) is in
// the note.
void AllocWorkload(const Config& cfg) {
  const uint64_t cap = 1 * kGiB;
  const int steps = cfg.quick ? 30000 : 200000;
  std::vector<std::unique_ptr<RefAllocator>> allocs;
  allocs.push_back(std::make_unique<PoolAdapter>(cap));
  allocs.push_back(std::make_unique<BuddyAllocator>(cap));
  allocs.push_back(std::make_unique<FirstFitAllocator>(cap));
  for (auto& a : allocs) {
    Progress(std::string("alloc: ") + a->Name());
    std::mt19937_64 rng(11);
    std::vector<std::pair<RefBlock, uint64_t>> live;
    uint64_t payload = 0;
    double sum = 0, worst = 0, strict = 0;
    int samples = 0;
    Latencies lat;
    auto t0 = Clock::now();
    uint64_t ops = 0;
    for (int s = 0; s < steps; ++s) {
      int shape = PickShape(rng);
      uint64_t want = 2ull * kShapes[shape].rows * kShapes[shape].width;
      bool placed = false;
      if (static_cast<double>(payload + want) <= 0.95 * static_cast<double>(cap)) {
        auto t = Clock::now();
        auto b = a->Allocate(want);
        if ((ops++ & 15) == 0) lat.Add(t);
        if (b) {
          live.push_back({*b, want});
          payload += want;
          placed = true;
        }
      }
      if (!placed && !live.empty()) {
        const uint64_t smallest = 2ull * kShapes[0].rows * kShapes[0].width;
        double lost = static_cast<double>(a->allocated() - payload + a->stranded(smallest)) /
                      static_cast<double>(cap);
        strict += std::max(
            0.0, 1.0 - static_cast<double>(payload + a->largest_free()) / static_cast<double>(cap));
        sum += lost;
        worst = std::max(worst, lost);
        ++samples;
        size_t i = rng() % live.size();
        a->Free(live[i].first);
        payload -= live[i].second;
        live[i] = live.back();
        live.pop_back();
      }
    }
    double secs = Since(t0);
    char note[160];
    std::snprintf(note, sizeof(note),
                  "worst %.1f%%; outside largest extent %.1f%%; %d samples at the 95%% mark",
                  100 * worst, samples ? 100 * strict / samples : 0.0, samples);
    Add({"alloc", a->Name(), 0, ops / secs, lat.P(0.5), lat.P(0.99), samples ? sum / samples : 0,
         note});
  }
}

void RemoteWorkload(const Config& cfg, Payloads& pl) {
  Progress("remote: ec-store over TCP loopback vs a socket stream vs Redis");
  // One value of each size, as separate buffers (Payloads reuses one buffer per shape).
  std::vector<std::vector<uint8_t>> owned;
  for (int s = 0; s < 4; ++s) {
    auto v = pl.Get(s, 1000 + s);
    owned.emplace_back(v.begin(), v.end());
  }
  std::vector<std::span<const uint8_t>> values;
  for (int copy = 0; copy < 2; ++copy)
    for (auto& v : owned) values.emplace_back(v.data(), v.size());
  RemoteResults r = RunRemote(values, cfg.quick ? 4 : 16, cfg.dir + "/remote");
  auto rec = [](const char* w, const char* sys, const Sample& s, std::string note) {
    return Record{w, sys, s.gbps, s.ops_per_s, s.p50_us, s.p99_us, -1, std::move(note)};
  };
  Add(rec("socket_stream", "limit", r.socket_stream,
          "plain TCP loopback stream, same two processes"));
  std::string vs_redis =
      r.redis ? "; " + std::to_string(r.ecstore_tcp.gbps / r.redis->gbps).substr(0, 4) + "x Redis"
              : "";
  Add(rec("remote_get", "ec-store", r.ecstore_tcp,
          "Client::Get over TCP loopback, 2.9-58 MB entries" + vs_redis));
  if (r.redis)
    Add(rec("remote_get", "redis", *r.redis, "redis-server 7 GET via hiredis"));
  else
    Add({"remote_get", "redis", 0, 0, 0, 0, -1, "not run: " + r.redis_note});
  Add(rec("socket_upload", "limit", r.socket_upload,
          "plain TCP loopback stream the other way: bytes in, one-byte ack"));
  Add(rec("remote_put", "ec-store", r.ecstore_tcp_put,
          "Client::Put over TCP loopback, received straight into a pool block"));
  Add(rec("shm_get", "ec-store", r.ecstore_shm,
          "same host: lease, copy out of the mapped pool, release (2 small unix-socket messages)"));
}

// Eviction policies over synthetic traces (bench/policy.h says how they are made): what each
// keeps at 5-50% of the working set, against a clairvoyant bound.
void PolicyWorkload(const Config& cfg) {
  TraceParams p;
  if (cfg.quick) p.requests = 100000, p.items = 8000, p.drift_every = 10000, p.drift_step = 200;
  if (g_drift_every > 0) p.drift_every = g_drift_every, p.drift_step = g_drift_step;
  if (p.drift_step > p.items) {
    std::fprintf(stderr, "ec-store-bench: --drift: STEP %d is more than the trace's %d items\n",
                 p.drift_step, p.items);
    std::exit(2);
  }
  Progress("policy: LRU, GDSF, freq and two bounds; " + std::to_string(p.items) + " items, " +
           std::to_string(p.requests) + " requests, the top ranks shift by " +
           std::to_string(p.drift_step) + " every " + std::to_string(p.drift_every) + " requests");
  auto rows = RunPolicyBench(p, {0.05, 0.10, 0.20, 0.50});
  for (const PolicyRow& r : rows) {
    const PolicyRow* lru = nullptr;
    for (const PolicyRow& o : rows)
      if (o.capacity_fraction == r.capacity_fraction && o.policy == "lru") lru = &o;
    std::string more;
    if (r.policy != "lru" && lru && lru->saved_s > 0)
      more = ", " + std::to_string(std::lround(100 * (r.saved_s / lru->saved_s - 1))) +
             "% more than LRU";
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "hit %.1f%%, byte hit %.1f%%, encoder time saved %.0f of %.0f s (%.1f%%)%s",
                  100 * r.hit_ratio, 100 * r.byte_hit_ratio, r.saved_s, r.total_s,
                  100 * r.saved_s / r.total_s, more.c_str());
    char w[32];
    std::snprintf(w, sizeof w, "policy_%02.0f%%", 100 * r.capacity_fraction);
    Add({w, r.policy, 0, 0, 0, 0, -1, buf});
  }
}

// The device tier against cudaMemcpy of the same sizes (GPU machine; a row says why not
// elsewhere). Ratios are computed in Report from the limits recorded here.
void DeviceWorkload(const Config& cfg, Payloads& pl) {
  Progress("device: the device tier vs cudaMemcpy");
  std::vector<std::vector<uint8_t>> owned;
  for (int s = 0; s < 4; ++s) {
    auto v = pl.Get(s, 2000 + s);
    owned.emplace_back(v.begin(), v.end());
  }
  std::vector<std::span<const uint8_t>> values;
  for (auto& v : owned) values.emplace_back(v.data(), v.size());
  for (auto& r : RunDevice(values, cfg.quick ? 5 : 20, cfg.dir + "/device"))
    Add({r.workload, r.system, r.s.gbps, r.s.ops_per_s, r.s.p50_us, r.s.p99_us, -1, r.note});
  // Each ec-store row against its limit, in the note: same sizes, same run.
  const std::pair<const char*, const char*> vs[] = {
      {"device_get_d2d", "device_d2d"}, {"device_get_h2d", "device_h2d"},
      {"device_promote", "device_h2d"}, {"device_demote", "device_d2h"},
      {"device_ipc_get", "device_d2d"}, {"device_get_d2h", "device_d2h"}};
  // Entry ready on the GPU, each tier against the file baseline's load_file(device="cuda").
  if (Record* warm = Find("ready_on_gpu", "baseline-warm"))
    for (auto [w, sys] : {std::pair{"device_get_d2d", "from the device tier"},
                          std::pair{"device_get_h2d", "from the host pool"},
                          std::pair{"ready_on_gpu", "from disk"}}) {
      Record* r = Find(w, std::string(w) == "ready_on_gpu" ? "ec-store-disk" : "ec-store");
      Record* cold = Find("ready_on_gpu", "baseline-cold");
      if (!r || !cold || r->p50_us <= 0) continue;
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "; ready on the GPU %s: p50 %.0f us, %.1fx / %.1fx lower "
                    "than load_file warm / cold",
                    sys, r->p50_us, warm->p50_us / r->p50_us, cold->p50_us / r->p50_us);
      r->note += buf;
    }
  for (auto [w, limit] : vs) {
    Record* r = Find(w, "ec-store");
    Record* l = Find(limit, "limit");
    if (!r || !l || l->gbps <= 0) continue;
    char buf[96];
    std::snprintf(buf, sizeof buf, "; %.2fx %s (p50 %.0f vs %.0f us)", r->gbps / l->gbps, limit,
                  r->p50_us, l->p50_us);
    r->note += buf;
  }
}

// Gets over RDMA verbs against TCP over the same link, in one process. On this project's
// machines that link is Soft-RoCE inside a QEMU TCG guest (`make bench-rdma`): the figures
// show the path works end to end, not what a NIC does.
void RdmaWorkload(const Config& cfg, Payloads& pl) {
  if (!net::RdmaDevicePresent()) {
    Add({"rdma_get", "ec-store", 0, 0, 0, 0, -1,
         "not run: no RDMA device here (make bench-rdma runs it under Soft-RoCE)"});
    return;
  }
  Progress("rdma: gets over verbs vs TCP on " + cfg.rdma_addr + " (emulated)");
  std::string sdir = cfg.dir + "/rdma";
  std::filesystem::remove_all(sdir);
  auto store = OpenStore(sdir, 256 * kMiB);
  uint64_t total = 0;
  std::vector<std::string> keys;
  for (int s = 0; s < 4; ++s) {
    keys.push_back("rd" + std::to_string(s));
    auto v = pl.Get(s, 2000 + s);
    Die(store->Put("bench", keys.back(), Payloads::Meta(s), v), "rdma put");
    total += v.size();
  }
  net::ServerOptions so;
  so.listen = cfg.rdma_addr + ":0";
  so.token = "bench";
  so.rdma_listen = cfg.rdma_addr + ":0";
  auto server = net::Server::Start(store.get(), so);
  Die(server.status(), "rdma server");
  AlignedBuffer dst(60 * kMiB);
  std::memset(dst.data(), 0, dst.size());
  for (std::string transport : {"rdma", "tcp"}) {
    net::ClientOptions co;
    co.token = "bench";
    co.transport = transport;
    co.timeout = std::chrono::milliseconds(60000);
    auto c = net::Client::Connect(
        so.listen.substr(0, so.listen.rfind(':')) + ":" + std::to_string((*server)->port()), co);
    Die(c.status(), "rdma client");
    Latencies lat;
    auto t0 = Clock::now();
    for (const std::string& k : keys) {
      auto t = Clock::now();
      Die((*c)->Get("bench", k, {dst.data(), dst.size()}).status(), "rdma get");
      lat.Add(t);
    }
    double secs = Since(t0);
    Add({"rdma_get", transport == "rdma" ? "ec-store-rdma" : "ec-store-tcp", total / secs / 1e9,
         keys.size() / secs, lat.P(0.5), lat.P(0.99), -1,
         "EMULATED: Soft-RoCE (rdma_rxe) in QEMU TCG, 2.9-58 MB entries; correctness, not NIC "
         "speed"});
  }
  (*server)->Stop();
  Die(store->Close(), "close");
  std::filesystem::remove_all(sdir);
}

// --------------------------------------------------------------- report

// A limit measured before and after the workloads becomes one record: the faster run, with
// both in the note. This VM's disk drifts by up to 40% within a run (read: 1.56 GB/s before,
// 1.09 after); the mean of the two let a workload between them read at 1.2x "its limit". The
// faster run is what the disk did reach in this run, so it bounds what the workloads could.
void MergeRepeatedLimits() {
  std::vector<Record> merged;
  for (Record& r : g_records) {
    auto same = std::find_if(merged.begin(), merged.end(), [&](const Record& m) {
      return m.workload == r.workload && m.system == r.system &&
             (m.system == "limit" || m.system == "fio");
    });
    if (same == merged.end()) {
      merged.push_back(r);
      continue;
    }
    char note[160];
    std::snprintf(note, sizeof(note), "%s; the faster of runs before (%.2f) and after (%.2f GB/s)",
                  same->note.c_str(), same->gbps, r.gbps);
    if (r.gbps > same->gbps) *same = r;
    same->note = note;
  }
  g_records = std::move(merged);
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

void Report(const Config& cfg) {
  std::fprintf(stderr, "\r%-80s\r", "");
  struct utsname u;
  uname(&u);
  std::printf("ec-store-bench %s on %s (%s, %ld cores), dir %s\n", cfg.quick ? "--quick" : "(full)",
              u.nodename, u.release, sysconf(_SC_NPROCESSORS_ONLN), cfg.dir.c_str());
  std::map<std::string, std::string> limit_of = {{"put", "memcpy_puts"},
                                                 {"get_hot", "memcpy_entries"},
                                                 {"get_disk", "disk_read"},
                                                 {"disk_read", "disk_read"},
                                                 {"disk_write", "disk_write"},
                                                 {"get_disk_during_spill", "disk_read"},
                                                 {"spill", "disk_write"},
                                                 {"mixed", "memcpy"},
                                                 {"remote_get", "socket_stream"},
                                                 {"remote_put", "socket_upload"},
                                                 {"shm_get", "memcpy"}};
  std::vector<std::string> order;
  for (auto& r : g_records)
    if (std::find(order.begin(), order.end(), r.workload) == order.end())
      order.push_back(r.workload);
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& w : order) {
    std::printf("\n== %s\n%-16s %9s %10s %11s %11s %9s %9s  %s\n", w.c_str(), "system", "GB/s",
                "ops/s", "p50 us", "p99 us", "vs limit", "vs base", "note");
    Record* limit = limit_of.count(w) ? Find(limit_of[w], "limit") : nullptr;
    Record* base = Find(w, "baseline");
    for (auto& r : g_records) {
      if (r.workload != w) continue;
      auto held = g_row_limit.find({r.workload, r.system});
      Record* own = held == g_row_limit.end() ? limit : Find(held->second, "limit");
      double vs_limit = own && r.gbps > 0 ? Ratio(r.gbps, own->gbps) : 0;
      double vs_base = 0;
      if (base && &r != base) {
        vs_base = r.gbps > 0 && base->gbps > 0 ? Ratio(r.gbps, base->gbps)
                                               : Ratio(r.ops_per_s, base->ops_per_s);
        if (r.system == "ec-store-lease") vs_base = Ratio(base->p50_us, r.p50_us);  // latency ratio
      }
      // A limit is the same work done the simplest way: beating it by more than 5% means the
      // two were not measured alike.
      const bool suspect = vs_limit > 1.05;
      if (suspect && r.system == "fio" && r.note.find("reads low") == std::string::npos)
        r.note += " [the bench's own probe reads low against fio]";
      else if (suspect && r.note.find("measuring error") == std::string::npos)
        r.note += " [above 1.05x its limit: a measuring error, not a result]";
      char frag[32] = "";
      if (r.fragmentation >= 0)
        std::snprintf(frag, sizeof(frag), "frag %.2f%%; ", 100 * r.fragmentation);
      std::printf("%-16s %9.2f %10.1f %11.1f %11.1f %9s %9s  %s%s\n", r.system.c_str(), r.gbps,
                  r.ops_per_s, r.p50_us, r.p99_us,
                  vs_limit > 0 ? (std::to_string(vs_limit).substr(0, 4) + "x").c_str() : "-",
                  vs_base > 0 ? (std::to_string(vs_base).substr(0, 5) + "x").c_str() : "-", frag,
                  r.note.c_str());
      nlohmann::json j{{"workload", r.workload}, {"system", r.system},
                       {"gbps", r.gbps},         {"ops_per_s", r.ops_per_s},
                       {"p50_us", r.p50_us},     {"p99_us", r.p99_us},
                       {"note", r.note}};
      if (r.fragmentation >= 0) j["fragmentation"] = r.fragmentation;
      if (vs_limit > 0) j["ratio_to_limit"] = vs_limit;
      if (Record* fio = own ? Find(own->workload, "fio") : nullptr;
          fio && r.gbps > 0 && r.system != "fio") {
        j["ratio_to_fio"] = Ratio(r.gbps, fio->gbps);
        std::printf("%-16s %9s %10s %11s %11s %8.2fx %9s  against fio's %s\n", "", "", "", "", "",
                    Ratio(r.gbps, fio->gbps), "", fio->workload.c_str());
      }
      if (suspect) j["measuring_error"] = true;
      if (vs_base > 0) j["ratio_to_baseline"] = vs_base;
      out.push_back(j);
    }
  }
  if (Record* lease = Find("get_hot", "ec-store-lease"))
    if (Record* b = Find("get_hot", "baseline"))
      std::printf(
          "\nhot get, entry ready to use: lease p50 %.1f us vs baseline warm p50 %.1f us = %.0fx "
          "lower\n",
          lease->p50_us, b->p50_us, Ratio(b->p50_us, lease->p50_us));
  if (!cfg.json_path.empty()) {
    std::filesystem::path p(cfg.json_path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    std::ofstream(cfg.json_path) << out.dump(2) << "\n";
    std::printf("json: %s\n", cfg.json_path.c_str());
  }
  if (!cfg.png_path.empty()) {
    std::string dat = cfg.png_path + ".dat";
    std::ofstream d(dat);
    for (std::string w : {"put", "get_hot", "get_disk", "spill", "mixed"}) {
      Record* e = Find(w, "ec-store");
      if (!e) continue;
      Record* b = Find(w, "baseline");
      if (!b) b = Find(w, "baseline-cold");
      Record* l = limit_of.count(w) ? Find(limit_of[w], "limit") : nullptr;
      d << w << " " << e->gbps << " " << (b ? b->gbps : 0) << " "
        << (l && w != "mixed" ? l->gbps : 0) << "\n";
    }
    d.close();
    std::string gp = cfg.png_path + ".gp";
    std::ofstream g(gp);
    g << "set terminal pngcairo size 900,480 noenhanced\nset output '" << cfg.png_path << "'\n"
      << "set title 'ec-store vs file baseline vs machine limit (GB/s, same run)'\n"
      << "set style data histograms\nset style histogram clustered gap 1\nset style fill solid "
         "0.8\n"
      << "set ylabel 'GB/s'\nset key top right\nset grid y\n"
      << "plot '" << dat
      << "' using 2:xtic(1) title 'ec-store', '' using 3 title 'baseline', '' using 4 title "
         "'limit'\n";
    g.close();
    if (std::system(
            ("command -v gnuplot >/dev/null 2>&1 && gnuplot '" + gp + "' 2>/dev/null").c_str()) ==
        0)
      std::printf("chart: %s\n", cfg.png_path.c_str());
    else
      std::printf("chart: skipped (gnuplot not installed; data in %s)\n", dat.c_str());
  }
}

}  // namespace
}  // namespace ecstore::bench

int main(int argc, char** argv) {
  using namespace ecstore::bench;
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ec-store-bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick")
      cfg.quick = true;
    else if (a == "--dir")
      cfg.dir = next();
    else if (a == "--json")
      cfg.json_path = next();
    else if (a == "--png")
      cfg.png_path = next();
    else if (a == "--rdma-addr")
      cfg.rdma_addr = next();
    else if (a == "--policy")
      g_policy = next();
    else if (a == "--watermarks") {
      std::string v = next();
      if (std::sscanf(v.c_str(), "%lf,%lf", &g_high_watermark, &g_low_watermark) != 2 ||
          !(g_low_watermark > 0 && g_low_watermark < g_high_watermark && g_high_watermark <= 1)) {
        std::fprintf(stderr,
                     "ec-store-bench: --watermarks wants HIGH,LOW with 0 < LOW < HIGH <= 1, "
                     "not '%s'\n",
                     v.c_str());
        std::exit(2);
      }
    } else if (a == "--drift") {
      std::string v = next();
      if (std::sscanf(v.c_str(), "%d,%d", &g_drift_every, &g_drift_step) != 2 ||
          g_drift_every < 1 || g_drift_step < 0) {
        std::fprintf(stderr,
                     "ec-store-bench: --drift wants EVERY,STEP (the policy trace's top ranks "
                     "shift by STEP every EVERY requests; EVERY >= 1, STEP >= 0), not '%s'\n",
                     v.c_str());
        std::exit(2);
      }
    } else if (a == "--index-entries") {
      std::string v = next();
      for (size_t p = 0; p <= v.size();) {
        size_t e = std::min(v.find(',', p), v.size());
        cfg.index_sizes.push_back(std::stoull(v.substr(p, e - p)));
        p = e + 1;
      }
    } else if (a == "--workloads") {
      std::string w = next();
      size_t p = 0;
      while (p <= w.size()) {
        size_t e = w.find(',', p);
        if (e == std::string::npos) e = w.size();
        cfg.workloads.insert(w.substr(p, e - p));
        p = e + 1;
      }
    } else {
      std::fprintf(
          stderr,
          "usage: ec-store-bench [--quick] [--workloads put,get_hot,get_disk,spill,mixed,"
          "remote,rdma,device,policy,index,alloc] [--rdma-addr IP] [--dir DIR] [--json FILE] "
          "[--png FILE] [--index-entries N,N,...] [--policy freq|lru|gdsf] [--watermarks H,L] "
          "[--drift EVERY,STEP]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  const std::set<std::string> known = {"put",  "get_hot", "get_disk", "spill", "mixed", "remote",
                                       "rdma", "device",  "policy",   "index", "alloc"};
  for (auto& w : cfg.workloads)
    if (!known.count(w)) {
      std::fprintf(stderr, "ec-store-bench: unknown workload '%s'\n", w.c_str());
      return 2;
    }
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
