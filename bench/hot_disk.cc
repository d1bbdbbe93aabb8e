// put, get_hot and get_disk share one data set: hot in a pool that holds it, then on disk.
// Each is paired, in the same run, with the same work done the simplest way (memcpy of the
// same entries; raw O_DIRECT reads of the store's own records) and with the file baseline.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "bench/baseline.h"
#include "bench/pinned_buffer.h"
#include "bench/record_probe.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "disk/aligned_buffer.h"

namespace ecstore::bench {
namespace {

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
double TimeGets(Cache* store, const std::vector<Entry>& entries, std::span<uint8_t> dst,
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

// What put, get_hot and get_disk share: the entries, the store and the baseline holding them,
// and the destination every get copies into.
struct HotData {
  HotData(const Config& c, Payloads& p)
      : cfg(c),
        pl(p),
        pool(c.quick ? 768 * kMiB : 2 * kGiB),
        sdir(c.dir + "/hot"),
        bdir(c.dir + "/baseline-hot"),
        rounds(c.quick ? 3 : 8),
        base(bdir) {  // makes its directory only when it first saves
    std::filesystem::remove_all(sdir);
    std::filesystem::remove_all(bdir);
    entries = MakeEntries(pool * 3 / 4, 1);
    for (auto& e : entries) total += Bytes(e);
    for (const Entry& e : entries) keys.push_back(e.key);
    if (cfg.Want("put") || cfg.Want("get_hot")) pinned.emplace(entries);
    store = OpenStore(cfg, sdir, pool);
    std::memset(dst.data(), 0, dst.size());
  }
  // Closes the store (its pool persists to disk) and opens it again with an empty pool.
  void Reopen(uint64_t pool_bytes, bool promote) {
    Die(store->Close(), "close");
    store.reset();
    store = OpenStore(cfg, sdir, pool_bytes, promote);
  }

  const Config& cfg;
  Payloads& pl;
  const uint64_t pool;
  const std::string sdir, bdir;
  const int rounds;  // get_hot's passes over the entries
  FileBaseline base;
  std::vector<Entry> entries;
  std::vector<std::string> keys;
  uint64_t total = 0;
  std::optional<PinnedEntries> pinned;  // put's and get_hot's limits copy to and from it
  std::unique_ptr<Store> store;
  AlignedBuffer dst{60 * kMiB};
};

// Hands each entry's payload (made outside the timing) to `put`, timed put by put; adds the
// row of `workload` and `system`.
void TimePuts(HotData& d, const char* workload, const char* system, const char* note,
              const std::function<void(size_t, std::span<const uint8_t>)>& put) {
  Latencies lat;
  double secs = 0;
  for (size_t i = 0; i < d.entries.size(); ++i) {
    auto bytes = d.pl.Get(d.entries[i].shape, i);
    auto t = Clock::now();
    put(i, bytes);
    lat.Add(t);
    secs += Since(t);
  }
  Add({workload, system, d.total / secs / 1e9, d.entries.size() / secs, lat.P(0.5), lat.P(0.99), -1,
       note});
}

// The puts that fill the store (and the baseline) for every workload of the data set; with
// `put` wanted, timed against their limit.
void PutWorkload(HotData& d) {
  if (d.cfg.Want("put")) {
    // The limit is the same copy done the simplest way: the same payloads, from the same
    // sources, in the same order, memcpy'd into pinned memory as large as the pool's contents
    // (put also checksums them, which this leaves out).
    Progress("limit: memcpy of put's payloads into pinned memory");
    TimePuts(d, "memcpy_puts", "limit",
             "memcpy of put's payloads (same sources, same order) into pinned memory, no checksum",
             [&](size_t i, std::span<const uint8_t> b) {
               std::memcpy(d.pinned->entry(i), b.data(), b.size());
             });
  }
  Progress("put: ec-store");
  TimePuts(d, "put", "ec-store", "copy into the pinned pool + xxh3 checksum",
           [&](size_t i, std::span<const uint8_t> b) {
             Die(d.store->Put("bench", d.entries[i].key, Payloads::Meta(d.entries[i].shape), b),
                 "put");
           });
  Progress("put: baseline");
  TimePuts(d, "put", "baseline", "buffered write of a safetensors file, no fsync",
           [&](size_t i, std::span<const uint8_t> b) {
             Die(d.base.Save(d.entries[i].key, Payloads::Meta(d.entries[i].shape), b),
                 "baseline save");
           });
  ::sync();  // its dirty pages must not be written back during the next measurements
}

// Runs `get` over every entry, `rounds` times, each timed; returns the seconds.
double TimeEachEntry(HotData& d, int rounds, Latencies* lat,
                     const std::function<void(size_t)>& get) {
  auto t0 = Clock::now();
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < d.entries.size(); ++i) {
      auto t = Clock::now();
      get(i);
      lat->Add(t);
    }
  return Since(t0);
}

void GetHotWorkload(HotData& d) {
  const int rounds = d.rounds;
  const double n = static_cast<double>(rounds) * static_cast<double>(d.entries.size());
  // The limit is the same work done the simplest way: the same entry sizes, in the same
  // order, memcpy'd from memory mapped as the pool is (pinned, huge pages where there are
  // any) and as large as its contents, into the same reused, pre-faulted destination.
  Progress("limit: memcpy of the same entries into the same destination");
  Latencies mlat;
  double secs = TimeEachEntry(d, rounds, &mlat, [&](size_t i) {
    std::memcpy(d.dst.data(), d.pinned->entry(i), Bytes(d.entries[i]));
  });
  Add({"memcpy_entries", "limit", rounds * d.total / secs / 1e9, n / secs, mlat.P(0.5),
       mlat.P(0.99), -1,
       "memcpy of get_hot's entries (same sizes, same order) into the same destination"});
  d.pinned.reset();
  Progress("get_hot: ec-store copy-out");
  Latencies lat;
  secs = TimeEachEntry(d, rounds, &lat, [&](size_t i) {
    Die(d.store->Get("bench", d.entries[i].key, {d.dst.data(), d.dst.size()}).status(), "get_hot");
  });
  Add({"get_hot", "ec-store", rounds * d.total / secs / 1e9, n / secs, lat.P(0.5), lat.P(0.99), -1,
       "pool hit copied into a caller buffer"});
  Progress("get_hot: ec-store lease");
  Latencies llat;
  volatile uint8_t sink = 0;
  secs = TimeEachEntry(d, rounds, &llat, [&](size_t i) {
    auto lease = d.store->Acquire("bench", d.entries[i].key);
    Die(lease.status(), "lease");
    sink = sink + lease->data()[0];  // entry ready to use: pinned bytes, zero copies
  });
  Add({"get_hot", "ec-store-lease", 0, n / secs, llat.P(0.5), llat.P(0.99), -1,
       "entry ready to use: read lease on pinned pool memory"});
  std::vector<uint8_t> file;
  uint64_t off;
  TensorMeta meta;
  Progress("get_hot: baseline warm");
  Latencies blat;
  secs = TimeEachEntry(d, rounds, &blat, [&](size_t i) {
    if (!d.base.Exists(d.entries[i].key)) Die(Status::NotFound(d.entries[i].key), "exists");
    Die(d.base.Load(d.entries[i].key, &file, &off, &meta), "baseline load");
  });
  Add({"get_hot", "baseline", rounds * d.total / secs / 1e9, n / secs, blat.P(0.5), blat.P(0.99),
       -1, "stat + open + read + parse, page cache warm"});
  Progress("get_hot: baseline cold");
  Latencies clat;
  double io_secs = 0;
  for (auto& e : d.entries) {
    d.base.DropCache(e.key);
    auto t = Clock::now();
    Die(d.base.Load(e.key, &file, &off, &meta), "baseline load");
    clat.Add(t);
    io_secs += Since(t);
  }
  Add({"get_hot", "baseline-cold", d.total / io_secs / 1e9, d.entries.size() / io_secs, clat.P(0.5),
       clat.P(0.99), -1, "page cache dropped for its files (posix_fadvise DONTNEED)"});
}

// The raw reads get_disk's gets are paired with: each entry's record, one O_DIRECT request,
// no checksum, into the memory the get's own read lands in -- the caller's buffer where the
// get reads straight into it, pinned huge-page memory where it reads into the pool (which
// then tees the pieces into the caller's buffer). Where a read lands matters on a virtio
// disk (bench/pinned_buffer.h): a get that reads into the caller's 4 KiB pages is held to a
// raw read into those same pages, not to one into huge pages, which it cannot do; the ratio
// to the huge-page read stays in the row's note.
class RawReads {
 public:
  explicit RawReads(HotData& d) : d_(d) { Find(); }
  void Find() {  // again after a compaction moved records
    auto probe = RecordReadProbe::Open(d_.sdir, "bench", d_.keys);
    Die(probe.status(), "find the entries' records");
    probe_ = std::move(probe).value();
  }
  Clock::time_point Read(size_t i, std::span<uint8_t> into) {
    auto t = Clock::now();
    Die(probe_->Read(i, into).status(), "raw read of an entry's record");
    return t;
  }
  Clock::time_point ReadIntoHugePages(size_t i) {
    return Read(i, landing_.span(0, landing_.size()));
  }
  RecordReadProbe& probe() { return *probe_; }

 private:
  HotData& d_;
  std::unique_ptr<RecordReadProbe> probe_;
  PinnedBuffer landing_{kBlockSize + RoundUpBlock(60 * kMiB)};
};

// One at a time, with promotion off (the store as HotAndDiskWorkloads reopened it): each get is one
// entry's O_DIRECT read into the caller's buffer, paired entry by entry with the raw read of its
// record and the baseline's cold read.
void GetDiskOneByOne(HotData& d, RawReads& raw_reads) {
  Progress("get_disk: ec-store");
  Latencies lat;
  TimedReads large;
  Companion raw, huge, cold;
  raw.read = [&](size_t i) { return raw_reads.Read(i, {d.dst.data(), d.dst.size()}); };
  huge.read = [&](size_t i) { return raw_reads.ReadIntoHugePages(i); };
  std::vector<uint8_t> file;
  uint64_t off;
  TensorMeta meta;
  cold.read = [&](size_t i) {
    d.base.DropCache(d.entries[i].key);
    auto t = Clock::now();
    Die(d.base.Load(d.entries[i].key, &file, &off, &meta), "baseline load");
    return t;
  };
  double secs = TimeGets(d.store.get(), d.entries, {d.dst.data(), d.dst.size()}, &lat, &large,
                         {&raw, &huge, &cold});
  const char* raw_note =
      "O_DIRECT read of the store's own record of each entry (the same blocks), one request, "
      "into the gets' own buffer (4 KiB pages), no checksum; paired with the store's gets";
  raw.all.Report("disk_read_entries", "limit", raw_note);
  raw.large.Report("disk_read_entries_10MB+", "limit", raw_note);
  Add({"get_disk", "ec-store", d.total / secs / 1e9, d.entries.size() / secs, lat.P(0.5),
       lat.P(0.99), -1,
       "O_DIRECT io_uring read, xxh3 fed each piece as it lands, page cache bypassed; vs the "
       "same records read raw"});
  HoldToLimit("get_disk", "ec-store", "disk_read_entries");
  // The same gets, only those of entries >= 10 MB (the target).
  large.Report("get_disk", "ec-store-10MB+",
               "the gets above of entries of 10 MB or more, one at a time" +
                   raw.Paired("its record's raw read") +
                   huge.Paired("the raw read into huge pages instead") +
                   cold.Paired("the baseline's cold read"));
  HoldToLimit("get_disk", "ec-store-10MB+", "disk_read_entries_10MB+");
  cold.all.Report("get_disk", "baseline",
                  "cold: read after posix_fadvise DONTNEED, paired entry by entry with the "
                  "store's gets; vs the same records read raw");
  HoldToLimit("get_disk", "baseline", "disk_read_entries");
}

// The one-at-a-time gets into `dst`, each paired with the raw read of its record: the row
// (get_disk, system) held to the limit row `limit` made of those raw reads.
// `into_dst`: the raw reads land in dst (the get reads straight into it); otherwise in huge
// pages (the get's read lands in the pool).
void GetsPairedWithRaw(HotData& d, Cache* cache, RawReads& raw_reads, std::span<uint8_t> dst,
                       bool into_dst, const char* system, const std::string& note,
                       const char* limit, const char* limit_note) {
  Companion raw;
  raw.read = [&](size_t i) {
    return into_dst ? raw_reads.Read(i, dst) : raw_reads.ReadIntoHugePages(i);
  };
  Latencies lat;
  TimedReads large;
  double secs = TimeGets(cache, d.entries, dst, &lat, &large, {&raw});
  Add({"get_disk", system, d.total / secs / 1e9, d.entries.size() / secs, lat.P(0.5), lat.P(0.99),
       -1, note + raw.Paired("its record's raw read")});
  raw.all.Report(limit, "limit", limit_note);
  HoldToLimit("get_disk", system, limit);
  // The target is on single entries of 10 MB or more: the same gets, only those.
  const std::string large_system = std::string(system) + "-10MB+";
  const std::string large_limit = std::string(limit) + "_10MB+";
  large.Report("get_disk", large_system.c_str(), "the gets above of entries of 10 MB or more");
  raw.large.Report(large_limit.c_str(), "limit",
                   std::string(limit_note) + "; entries of 10 MB or more");
  HoldToLimit("get_disk", large_system, large_limit);
}

// The same gets into a HostBuffer (the pool's kind of memory, as an engine's staging buffers
// can be), paired with the same raw reads: where the read lands is then alike.
void GetDiskIntoHostBuffer(HotData& d, RawReads& raw_reads) {
  Progress("get_disk: ec-store into a HostBuffer");
  PinnedBuffer host_dst(60 * kMiB);
  GetsPairedWithRaw(
      d, d.store.get(), raw_reads, host_dst.span(0, host_dst.size()), true, "ec-store-hostbuf",
      "the one-at-a-time gets again, into a HostBuffer (pinned huge pages, as the pool)",
      "disk_read_entries_hostbuf", "the raw reads again, paired with the gets into a HostBuffer");
}

// The same gets with the store's defaults: each entry is promoted into the pool (its O_DIRECT
// read lands in huge pages) and teed into the caller's buffer as the pieces land.
void GetDiskPromoted(HotData& d, RawReads& raw_reads) {
  Progress("get_disk: ec-store, promoting into the pool");
  d.Reopen(256 * kMiB, /*promote=*/true);
  raw_reads.Find();  // the spill phase may have compacted
  GetsPairedWithRaw(d, d.store.get(), raw_reads, {d.dst.data(), d.dst.size()}, false,
                    "ec-store-promote",
                    "Options' default: promoted into the pool, teed into the caller's buffer as "
                    "the pieces land",
                    "disk_read_entries_promote",
                    "the raw reads again, into pinned huge-page memory (where the promoting "
                    "gets' reads land: the pool), paired with the promoting gets");
}

// The same one-at-a-time gets through `ec-store serve` on this host, over shared memory, with
// the daemon's defaults (promoted into its pool, as the row above), into the same buffer:
// the store is closed and the daemon serves its directory; afterwards it is opened again.
void GetDiskThroughDaemon(HotData& d, RawReads& raw_reads) {
  Progress("get_disk: through ec-store serve on this host");
  Die(d.store->Close(), "close");
  d.store.reset();
  {
    Daemon daemon(d.cfg, d.sdir, 256 * kMiB, /*fresh=*/false);
    if (!daemon.client()) {
      Add({"get_disk", "ec-store-daemon", 0, 0, 0, 0, -1, "not run: " + daemon.why()});
    } else {
      raw_reads.Find();
      GetsPairedWithRaw(
          d, daemon.client(), raw_reads, {d.dst.data(), d.dst.size()}, false, "ec-store-daemon",
          "a same-host daemon's Get over shared memory: promoted into its pool "
          "(a memfd: huge pages only where shmem_enabled allows), copied out of "
          "the mapping",
          "disk_read_entries_daemon",
          "the raw reads again, into pinned huge-page memory as the pool is, paired with the "
          "gets through a daemon");
    }
  }
  d.store = OpenStore(d.cfg, d.sdir, 256 * kMiB, /*promote=*/true);
}

// The same entries fetched as an engine's step does: GetMany of 8 at a time, their disk reads
// issued together (promoted into the pool, then copied out), alternated batch by batch with
// raw reads of the same records, all in flight together.
void GetDiskBatches(HotData& d, RawReads& raw_reads) {
  Progress("get_disk: ec-store GetMany batches of 8");
  d.Reopen(768 * kMiB, /*promote=*/true);
  std::vector<AlignedBuffer> outs;
  for (int i = 0; i < 8; ++i) std::memset(outs.emplace_back(60 * kMiB).data(), 0, 60 * kMiB);
  PinnedBuffer landing(8 * 60 * kMiB);  // where GetMany's reads land too: the pool's kind
  Latencies lat;
  TimedReads raw_batches;
  double secs = 0;
  for (size_t at = 0; at < d.entries.size(); at += 8) {
    std::vector<std::string> batch_keys;
    std::vector<size_t> which;
    std::vector<std::span<uint8_t>> dsts, lands;
    uint64_t bytes = 0;
    for (size_t i = at; i < std::min(d.entries.size(), at + 8); ++i) {
      batch_keys.push_back(d.entries[i].key);
      which.push_back(i);
      dsts.emplace_back(outs[i - at].data(), outs[i - at].size());
      lands.push_back(landing.span((i - at) * 60 * kMiB, 60 * kMiB));
      bytes += Bytes(d.entries[i]);
    }
    auto read_raw = [&] {  // the same records, all in flight together
      auto t = Clock::now();
      Die(raw_reads.probe().ReadMany(which, lands).status(), "raw read of a batch's records");
      raw_batches.Add(t, bytes);
    };
    if (at / 8 % 2 == 1) read_raw();
    auto t = Clock::now();
    for (auto& r : d.store->GetMany("bench", batch_keys, dsts)) Die(r.status(), "get_disk batch");
    lat.Add(t);
    secs += Since(t);
    if (at / 8 % 2 == 0) read_raw();
  }
  raw_batches.Report("disk_read_batches", "limit",
                     "the same records read 8 at a time, all in flight together, into pinned "
                     "huge-page memory, no checksum; alternated batch by batch with GetMany");
  Add({"get_disk", "ec-store-batch", d.total / secs / 1e9, d.entries.size() / secs, lat.P(0.5),
       lat.P(0.99), -1,
       "GetMany of 8 entries: their O_DIRECT reads in flight together, verified, copied "
       "out; latency per batch"});
  HoldToLimit("get_disk", "ec-store-batch", "disk_read_batches");
}

}  // namespace

void HotAndDiskWorkloads(const Config& cfg, Payloads& pl) {
  HotData d(cfg, pl);
  PutWorkload(d);
  if (cfg.Want("get_hot")) GetHotWorkload(d);
  if (cfg.Want("get_disk")) {
    Progress("get_disk: persisting the pool, reopening with an empty pool");
    d.pinned.reset();
    d.Reopen(256 * kMiB, /*promote=*/false);  // every entry is then on disk only
    RawReads raw(d);
    GetDiskOneByOne(d, raw);
    GetDiskIntoHostBuffer(d, raw);
    GetDiskDuringSpill(d.store.get(), d.entries, d.total, d.dst, d.pl);
    GetDiskPromoted(d, raw);
    GetDiskThroughDaemon(d, raw);
    GetDiskBatches(d, raw);
  }
  d.store.reset();
  std::filesystem::remove_all(d.sdir);
  std::filesystem::remove_all(d.bdir);
}

}  // namespace ecstore::bench
