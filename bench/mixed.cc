// The workloads where the disk is the limit for both systems: spill (sustained puts through a
// small pool) and mixed (an engine's steps over a working set 3x the memory budget).
#include "bench/mixed.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "bench/baseline.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "disk/aligned_buffer.h"

namespace ecstore::bench {

std::vector<std::string> MixedPlan::Keys(size_t step) const {
  std::vector<std::string> keys;
  for (size_t k : steps[step]) keys.push_back(entries[k].key);
  return keys;
}

uint64_t MixedPlan::Bytes() const {
  uint64_t n = 0;
  for (const auto& step : steps)
    for (size_t k : step) n += ::ecstore::bench::Bytes(entries[k]);
  return n;
}

MixedPlan MakeMixedPlan(const Config& cfg) {
  MixedPlan mp;
  mp.pool = cfg.quick ? 256 * kMiB : 1 * kGiB;
  mp.entries = MakeEntries(3 * mp.pool, 3);  // working set 3x the memory budget
  Zipf zipf(mp.entries.size(), 0.99);
  std::mt19937_64 rng(5);
  mp.steps.resize((cfg.quick ? 500 : 4000) / kMixedBatch);
  for (auto& step : mp.steps)
    while (step.size() < kMixedBatch) {
      size_t k = zipf(rng);
      if (std::find(step.begin(), step.end(), k) == step.end()) step.push_back(k);
    }
  return mp;
}

// Bytes this process read from the block device (/proc/self/io read_bytes: page-cache
// misses and O_DIRECT reads, io_uring's workers included), or 0 where the kernel does not say.
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

namespace {

// mixed, as an engine runs it: each step is a batch of kMixedBatch items drawn Zipf(0.99)
// from a working set 3x the memory budget. ec-store fetches a step's items together
// (GetMany, as vLLM's start_load_caches loads every item of a step) and puts the misses;
// the baseline checks and reads its files one after another, as ECExampleConnector does,
// with its page cache held to the same budget. Latency is per step.
struct MixedRun {
  const MixedPlan& mp;
  std::vector<std::span<uint8_t>>& dsts;
  Payloads& pl;
};

// Step i: its items fetched together (GetMany), the misses put. Returns the misses.
uint64_t Step(Cache* c, MixedRun& run, size_t i) {
  const std::vector<size_t>& step = run.mp.steps[i];
  auto got = c->GetMany("bench", run.mp.Keys(i), run.dsts);
  uint64_t misses = 0;
  for (size_t j = 0; j < step.size(); ++j) {
    const Entry& e = run.mp.entries[step[j]];
    if (!got[j].status().IsNotFound()) {
      Die(got[j].status(), "mixed get");
      continue;
    }
    ++misses;
    Die(c->Put("bench", e.key, Payloads::Meta(e.shape), run.pl.Get(e.shape, step[j])), "mixed put");
  }
  return misses;
}

// A second thread that hints the next step's items while this step is fetched, as the
// connector's scheduler side does when it first sees an item (before the step that uses it
// runs): their disk reads are then in flight while the current step's are. hint(keys) is
// Store::Prefetch, or a daemon's PREFETCH on a second connection.
class NextStepHints {
 public:
  NextStepHints(const MixedPlan& mp, std::function<void(const std::vector<std::string>&)> hint)
      : thread_([this, &mp, hint = std::move(hint)] {
          for (size_t seen = 0; !done_;) {
            size_t next = step_now_.load() + 1;
            if (next >= mp.steps.size()) break;
            if (next == seen) {  // the next step's items are in: wait for the step to move on
              std::this_thread::sleep_for(std::chrono::microseconds(200));
              continue;
            }
            hint(mp.Keys(next));
            seen = next;
          }
        }) {}
  ~NextStepHints() {
    done_ = true;
    thread_.join();
  }
  void Now(size_t step) { step_now_ = step; }

 private:
  std::atomic<size_t> step_now_{0};
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: it reads the two above
};

// One ec-store pass over the plan, with `prefetch` hints of the next step's items
// (NextStepHints). Returns GB/s.
double MixedStore(const Config& cfg, const std::string& sdir, uint64_t pool, MixedRun& run,
                  bool prefetch) {
  std::filesystem::remove_all(sdir);
  auto store = OpenStore(cfg, sdir, pool);
  const auto& plan = run.mp.steps;
  const double ops = static_cast<double>(plan.size()) * kMixedBatch;
  std::optional<NextStepHints> hints;
  if (prefetch)  // absent items: nothing to promote
    hints.emplace(run.mp,
                  [&](const std::vector<std::string>& k) { (void)store->Prefetch("bench", k); });
  Latencies lat;
  uint64_t misses = 0;
  const DiskCounters disk0 = SampleDisk(sdir);
  double fill = 0;  // the pool's use after each step, as a fraction of its budget
  auto t0 = Clock::now();
  for (size_t i = 0; i < plan.size(); ++i) {
    if (hints) hints->Now(i);
    auto t = Clock::now();
    misses += Step(store.get(), run, i);
    lat.Add(t);
    const TierStats p = store->Stats()->pool();  // outside the timed step
    fill += static_cast<double>(p.used) / static_cast<double>(p.capacity);
  }
  double secs = Since(t0);
  hints.reset();
  const std::string disk = DiskNote(sdir, disk0, secs, ops);
  StoreStats st = *store->Stats();
  char note[320];
  std::snprintf(note, sizeof(note),
                "%s%s; pool %.0f%% full on average; %llu misses; pool "
                "hits %llu, disk hits %llu, promotions %llu; p50/p99 per step",
                prefetch ? "Prefetch of the next step's items from a second thread; " : "",
                disk.c_str(), 100 * fill / static_cast<double>(plan.size()),
                (unsigned long long)misses, (unsigned long long)st.pool().hits,
                (unsigned long long)st.disk().hits, (unsigned long long)st.pool().promotions);
  const double gbps = static_cast<double>(run.mp.Bytes()) / secs / 1e9;
  Add({"mixed", prefetch ? "ec-store-prefetch" : "ec-store", gbps, ops / secs, lat.P(0.5),
       lat.P(0.99), -1, note});
  store.reset();
  std::filesystem::remove_all(sdir);
  return gbps;
}

// The same plan through `ec-store serve` on this host, as a CPU engine's connector reads a
// same-host daemon: a step's GetMany over shared memory (its keys leased in one
// GET_SHM_STREAM, the disk-only ones read back in one batch, each piece copied out of the
// mapped pool as the daemon tells of it landing), the misses put through the connection's
// put arena. With `prefetch`, NextStepHints sends PREFETCH on a second connection, as the
// connector's scheduler side does through its own client. Returns GB/s, or 0 where the
// daemon did not start.
double MixedDaemon(const Config& cfg, MixedRun& run, bool prefetch) {
  const char* system = prefetch ? "ec-store-daemon-prefetch" : "ec-store-daemon";
  Daemon daemon(cfg, cfg.dir + "/mixed-daemon", run.mp.pool);
  net::Client* c = daemon.client();
  auto scheduler = prefetch ? daemon.Connect() : Result<std::unique_ptr<net::Client>>(nullptr);
  if (!c || !scheduler.ok()) {
    Add({"mixed", system, 0, 0, 0, 0, -1,
         "not run: " + (c ? scheduler.status().ToString() : daemon.why())});
    return 0;
  }
  const auto& plan = run.mp.steps;
  std::optional<NextStepHints> hints;
  if (prefetch)
    hints.emplace(run.mp, [&](const std::vector<std::string>& k) {
      Die((*scheduler)->Prefetch("bench", k).status(), "daemon prefetch");
    });
  Latencies lat;
  uint64_t misses = 0;
  auto t0 = Clock::now();
  for (size_t i = 0; i < plan.size(); ++i) {
    if (hints) hints->Now(i);
    auto t = Clock::now();
    misses += Step(c, run, i);
    lat.Add(t);
  }
  const double secs = Since(t0);
  hints.reset();
  const double ops = static_cast<double>(plan.size()) * kMixedBatch;
  const std::string note =
      std::string(prefetch ? "PREFETCH of the next step's items on a second connection; " : "") +
      "a same-host daemon: GetMany over shared memory (GET_SHM_STREAM: the pool's entries "
      "and each disk read's pieces copied out of the mapping as the daemon tells of them, "
      "while it reads the rest), misses put through the put arena; " +
      daemon.Tally(misses) + "; p50/p99 per step";
  const double gbps = static_cast<double>(run.mp.Bytes()) / secs / 1e9;
  Add({"mixed", system, gbps, ops / secs, lat.P(0.5), lat.P(0.99), -1, note});
  return gbps;
}

}  // namespace

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
    auto store = OpenStore(cfg, sdir, pool);
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

void MixedWorkload(const Config& cfg, Payloads& pl) {
  const MixedPlan mp = MakeMixedPlan(cfg);
  const uint64_t pool = mp.pool;
  const auto& plan = mp.steps;
  const auto& entries = mp.entries;
  const int steps = static_cast<int>(plan.size());
  std::string sdir = cfg.dir + "/mixed", bdir = cfg.dir + "/baseline-mixed";
  std::filesystem::remove_all(bdir);
  std::vector<AlignedBuffer> dst;
  std::vector<std::span<uint8_t>> dsts;
  for (int i = 0; i < kMixedBatch; ++i) {
    dst.emplace_back(60 * kMiB);
    std::memset(dst.back().data(), 0, dst.back().size());
    dsts.push_back({dst.back().data(), dst.back().size()});
  }
  const double ops = static_cast<double>(steps) * kMixedBatch;
  MixedRun run{mp, dsts, pl};
  Progress("mixed: ec-store, steps of " + std::to_string(kMixedBatch) + " items, GetMany");
  const double store_gbps = MixedStore(cfg, sdir, pool, run, false);
  Progress("mixed: ec-store with Prefetch one step ahead");
  const double prefetch_gbps = MixedStore(cfg, sdir, pool, run, true);
  Progress("mixed: ec-store serve on this host, GetMany over shared memory");
  const double daemon_gbps = MixedDaemon(cfg, run, false);
  Progress("mixed: ec-store serve, with PREFETCH one step ahead");
  const double daemon_prefetch_gbps = MixedDaemon(cfg, run, true);
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
    char note[480];
    std::snprintf(note, sizeof(note),
                  "%s; ec-store/baseline %.2fx, with prefetch "
                  "%.2fx, through a daemon %.2fx, with PREFETCH %.2fx; LRU files beyond the "
                  "budget dropped (fadvise DONTNEED)",
                  disk.c_str(), store_gbps / gbps, prefetch_gbps / gbps, daemon_gbps / gbps,
                  daemon_prefetch_gbps / gbps);
    Add({"mixed", "baseline", gbps, ops / secs, lat.P(0.5), lat.P(0.99), -1, note});
  }
  std::filesystem::remove_all(bdir);
}

}  // namespace ecstore::bench
