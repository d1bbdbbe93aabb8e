#include "sim/fleet.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <unordered_map>
#include <utility>

#include "cluster/cluster_cache.h"
#include "cluster/node_guard.h"
#include "sim/fake_node.h"

namespace ecstore::sim {
namespace {

constexpr char kNs[] = "qwen2.5-vl-7b";   // one model's namespace, as the connector makes it
constexpr uint64_t kRowBytes = 3584 * 2;  // one bf16 row of a 3584-wide encoder output

// An image's key as vLLM makes it (mm_hash: 64 hex digits of a content hash).
std::string MmHash(size_t i) {
  const XXH128_hash_t h = XXH3_128bits_withSeed(&i, sizeof(i), 0x6d6d);
  char out[65];
  std::snprintf(out, sizeof(out), "%016llx%016llx%016llx%016llx",
                static_cast<unsigned long long>(h.high64), static_cast<unsigned long long>(h.low64),
                static_cast<unsigned long long>(h.low64 ^ h.high64),
                static_cast<unsigned long long>(h.high64 * 31 + i));
  return out;
}

// Its encoder output: 3 to 60 MB, log-uniform, whole rows.
uint64_t SizeOf(size_t i) {
  const uint64_t h = XXH3_64bits_withSeed(&i, sizeof(i), 0x5a5a);
  const double u = static_cast<double>(h >> 11) / 9007199254740992.0;
  return static_cast<uint64_t>(3e6 * std::pow(20.0, u) / kRowBytes + 1) * kRowBytes;
}

TensorMeta MetaOf(uint64_t bytes) {
  TensorMeta m;
  m.shape = {static_cast<int64_t>(bytes / kRowBytes), 3584};
  return m;
}

// Ranks 0..n-1 drawn with probability proportional to 1/(rank+1)^s.
class Zipf {
 public:
  Zipf(size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) cdf_[i] = sum += 1.0 / std::pow(static_cast<double>(i + 1), s);
    for (double& c : cdf_) c /= sum;
  }
  size_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

cluster::NodeInfo Record(const std::string& id, size_t host, uint64_t capacity, size_t keep,
                         uint64_t incarnation) {
  cluster::NodeInfo n;
  n.id = id;
  n.tcp = "10." + std::to_string(host / 65536 % 256) + "." + std::to_string(host / 256 % 256) +
          "." + std::to_string(host % 256) + ":7000";
  n.capacity = capacity;
  n.keep = keep;
  n.incarnation = incarnation;
  return n;
}

std::string NodeId(size_t i) {
  char id[32];
  std::snprintf(id, sizeof(id), "node-%05zu", i);
  return id;
}

// One simulated fleet on a virtual clock: the trace's requests, encoder runs finishing and
// churn are events in time order.
class Fleet {
 public:
  explicit Fleet(const FleetOptions& o);
  FleetReport Run();

 private:
  enum Kind { kRequest, kDone, kChurn, kLapse, kRestart, kBurstKill, kBurstLapse, kBurstBack };
  struct Event {
    uint64_t at_us;
    Kind kind;
    size_t arg;  // kDone: the image; kChurn: the event's number; kRestart: keeps what it held
    std::string id;
    bool operator>(const Event& e) const { return at_us > e.at_us; }
  };

  void Schedule(uint64_t at_us, Kind kind, size_t arg = 0, std::string id = {}) {
    queue_.push({at_us, kind, arg, std::move(id)});
  }
  void ScheduleChurn();
  void WarmStart();
  void Request();
  void Done(size_t image);
  void Churn(size_t n);
  void Restart(const std::string& id, bool keeps);
  void Burst(Kind step);
  // Installs members_ everywhere: the client's view, the simulator's layout, and each live
  // member dropping what left its places. `moved`, where given, gets the shares of held keys
  // and bytes whose owner changed.
  void Install(FleetEvent* moved);
  // fresh: a node new to the fleet (its share of the owners moves to it; measured).
  void Join(const std::string& id, const char* what, bool fresh);
  // clean: a leave whose node's keys are still held (measured); else a lapse.
  void Remove(const std::string& id, const char* what, bool clean);
  size_t Index(const std::string& id) const;
  void FinishEvents();

  const FleetOptions o_;
  std::atomic<uint64_t> now_us_{0};
  std::mt19937_64 rng_;
  Zipf zipf_;
  std::map<std::string, std::unique_ptr<FakeNode>> nodes_;  // every node there ever was
  std::map<std::string, uint64_t> incarnation_;
  std::vector<cluster::NodeInfo> members_;  // in id order
  cluster::Layout layout_;
  std::unique_ptr<cluster::ClusterCache> cache_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  std::unordered_map<size_t, int> computing_;  // image -> encoder runs in progress
  std::vector<uint64_t> minute_requests_, minute_hits_;
  std::vector<size_t> event_minute_;
  // A joiner's first minute: its puts and everyone's.
  std::string joiner_;
  uint64_t joiner_until_us_ = 0, window_puts_ = 0, joiner_puts_ = 0;
  size_t joiner_event_ = 0;
  size_t next_node_ = 0;
  std::vector<std::string> burst_;  // the nodes the burst kills
  std::vector<double> owner_us_;
  FleetReport r_;
};

Fleet::Fleet(const FleetOptions& o) : o_(o), rng_(o.seed), zipf_(o.catalog, o.zipf) {
  cluster::ClusterOptions co;
  co.replicas = o.replicas;
  co.down_for = std::chrono::milliseconds(0);  // virtual time: a down node is asked again
  co.connector = [this](const cluster::NodeInfo& n) -> Result<std::unique_ptr<Cache>> {
    return nodes_.at(n.id)->Connect();
  };
  cache_ = cluster::ClusterCache::WithMembers("sim", std::move(co));
  for (; next_node_ < o.nodes; ++next_node_) {
    const std::string id = NodeId(next_node_);
    nodes_[id] = std::make_unique<FakeNode>(id, o.node_capacity, &now_us_);
    members_.push_back(Record(id, next_node_, o.node_capacity, o.keep, ++incarnation_[id]));
  }
  Install(nullptr);
  layout_.ring.WaitForTable();
}

size_t Fleet::Index(const std::string& id) const {
  auto it =
      std::lower_bound(members_.begin(), members_.end(), id,
                       [](const cluster::NodeInfo& m, const std::string& x) { return m.id < x; });
  return it != members_.end() && it->id == id ? static_cast<size_t>(it - members_.begin())
                                              : SIZE_MAX;
}

void Fleet::Install(FleetEvent* moved) {
  std::vector<std::pair<std::string, uint64_t>> held;
  std::vector<std::string> owner_before;
  if (moved) {
    std::unordered_map<std::string, uint64_t> distinct;  // a key held at two places once
    for (const auto& [id, node] : nodes_)
      if (!node->down())
        for (auto& h : node->Held()) distinct.insert(std::move(h));
    held.assign(distinct.begin(), distinct.end());
    for (const auto& [name, bytes] : held) {
      const size_t cut = name.find('\0');
      owner_before.push_back(
          layout_.ring
              .members()[layout_.ring.Choices(kNs, std::string_view(name).substr(cut + 1), 1)[0]]
              .id);
    }
  }
  cache_->Follow(members_);
  layout_ = cluster::Layout::Of(members_, &layout_);
  for (size_t i = 0; i < members_.size(); ++i) {
    FakeNode& n = *nodes_.at(members_[i].id);
    if (n.down()) continue;
    auto face = n.Connect();
    (void)cluster::DropOffPlaces(face.get(), layout_, i);
  }
  if (!moved || held.empty()) return;
  uint64_t keys = 0, bytes = 0, all_bytes = 0;
  for (size_t k = 0; k < held.size(); ++k) {
    const auto& [name, b] = held[k];
    const size_t cut = name.find('\0');
    const std::string& now =
        layout_.ring
            .members()[layout_.ring.Choices(kNs, std::string_view(name).substr(cut + 1), 1)[0]]
            .id;
    all_bytes += b;
    if (now != owner_before[k]) ++keys, bytes += b;
  }
  moved->keys_moved = static_cast<double>(keys) / held.size();
  moved->bytes_moved = static_cast<double>(bytes) / all_bytes;
}

void Fleet::Join(const std::string& id, const char* what, bool fresh) {
  members_.push_back(Record(id, std::hash<std::string>{}(id) % 16000000, o_.node_capacity, o_.keep,
                            ++incarnation_[id]));
  std::sort(members_.begin(), members_.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  FleetEvent e{.what = what};
  Install(fresh ? &e : nullptr);
  if (fresh) e.ideal_moved = 1.0 / static_cast<double>(members_.size());
  e.minute = static_cast<double>(now_us_.load()) / 60e6;
  e.nodes = members_.size();
  r_.events.push_back(e);
  // Its first minute's puts are counted: does an empty node draw more than its share?
  joiner_ = id;
  joiner_until_us_ = now_us_.load() + 60000000;
  window_puts_ = joiner_puts_ = 0;
  joiner_event_ = r_.events.size() - 1;
}

void Fleet::Remove(const std::string& id, const char* what, bool clean) {
  const size_t at = Index(id);
  if (at == SIZE_MAX) return;
  FleetEvent e{.what = what};
  if (clean) e.ideal_moved = 1.0 / static_cast<double>(members_.size());
  members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(at));
  Install(clean ? &e : nullptr);
  e.minute = static_cast<double>(now_us_.load()) / 60e6;
  e.nodes = members_.size();
  r_.events.push_back(e);
}

// Event n of the churn, in turn: a new node joins; a node leaves cleanly (its lease revoked,
// what it held gone); a node is killed and back within its lease (it keeps what it held, a
// new incarnation); a node is killed and back after its lease lapsed (it drops all, then
// joins). Each time a member picked at random.
void Fleet::Churn(size_t n) {
  auto pick = [&] {
    for (;;) {
      const auto& m = members_[std::uniform_int_distribution<size_t>(0, members_.size() - 1)(rng_)];
      if (!nodes_.at(m.id)->down()) return m.id;
    }
  };
  const uint64_t now = now_us_.load(), ttl = static_cast<uint64_t>(o_.lease_ttl_s * 1e6);
  switch (n % 4) {
    case 0: {
      const std::string id = NodeId(next_node_++);
      nodes_[id] = std::make_unique<FakeNode>(id, o_.node_capacity, &now_us_);
      Join(id, "a new node joins", true);
      break;
    }
    case 1: {
      const std::string id = pick();
      Remove(id, "a node leaves cleanly", true);  // counted with what it held, then gone
      nodes_.at(id)->Clear();
      break;
    }
    case 2: {
      const std::string id = pick();
      nodes_.at(id)->SetDown(true);
      r_.events.push_back({.minute = now / 60e6,
                           .what = "a node killed, back within its lease",
                           .nodes = members_.size()});
      Schedule(now + ttl / 2, kRestart, 1, id);
      break;
    }
    default: {
      const std::string id = pick();
      nodes_.at(id)->SetDown(true);
      Schedule(now + ttl, kLapse, 0, id);
      Schedule(now + ttl + 30000000, kRestart, 0, id);
      break;
    }
  }
}

void Fleet::Restart(const std::string& id, bool keeps) {
  FakeNode& n = *nodes_.at(id);
  n.SetDown(false);
  if (keeps && Index(id) != SIZE_MAX) {
    members_[Index(id)].incarnation = ++incarnation_[id];  // a new process, the same record
    Install(nullptr);
    return;
  }
  n.Clear();  // its lease lapsed: what it held may be stale
  Join(id, "a killed node back after its lease lapsed (empty)", false);
}

void Fleet::ScheduleChurn() {
  const double per_hour = o_.churn_per_hour * static_cast<double>(o_.nodes);
  const size_t n = std::max<size_t>(4, static_cast<size_t>(per_hour * o_.minutes / 60 + 0.5));
  const double from = o_.warmup_minutes, to = o_.minutes - 2;
  for (size_t i = 0; i < n; ++i) {
    double at = from + (to - from) * static_cast<double>(i) / static_cast<double>(n);
    if (o_.burst_at_minute > 0 && std::abs(at - o_.burst_at_minute) < 1.5) at += 3;
    if (at < to) Schedule(static_cast<uint64_t>(at * 60e6), kChurn, i);
  }
  if (o_.burst_at_minute <= 0) return;
  // The burst: a share of the nodes killed at once; each leaves when its lease lapses and
  // comes back empty a minute later.
  const uint64_t at = static_cast<uint64_t>(o_.burst_at_minute * 60e6);
  const uint64_t ttl = static_cast<uint64_t>(o_.lease_ttl_s * 1e6);
  Schedule(at, kBurstKill);
  Schedule(at + ttl, kBurstLapse);
  Schedule(at + ttl + 60000000, kBurstBack);
}

// The burst's nodes are killed at once, leave together when their leases lapse (one watch
// event's worth), and come back empty together a minute later.
void Fleet::Burst(Kind step) {
  const double minute = static_cast<double>(now_us_.load()) / 60e6;
  if (step == kBurstKill) {  // members that answer, picked now
    for (const auto& m : members_)
      if (!nodes_.at(m.id)->down()) burst_.push_back(m.id);
    std::shuffle(burst_.begin(), burst_.end(), rng_);
    burst_.resize(static_cast<size_t>(o_.burst_share * static_cast<double>(members_.size())));
    for (const auto& id : burst_) nodes_.at(id)->SetDown(true);
    r_.events.push_back({.minute = minute,
                         .what = std::to_string(burst_.size()) + " nodes killed at once",
                         .nodes = members_.size()});
    return;
  }
  for (const auto& id : burst_) {
    if (step == kBurstLapse) {
      if (size_t at = Index(id); at != SIZE_MAX)
        members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(at));
    } else {
      nodes_.at(id)->Clear();
      nodes_.at(id)->SetDown(false);
      members_.push_back(Record(id, std::hash<std::string>{}(id) % 16000000, o_.node_capacity,
                                o_.keep, ++incarnation_[id]));
    }
  }
  std::sort(members_.begin(), members_.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  Install(nullptr);
  r_.events.push_back(
      {.minute = minute,
       .what = step == kBurstLapse ? "their leases lapse: they leave" : "they come back empty",
       .nodes = members_.size()});
}

void Fleet::Request() {
  const size_t image = zipf_(rng_);
  const std::string key = MmHash(image);
  const size_t minute = static_cast<size_t>(now_us_.load() / 60000000);
  ++r_.requests, ++minute_requests_[minute];
  if ((r_.requests & 63) == 0) {  // what a routed call pays to find its places
    const auto t = std::chrono::steady_clock::now();
    auto places = layout_.Places(kNs, key);
    owner_us_.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count());
  }
  auto got = cache_->Get(kNs, key, {});
  if (got.ok()) {
    ++r_.hits, ++minute_hits_[minute];
    if (got->bytes != SizeOf(image)) ++r_.wrong_reads;
    return;
  }
  // A miss: claim the encoder run at the owner, so one engine computes it.
  const uint64_t unanswered = cache_->counters().unavailable;
  auto claim = cache_->Claim(kNs, key, std::chrono::milliseconds(5000));
  if (!claim.ok() || claim->outcome == ClaimOutcome::kGranted) {
    ++r_.claims_granted, ++r_.computes;
    if (cache_->counters().unavailable != unanswered) ++r_.unanswered_claims;
    if (computing_[image]++ > 0) ++r_.duplicates;
    r_.recompute_bytes += SizeOf(image);
    const uint64_t encoder_us = std::uniform_int_distribution<uint64_t>(20000, 90000)(rng_);
    Schedule(now_us_.load() + encoder_us, kDone, image);
  } else if (claim->outcome == ClaimOutcome::kHeld) {
    ++r_.claims_held;  // waits for the holder's put instead of computing
  } else {
    ++r_.hits, ++minute_hits_[minute];  // put while this request was asking
  }
}

void Fleet::Done(size_t image) {
  if (--computing_[image] == 0) computing_.erase(image);
  const std::string key = MmHash(image);
  Status st = cache_->Put(kNs, key, MetaOf(SizeOf(image)), {});
  st.ok() ? ++r_.puts_acked : ++r_.puts_failed;
  if (!st.ok() || now_us_.load() >= joiner_until_us_) return;
  ++window_puts_;
  if (layout_.ring.members()[layout_.ring.Choices(kNs, key, 1)[0]].id == joiner_) ++joiner_puts_;
  r_.events[joiner_event_].puts_to_joiner = joiner_puts_;
  r_.events[joiner_event_].puts_in_minute = window_puts_;
  r_.events[joiner_event_].joiner_puts = static_cast<double>(joiner_puts_) /
                                         static_cast<double>(window_puts_) *
                                         static_cast<double>(members_.size());
}

// The fleet as it stands after a long run: the most popular images at their owners, the most
// popular the most recently used, to 90 % of the capacity. Not measured: the trace starts
// from here instead of from empty nodes.
void Fleet::WarmStart() {
  const double room = 0.9 * static_cast<double>(o_.node_capacity) * static_cast<double>(o_.nodes);
  double filled = 0;
  size_t n = 0;
  while (n < o_.catalog && filled + static_cast<double>(SizeOf(n)) < room)
    filled += static_cast<double>(SizeOf(n++));
  for (size_t i = n; i-- > 0;) {
    const std::string key = MmHash(i);
    const size_t owner = layout_.ring.Choices(kNs, key, 1)[0];
    auto face = nodes_.at(members_[owner].id)->Connect();
    (void)face->Put(kNs, key, MetaOf(SizeOf(i)), {});
  }
}

FleetReport Fleet::Run() {
  const uint64_t end = static_cast<uint64_t>(o_.minutes * 60e6);
  WarmStart();
  minute_requests_.assign(static_cast<size_t>(o_.minutes) + 2, 0);
  minute_hits_ = minute_requests_;
  ScheduleChurn();
  std::exponential_distribution<double> gap(o_.requests_per_s / 1e6);
  Schedule(0, kRequest);
  while (!queue_.empty()) {
    Event e = queue_.top();
    queue_.pop();
    if (e.at_us >= end) break;
    now_us_.store(e.at_us);
    switch (e.kind) {
      case kRequest:
        Request();
        Schedule(e.at_us + static_cast<uint64_t>(gap(rng_)) + 1, kRequest);
        break;
      case kDone:
        Done(e.arg);
        break;
      case kChurn:
        Churn(e.arg);
        break;
      case kLapse:
        Remove(e.id, "a killed node's lease lapses: it leaves", false);
        break;
      case kRestart:
        Restart(e.id, e.arg != 0);
        break;
      default:
        Burst(e.kind);
        break;
    }
  }
  FinishEvents();
  return r_;
}

void Fleet::FinishEvents() {
  r_.nodes = o_.nodes;
  for (size_t m = 0; m < static_cast<size_t>(o_.minutes); ++m)
    r_.hit_rate_by_minute.push_back(
        minute_requests_[m] ? static_cast<double>(minute_hits_[m]) / minute_requests_[m] : 0);
  const auto& rate = r_.hit_rate_by_minute;
  for (FleetEvent& e : r_.events) {
    const size_t m = static_cast<size_t>(e.minute);
    e.hit_before = m > 0 ? rate[m - 1] : 0;
    e.hit_low = std::min(m < rate.size() ? rate[m] : 1.0, m + 1 < rate.size() ? rate[m + 1] : 1.0);
  }
  r_.fallback_hits = cache_->counters().fallback_hits;
  std::sort(owner_us_.begin(), owner_us_.end());
  if (!owner_us_.empty()) {
    r_.owner_p50_us = owner_us_[owner_us_.size() / 2];
    r_.owner_p99_us = owner_us_[owner_us_.size() * 99 / 100];
  }
}

// The largest node's bytes over the mean, `keys` images put through the real routing to
// nodes that keep everything (no capacity, no churn): placement's balance alone.
double Balance(const FleetOptions& o) {
  std::atomic<uint64_t> clock{0};
  std::map<std::string, std::unique_ptr<FakeNode>> nodes;
  std::vector<cluster::NodeInfo> members;
  for (size_t i = 0; i < o.nodes; ++i) {
    nodes[NodeId(i)] = std::make_unique<FakeNode>(NodeId(i), UINT64_MAX, &clock);
    members.push_back(Record(NodeId(i), i, o.node_capacity, 1, 1));
  }
  cluster::ClusterOptions co;
  co.connector = [&](const cluster::NodeInfo& n) -> Result<std::unique_ptr<Cache>> {
    return nodes.at(n.id)->Connect();
  };
  auto cache = cluster::ClusterCache::WithMembers("balance", std::move(co));
  cache->Follow(members);
  for (size_t i = 0; i < o.balance_keys; ++i)
    (void)cache->Put(kNs, MmHash(i), MetaOf(SizeOf(i)), {});
  double sum = 0, most = 0;
  for (const auto& [id, n] : nodes) {
    sum += static_cast<double>(n->bytes());
    most = std::max(most, static_cast<double>(n->bytes()));
  }
  return most / (sum / static_cast<double>(nodes.size()));
}
}  // namespace

FleetReport RunFleet(const FleetOptions& options) {
  FleetReport r = Fleet(options).Run();
  if (options.balance_keys) r.balance = Balance(options);
  return r;
}

}  // namespace ecstore::sim
