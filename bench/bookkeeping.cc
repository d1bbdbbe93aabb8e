// The structures beside the payloads: index (Store::Open and Lookup at 100k-10M entries),
// alloc (the pool allocator's fragmentation against reference allocators), policy (eviction
// policies over synthetic traces).
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "bench/policy.h"
#include "bench/ref_allocators.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "index/index.h"
#include "store/pool_allocator.h"

namespace ecstore::bench {
namespace {

// Heap bytes in use (malloc'd and not freed, mmap'd chunks included). Unlike resident memory
// it does not hide what an open reuses of memory freed before it (building the index leaves
// hundreds of MB freed but resident, which made the open look ~2x smaller than it is).
uint64_t HeapInUse() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
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

}  // namespace

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
    auto store = OpenStore(cfg, sdir, 16 * kMiB);
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

// Eviction policies over synthetic traces (bench/policy.h says how they are made): what each
// keeps at 5-50% of the working set, against a clairvoyant bound.
void PolicyWorkload(const Config& cfg) {
  TraceParams p;
  if (cfg.quick) p.requests = 100000, p.items = 8000, p.drift_every = 10000, p.drift_step = 200;
  if (cfg.drift_every > 0) p.drift_every = cfg.drift_every, p.drift_step = cfg.drift_step;
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

}  // namespace ecstore::bench
