// The `erase` workload: removing entries that have disk copies (every erase then needs a
// durable tombstone), as `ec-store --server ... evict` does through a same-host daemon: key by
// key (ERASE, one tombstone write and fdatasync each, as remote evict did before ERASE_MANY)
// and in batches (ERASE_MANY, one per request of up to 1024 keys). Held to the same EraseMany
// run on a store in the bench's own process (same entries, same disk): the work without the
// daemon in between. GB/s counts the bytes of the entries removed; all entries have one size,
// so its ratios are those of keys per second.
#include <chrono>
#include <filesystem>
#include <thread>

#include "bench/results.h"
#include "bench/workloads.h"
#include "net/protocol.h"

namespace ecstore::bench {
namespace {

constexpr uint64_t kEraseEntryBytes = 64 << 10;

std::vector<std::string> EraseKeys(size_t from, size_t n) {
  std::vector<std::string> keys;
  for (size_t i = from; i < from + n; ++i) keys.push_back(Key(i));
  return keys;
}

std::vector<std::pair<std::string, std::string>> NsKeys(const std::vector<std::string>& keys) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& k : keys) out.emplace_back("bench", k);
  return out;
}

// Puts the keys, then waits until the store's disk holds each of them (write-back spills
// them in the background), so that every erase must make a tombstone durable.
void FillOnDisk(Cache* c, const std::vector<std::string>& keys) {
  auto before = c->Stats();
  Die(before.status(), "erase stats");
  const uint64_t want = before->disk().entries + keys.size();
  std::vector<uint8_t> v = Embedding(kEraseEntryBytes / 2, 7);
  const TensorMeta meta{DType::kBF16, {static_cast<int64_t>(kEraseEntryBytes / 2)}};
  for (const std::string& k : keys)
    Die(c->Put("bench", k, meta, {v.data(), v.size()}), "erase put");
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  for (;;) {
    auto st = c->Stats();
    Die(st.status(), "erase stats");
    if (st->disk().entries >= want) return;
    if (Clock::now() > deadline) Die(Status::Busy("entries not on disk after 120 s"), "erase fill");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// EraseMany in requests of `batch` keys; returns keys per second, with each request's latency.
double EraseBatches(Cache* c, const std::vector<std::string>& keys, size_t batch, Latencies* lat) {
  const auto t0 = Clock::now();
  for (size_t at = 0; at < keys.size(); at += batch) {
    std::vector<std::string> part(keys.begin() + at,
                                  keys.begin() + std::min(keys.size(), at + batch));
    std::vector<bool> erased;
    const auto t = Clock::now();
    Die(c->EraseMany(NsKeys(part), &erased), "erase many");
    lat->Add(t);
    for (bool e : erased)
      if (!e) Die(Status::NotFound("an entry put for the erase bench was not there"), "erase");
  }
  return static_cast<double>(keys.size()) / Since(t0);
}

void AddRow(const char* system, double keys_per_s, Latencies& lat, const std::string& note) {
  Add({"erase", system, keys_per_s * kEraseEntryBytes / 1e9, keys_per_s, lat.P(0.5), lat.P(0.99),
       -1, note});
}

}  // namespace

void EraseWorkload(const Config& cfg) {
  const size_t n = cfg.quick ? 512 : 4096;  // per row
  const uint64_t pool = 2 * n * kEraseEntryBytes + 64 * kMiB;
  const std::string note_n = std::to_string(n) + " entries of 64 KiB, each with a disk copy";
  {
    Progress("erase: the limit, EraseMany in this process");
    const std::string sdir = cfg.dir + "/erase";
    auto store = OpenStore(cfg, sdir, pool);
    const auto keys = EraseKeys(0, n);
    FillOnDisk(store.get(), keys);
    Latencies lat;
    const double rate = EraseBatches(store.get(), keys, net::kMaxBatch, &lat);
    AddRow("limit", rate, lat,
           "EraseMany on a store in this process, 1024 keys a call (one tombstone write each); " +
               note_n + "; p50/p99 per call");
    store.reset();
    std::filesystem::remove_all(sdir);
  }
  Daemon daemon(cfg, cfg.dir + "/erase-daemon", pool);
  net::Client* c = daemon.client();
  if (!c) {
    Add({"erase", "ec-store", 0, 0, 0, 0, -1, "not run: " + daemon.why()});
    return;
  }
  Progress("erase: through a same-host daemon, batched and key by key");
  const auto batched = EraseKeys(n, n), one_by_one = EraseKeys(2 * n, n);
  FillOnDisk(c, batched);
  FillOnDisk(c, one_by_one);
  Latencies lat_batch, lat_keys;
  const double rate = EraseBatches(c, batched, net::kMaxBatch, &lat_batch);
  const auto t0 = Clock::now();
  for (const std::string& k : one_by_one) {
    const auto t = Clock::now();
    Die(c->Erase("bench", k), "erase");
    lat_keys.Add(t);
  }
  const double rate_keys = static_cast<double>(n) / Since(t0);
  AddRow("ec-store", rate, lat_batch,
         "through a same-host daemon: ERASE_MANY, 1024 keys a request; " + note_n +
             "; p50/p99 per request");
  AddRow("ec-store-keys", rate_keys, lat_keys,
         "the same daemon key by key (ERASE, one tombstone write each, as remote evict did "
         "before ERASE_MANY); " +
             note_n + "; p50/p99 per key");
}

}  // namespace ecstore::bench
