// The `events` workload: the entry event stream (events/publisher.h) as a router sees it.
//   events_put    puts with the publisher set (and a subscriber that never reads) against the
//                 same puts with none, alternating rounds on one store: the limit is the
//                 store without events.
//   events_lag    from a put's acknowledgement to its EcStored at a subscriber (loopback TCP,
//                 decoded), at 1,000 puts a second; and the publisher thread's CPU then.
//   events_route  holder precision: a trace with evictions over 3 stores, routed by the
//                 index the events build, against an LRU guess of key -> node (what a router
//                 keeps without events): the share of decisions that name a node holding
//                 the key.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <msgpack.hpp>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "base/mutex.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "events/publisher.h"
#include "store/store.h"

namespace ecstore::bench {
namespace {

constexpr uint64_t kSmall = 64 << 10;  // lag and CPU: the pacing, not the copy, is measured

std::string Endpoint(const Config& cfg, const std::string& name) {
  return "ipc://" + std::filesystem::absolute(cfg.dir + "/" + name + ".sock").string();
}

std::unique_ptr<events::EventPublisher> Publisher(const std::string& at, const std::string& node,
                                                  Store* store) {
  events::EventOptions o;
  o.publish = at;
  o.node = node;
  return Must(events::EventPublisher::Start(o, store), "events publisher");
}

// The publisher thread's CPU time so far (ns), from /proc's schedstat of the thread named
// ec-events; 0 where there is none.
uint64_t PublisherCpuNs() {
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(t.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "ec-events") continue;
    std::ifstream sched(t.path() / "schedstat");
    uint64_t ns = 0;
    sched >> ns;
    return ns;
  }
  return 0;
}

// A subscriber thread: every EcStored it decodes, with the time it arrived, by key.
class Listener {
 public:
  Listener(zmq::context_t& ctx, const std::vector<std::string>& at)
      : sub_(ctx, zmq::socket_type::sub) {
    sub_.set(zmq::sockopt::subscribe, "");
    sub_.set(zmq::sockopt::rcvtimeo, 50);
    for (const auto& a : at) sub_.connect(a);
    thread_ = std::thread([this] { Run(); });
  }
  ~Listener() {
    stop_ = true;
    thread_.join();
  }
  // (node, medium, stored) for each event, applied by `apply` on this thread.
  std::function<void(const std::string& key, const std::string& node, const std::string& medium,
                     bool stored, Clock::time_point at)>
      apply;

 private:
  void Run() {
    while (!stop_) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(sub_, std::back_inserter(frames)) || frames.size() != 3) continue;
      const auto at = Clock::now();
      msgpack::object_handle h =
          msgpack::unpack(static_cast<const char*>(frames[2].data()), frames[2].size());
      const msgpack::object& batch = h.get();
      const msgpack::object& evs = batch.via.array.ptr[1];
      for (uint32_t i = 0; i < evs.via.array.size; ++i) {
        const msgpack::object* e = evs.via.array.ptr[i].via.array.ptr;
        const std::string kind = e[0].as<std::string>();
        if (kind == "EcCleared") continue;
        const msgpack::object& keys = e[2];
        for (uint32_t k = 0; k < keys.via.array.size; ++k)
          apply(keys.via.array.ptr[k].as<std::string>(), e[3].as<std::string>(),
                e[4].as<std::string>(), kind == "EcStored", at);
      }
    }
  }
  zmq::socket_t sub_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void PutThroughput(const Config& cfg, Payloads& pl) {
  Progress("events: puts with the publisher and without");
  const std::string dir = cfg.dir + "/events-put";
  Options so;  // the pool holds the 64 entries, and nothing is written: the put path alone
  so.pool_bytes = 512 * kMiB;
  so.write_back = false;
  std::filesystem::remove_all(dir);
  auto store = Must(Store::Open(dir, so), "events store");
  auto pub = Publisher(Endpoint(cfg, "events-put"), "bench", store.get());
  zmq::context_t ctx(1);
  zmq::socket_t idle(ctx, zmq::socket_type::sub);  // subscribed, never read: its queue fills
  idle.set(zmq::sockopt::subscribe, "");
  idle.set(zmq::sockopt::rcvhwm, 16);
  idle.connect(Endpoint(cfg, "events-put"));
  const int rounds = cfg.quick ? 4 : 10, per_round = cfg.quick ? 100 : 400;
  Latencies lat[2];
  double secs[2] = {0, 0};
  for (int r = 0; r < 2 * rounds; ++r) {
    const int on = r % 2;
    store->SetEvents(on ? pub.get() : nullptr);
    const auto t0 = Clock::now();
    for (int i = 0; i < per_round; ++i) {  // 64 keys replaced over and over: the pool holds them
      const auto t = Clock::now();
      Die(store->Put("bench", Key(i % 64), Payloads::Meta(0), pl.Get(0, i)), "events put");
      lat[on].Add(t);
    }
    secs[on] += Since(t0);
  }
  store->SetEvents(nullptr);
  const double n = static_cast<double>(rounds) * per_round;
  const double bytes = static_cast<double>(pl.Get(0, 0).size());
  const double rate_off = n / secs[0], rate_on = n / secs[1];
  Add({"events_put", "limit", rate_off * bytes / 1e9, rate_off, lat[0].P(0.5), lat[0].P(0.99), -1,
       "Put of 2.87 MB entries into the pool (64 keys replaced), no publisher; rounds "
       "alternate with the row below"});
  Add({"events_put", "ec-store", rate_on * bytes / 1e9, rate_on, lat[1].P(0.5), lat[1].P(0.99), -1,
       "the same puts with the publisher set (EcRemoved + EcStored each) and a subscriber that "
       "never reads; " +
           std::to_string(pub->batches()) + " batches"});
  HoldToLimit("events_put", "ec-store", "events_put");
  pub.reset();
  store.reset();
  std::filesystem::remove_all(dir);
}

void LagAndCpu(const Config& cfg) {
  Progress("events: lag to a subscriber at 1,000 puts a second");
  const std::string dir = cfg.dir + "/events-lag";
  auto store = OpenStore(cfg, dir, 256 * kMiB);
  const std::string at = Endpoint(cfg, "events-lag");
  auto pub = Publisher(at, "bench", store.get());
  store->SetEvents(pub.get());
  zmq::context_t ctx(1);
  Mutex mu;
  std::unordered_map<std::string, Clock::time_point> acked, arrived;
  Listener sub(ctx, {at});
  sub.apply = [&](const std::string& key, const std::string&, const std::string& medium,
                  bool stored, Clock::time_point t) {
    MutexLock l(&mu);
    if (stored && medium == "pool") arrived.emplace(key, t);
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the SUB connects
  const int n = cfg.quick ? 1000 : 5000;
  const std::vector<uint8_t> v = Embedding(kSmall / 2, 3);
  const TensorMeta meta{DType::kBF16, {static_cast<int64_t>(kSmall / 2)}};
  const uint64_t cpu0 = PublisherCpuNs();
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::microseconds(1000 * i));
    const std::string k = Key(1000000 + i);
    Die(store->Put("bench", k, meta, {v.data(), v.size()}), "events lag put");
    const auto t = Clock::now();
    MutexLock l(&mu);
    acked.emplace(k, t);
  }
  const double wall = Since(t0);
  const uint64_t cpu = PublisherCpuNs() - cpu0;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Latencies lag;
  size_t missing = 0;
  {
    MutexLock l(&mu);
    for (const auto& [k, t] : acked) {
      auto it = arrived.find(k);
      if (it == arrived.end()) {
        ++missing;
        continue;
      }
      lag.us.push_back(std::chrono::duration<double, std::micro>(it->second - t).count());
    }
  }
  Add({"events_lag", "ec-store", 0, n / wall, lag.P(0.5), lag.P(0.99), -1,
       "a put's acknowledgement to its EcStored decoded at a subscriber (ZMQ over ipc), "
       "1,000 puts/s of 64 KiB; " +
           std::to_string(missing) + " of " + std::to_string(n) + " not seen (goal p99 <= 5 ms)"});
  char note[160];
  std::snprintf(note, sizeof note,
                "the publisher thread at 1,000 puts/s: %.2f %% of a core (goal < 1 %%)",
                100.0 * static_cast<double>(cpu) / 1e9 / wall);
  Add({"events_cpu", "ec-store", 0, n / wall, 0, 0, -1, note});
  store->SetEvents(nullptr);
  pub.reset();
  store.reset();
  std::filesystem::remove_all(dir);
}

// One pass of a Zipf trace over 3 stores whose pools and disks hold a fifth of the catalog
// (so entries are evicted): each request is sent to the node the router names as holding
// its key (the events' index, or the LRU guess), else to the node by the key's hash, which
// computes and puts it. Precision: of the decisions that named a node, the share where that
// node held the key.
class RoutePass {
 public:
  static constexpr int kNodes = 3;
  static constexpr uint64_t kEntry = 1 << 20, kPool = 32 * kMiB, kDisk = 64 * kMiB;

  RoutePass(const Config& cfg, bool exact) : cfg_(cfg), exact_(exact) {
    std::vector<std::string> ats;
    for (int n = 0; n < kNodes; ++n) {
      Options o;
      o.pool_bytes = kPool;
      o.disk_quota_bytes = kDisk;
      o.segment_bytes = 16 * kMiB;
      std::filesystem::remove_all(Dir(n));
      stores_.push_back(Must(Store::Open(Dir(n), o), "events route store"));
      ats.push_back(Endpoint(cfg, "events-route-" + std::to_string(n)));
      pubs_.push_back(Publisher(ats.back(), "node-" + std::to_string(n), stores_.back().get()));
      stores_.back()->SetEvents(pubs_.back().get());
    }
    sub_ = std::make_unique<Listener>(ctx_, ats);
    sub_->apply = [this](const std::string& key, const std::string& node, const std::string& medium,
                         bool stored,
                         Clock::time_point) { Apply(key, node.back() - '0', medium, stored); };
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the SUB connects
  }
  ~RoutePass() {
    sub_.reset();
    for (auto& s : stores_) s->SetEvents(nullptr);
    pubs_.clear();
    stores_.clear();
    for (int n = 0; n < kNodes; ++n) std::filesystem::remove_all(Dir(n));
  }

  // Requests at 1,000 a second; (precision, decisions that named a node).
  std::pair<double, uint64_t> Run(size_t requests) {
    const std::vector<uint8_t> v = Embedding(kEntry / 2, 5);
    const TensorMeta meta{DType::kBF16, {static_cast<int64_t>(kEntry / 2)}};
    std::vector<uint8_t> out(kEntry);
    Zipf zipf(1500, 0.9);
    std::mt19937_64 rng(11);
    uint64_t right = 0, named = 0;
    const auto t0 = Clock::now();
    for (size_t r = 0; r < requests; ++r) {
      std::this_thread::sleep_until(t0 + std::chrono::microseconds(1000 * r));
      const std::string key = Key(zipf(rng));
      int node = Named(key);
      const bool guessed = node >= 0;
      if (!guessed) node = static_cast<int>(std::hash<std::string>()(key) % kNodes);
      auto got = stores_[node]->Get("bench", key, {out.data(), out.size()});
      named += guessed;
      right += guessed && got.ok();
      if (!got.ok()) Die(stores_[node]->Put("bench", key, meta, {v.data(), v.size()}), "route");
      if (!exact_) Remember(key, node);
    }
    return {named ? static_cast<double>(right) / static_cast<double>(named) : 0, named};
  }

 private:
  std::string Dir(int n) const { return cfg_.dir + "/events-route-" + std::to_string(n); }

  void Apply(const std::string& key, int n, const std::string& medium, bool stored) {
    MutexLock l(&mu_);
    auto& media = index_[key][n];
    if (stored) {
      media.insert(medium);
    } else {
      media.erase(medium);
      if (media.empty()) index_[key].erase(n);
    }
  }

  int Named(const std::string& key) {
    if (exact_) {
      MutexLock l(&mu_);
      auto it = index_.find(key);
      return it != index_.end() && !it->second.empty() ? it->second.begin()->first : -1;
    }
    auto it = lru_at_.find(key);
    return it != lru_at_.end() ? it->second->second : -1;
  }

  // As many keys as the 3 nodes hold, most recent first.
  void Remember(const std::string& key, int node) {
    if (auto it = lru_at_.find(key); it != lru_at_.end()) lru_.erase(it->second);
    lru_.emplace_front(key, node);
    lru_at_[key] = lru_.begin();
    if (lru_.size() > kNodes * (kPool + kDisk) / kEntry) {
      lru_at_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }

  const Config& cfg_;
  const bool exact_;
  std::vector<std::unique_ptr<Store>> stores_;
  std::vector<std::unique_ptr<events::EventPublisher>> pubs_;
  zmq::context_t ctx_{1};
  std::unique_ptr<Listener> sub_;
  Mutex mu_;
  std::unordered_map<std::string, std::map<int, std::set<std::string>>> index_;
  std::list<std::pair<std::string, int>> lru_;
  std::unordered_map<std::string, std::list<std::pair<std::string, int>>::iterator> lru_at_;
};

}  // namespace

void EventsWorkload(const Config& cfg, Payloads& pl) {
  PutThroughput(cfg, pl);
  LagAndCpu(cfg);
  const size_t requests = cfg.quick ? 3000 : 15000;
  Progress("events: routing a trace by the events' index");
  const auto [exact, exact_n] = RoutePass(cfg, true).Run(requests);
  Progress("events: routing the trace by an LRU guess");
  const auto [lru, lru_n] = RoutePass(cfg, false).Run(requests);
  const std::string trace = std::to_string(requests) +
                            " requests, Zipf 0.9 over 1,500 keys of 1 MiB, 3 nodes holding ~290";
  char p[2][64];
  std::snprintf(p[0], sizeof p[0], "holder precision %.4f", exact);
  std::snprintf(p[1], sizeof p[1], "holder precision %.4f", lru);
  Add({"events_route", "ec-store", 0, 0, 0, 0, -1,
       std::string(p[0]) + " (goal >= 0.99), routed by the index the nodes' events build: " +
           std::to_string(exact_n) + " decisions named a holder; " + trace});
  Add({"events_route", "lru-guess", 0, 0, 0, 0, -1,
       std::string(p[1]) +
           ", routed by an LRU of key -> the node it was sent to, as many keys "
           "as the nodes hold (a router without events): " +
           std::to_string(lru_n) + " decisions named a node; " + trace});
}

}  // namespace ecstore::bench
