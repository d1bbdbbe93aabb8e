#include "cluster/cluster_cache.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <map>

#include "net/client.h"

namespace ecstore::cluster {

namespace {

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

// A miss at one place: the entry may be at the next one.
bool TryNext(const Status& s) { return s.IsNotFound() || s.IsUnavailable(); }

// What a read that found the key nowhere returns: NotFound -- also where its owner did not
// answer (a lost node costs misses, not errors; counted in `unavailable`, told in the log
// once per node), saying so.
Status AsMiss(std::string_view ns, std::string_view key, const std::optional<Status>& owner_down,
              const Status& last) {
  if (!owner_down) return last;
  return Status::NotFound(std::string(ns) + "/" + std::string(key) +
                          ": a miss, its node does not answer (" + owner_down->message() + ")");
}

bool SameHost(const NodeInfo& n) {
  static const std::string self = HostName();
  return !n.unix_path.empty() && !self.empty() && n.host == self &&
         access(n.unix_path.c_str(), W_OK) == 0;
}

std::string HostOf(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  return colon == std::string::npos ? host_port : host_port.substr(0, colon);
}

}  // namespace

// One member and this process's connection to it. A node that changes address or restarts
// (a new incarnation) is a new Node; the old one lives on while leases on it do.
struct ClusterCache::Node {
  explicit Node(NodeInfo i) : info(std::move(i)) {}
  const NodeInfo info;
  std::mutex mu;                        // one call at a time on `client`
  std::unique_ptr<net::Client> client;  // under mu; connected at the first call
  std::atomic<int64_t> down_until_us{0};
  std::atomic<bool> down{false};  // told in the log once per going and coming back
};

// The members one call routes by: ring.members()[i] is nodes[i].
struct ClusterCache::View {
  Ring ring{{}};
  std::vector<std::shared_ptr<Node>> nodes;
};

// Releases a node's lease over that node's connection, under its mutex, from any thread.
class ClusterCache::Leases : public ReadLease::Releaser {
 public:
  struct Held {
    std::shared_ptr<Node> node;
    ReadLease inner;
  };
  void Release(void* token) override {
    auto* h = static_cast<Held*>(token);
    std::shared_ptr<Node> node = h->node;
    std::lock_guard<std::mutex> l(node->mu);
    delete h;
  }
};

ClusterCache::ClusterCache(std::string name, ClusterOptions o)
    : name_(std::move(name)),
      opt_(std::move(o)),
      leases_(std::make_unique<Leases>()),
      view_(std::make_shared<View>()) {}

Result<std::unique_ptr<ClusterCache>> ClusterCache::Open(const std::string& uri,
                                                         ClusterOptions options) {
  std::string name;
  auto etcd = EtcdClient::Parse(uri, &name);
  if (!etcd.ok()) return etcd.status();
  if (options.replicas == 0) return Status::InvalidArgument("replicas must be at least 1");
  const auto idle = options.watch_idle;
  std::unique_ptr<ClusterCache> c(new ClusterCache(name, std::move(options)));
  auto watch = MemberWatch::Start(
      std::move(etcd).value(), name,
      [p = c.get()](std::vector<NodeInfo> members) { p->Install(std::move(members)); }, idle);
  if (!watch.ok()) return watch.status();
  c->watch_ = std::move(watch).value();
  return c;
}

ClusterCache::~ClusterCache() { watch_.reset(); }  // no view is installed after this

std::shared_ptr<const ClusterCache::View> ClusterCache::Snapshot() const {
  MutexLock l(&view_mu_);
  return view_;
}

// A new view from `members`, keeping the connections of nodes that did not change.
void ClusterCache::Install(std::vector<NodeInfo> members) {
  std::sort(members.begin(), members.end(),
            [](const NodeInfo& a, const NodeInfo& b) { return a.id < b.id; });
  auto old = Snapshot();
  std::map<std::string, std::shared_ptr<Node>> kept;
  for (const auto& n : old->nodes) kept[n->info.id] = n;
  auto v = std::make_shared<View>();
  std::vector<Member> ring;
  for (auto& m : members) {
    auto it = kept.find(m.id);
    const bool same = it != kept.end() && it->second->info.tcp == m.tcp &&
                      it->second->info.incarnation == m.incarnation;
    ring.push_back({m.id, m.capacity ? static_cast<double>(m.capacity) : 1.0});
    v->nodes.push_back(same ? it->second : std::make_shared<Node>(m));
  }
  v->ring = Ring(std::move(ring));
  MutexLock l(&view_mu_);
  view_ = std::move(v);
}

void ClusterCache::MarkDown(Node& n, const Status& why) {
  n.down_until_us = NowUs() + std::chrono::microseconds(opt_.down_for).count();
  if (!n.down.exchange(true))
    spdlog::warn(
        "cluster {}: node {} at {} does not answer ({}); its keys are misses until it "
        "does or leaves",
        name_, n.info.id, n.info.tcp, why.message());
}

void ClusterCache::MarkUp(Node& n) {
  if (n.down.exchange(false)) spdlog::info("cluster {}: node {} answers again", name_, n.info.id);
}

Status ClusterCache::Reach(Node& n, std::unique_lock<std::mutex>* l) {
  if (n.down_until_us.load() > NowUs())
    return Status::Unavailable("cluster node " + n.info.id + " at " + n.info.tcp +
                               " did not answer a moment ago");
  *l = std::unique_lock<std::mutex>(n.mu);
  if (n.client) return Status::Ok();
  // A node on this host is read through its shared memory (its unix socket), else over TCP.
  Result<std::unique_ptr<net::Client>> c = Status::Unavailable("not connected");
  if (SameHost(n.info) && opt_.client.transport != "tcp" && opt_.client.transport != "rdma")
    c = net::Client::Connect("unix:" + n.info.unix_path, opt_.client);
  if (!c.ok()) c = net::Client::Connect("tcp://" + n.info.tcp, opt_.client);
  if (!c.ok()) {
    MarkDown(n, c.status());
    return Status::Unavailable("cluster node " + n.info.id + ": " + c.status().message());
  }
  n.client = std::move(c).value();
  std::vector<BufferDesc> registered;
  {
    MutexLock g(&registered_mu_);
    registered = registered_;
  }
  for (const BufferDesc& m : registered)  // best effort: unregistered memory is bounced
    if (Status st = n.client->RegisterMemory(m); !st.ok())
      spdlog::warn("cluster {}: node {}: {}", name_, n.info.id, st.ToString());
  return Status::Ok();
}

void ClusterCache::Observe(Node& n, const Status& st) {
  if (st.IsUnavailable())
    MarkDown(n, st);
  else
    MarkUp(n);
}

template <typename Fn>
auto ClusterCache::OnNode(Node& n, Fn fn) -> decltype(fn(std::declval<net::Client&>())) {
  std::unique_lock<std::mutex> l;
  Status st = Reach(n, &l);
  if (!st.ok()) return st;
  auto r = fn(*n.client);
  Observe(n, StatusOf(r));
  return r;
}

Result<ReadLease> ClusterCache::Wrap(const std::shared_ptr<Node>& n, Result<ReadLease> got) {
  if (!got.ok()) return got;
  ReadLease inner = std::move(got).value();
  if (!inner.data() && inner.size() == 0) return inner;
  const uint8_t* data = inner.data();
  EntryInfo info = inner.info();
  const MemoryKind kind = inner.memory_kind();
  const Tier from = inner.served_from();
  auto* held = new Leases::Held{n, std::move(inner)};
  return ReadLease(leases_.get(), held, data, std::move(info), kind, from);
}

std::vector<size_t> ClusterCache::ReadChoices(const View& v, std::string_view ns,
                                              std::string_view key) const {
  return v.ring.Choices(ns, key, opt_.replicas + (opt_.fallback ? 1 : 0));
}

template <typename T, typename Fn>
Result<T> ClusterCache::ReadFirst(std::string_view ns, std::string_view key, Fn fn) {
  auto v = Snapshot();
  if (v->ring.empty())
    return Status::Unavailable("cluster " + name_ +
                               " has no live node (ec-store --cluster ... "
                               "cluster status lists them)");
  std::optional<Status> owner_down;
  Status last = Status::NotFound(std::string(ns) + "/" + std::string(key));
  const auto choices = ReadChoices(*v, ns, key);
  for (size_t i = 0; i < choices.size(); ++i) {
    const auto& node = v->nodes[choices[i]];
    ++routed_;
    Result<T> r = OnNode(*node, [&](net::Client& c) { return fn(c, node); });
    if (r.ok()) {
      if (i >= opt_.replicas) ++fallback_hits_;
      return r;
    }
    if (!TryNext(r.status())) return r;
    if (r.status().IsUnavailable()) {
      ++unavailable_;
      if (!owner_down) owner_down = r.status();
    }
    last = r.status();
  }
  return AsMiss(ns, key, owner_down, last);
}

Result<EntryInfo> ClusterCache::Get(std::string_view ns, std::string_view key,
                                    std::span<uint8_t> dst) {
  return ReadFirst<EntryInfo>(ns, key, [&](net::Client& c, auto&) { return c.Get(ns, key, dst); });
}

Result<ReadLease> ClusterCache::Acquire(std::string_view ns, std::string_view key) {
  return ReadFirst<ReadLease>(ns, key, [&](net::Client& c, const std::shared_ptr<Node>& n) {
    return Wrap(n, c.Acquire(ns, key));
  });
}

Result<ReadLease> ClusterCache::Pin(std::string_view ns, std::string_view key) {
  return ReadFirst<ReadLease>(ns, key, [&](net::Client& c, const std::shared_ptr<Node>& n) {
    return Wrap(n, c.Pin(ns, key));
  });
}

Result<EntryInfo> ClusterCache::Lookup(std::string_view ns, std::string_view key) {
  return ReadFirst<EntryInfo>(ns, key, [&](net::Client& c, auto&) { return c.Lookup(ns, key); });
}

Status ClusterCache::Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
                         std::span<const uint8_t> bytes) {
  auto v = Snapshot();
  if (v->ring.empty())
    return Status::Unavailable("cluster " + name_ + " has no live node to put to");
  // The key's choices in order; replicas on distinct hosts first, the same host only when
  // there are not enough hosts; a node that is down is passed over for the next.
  auto all = v->ring.Choices(ns, key, v->ring.members().size());
  std::vector<size_t> order, same_host;
  std::vector<std::string> hosts;
  for (size_t i : all) {
    const NodeInfo& info = v->nodes[i]->info;
    const std::string h = info.host.empty() ? HostOf(info.tcp) : info.host;
    (std::find(hosts.begin(), hosts.end(), h) == hosts.end() ? order : same_host).push_back(i);
    hosts.push_back(h);
  }
  order.insert(order.end(), same_host.begin(), same_host.end());
  size_t stored = 0;
  Status first_failure = Status::Ok();
  for (size_t k = 0; k < order.size() && stored < opt_.replicas; ++k) {
    // A put that cannot reach its owner goes to the next choice, where a read looks next;
    // past the first replicas + 1 choices a read would not find it: stop there.
    if (k > opt_.replicas && stored == 0) break;
    ++routed_;
    Status st =
        OnNode(*v->nodes[order[k]], [&](net::Client& c) { return c.Put(ns, key, meta, bytes); });
    if (st.ok()) {
      ++stored;
    } else {
      if (st.IsUnavailable()) ++unavailable_;
      if (!st.IsUnavailable()) return st;  // the entry itself is refused: every node would
      if (first_failure.ok()) first_failure = st;
    }
  }
  return stored > 0 ? Status::Ok() : first_failure;
}

template <typename T, typename Fn>
std::vector<Result<T>> ClusterCache::Batched(std::string_view ns,
                                             const std::vector<std::string>& keys, Fn fn) {
  std::vector<Result<T>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out.emplace_back(Status::NotFound(keys[i]));
  auto v = Snapshot();
  if (v->ring.empty()) {
    for (auto& r : out) r = Status::Unavailable("cluster " + name_ + " has no live node");
    return out;
  }
  std::vector<std::vector<size_t>> choices(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) choices[i] = ReadChoices(*v, ns, keys[i]);
  std::vector<size_t> pending(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) pending[i] = i;
  std::vector<std::optional<Status>> owner_down(keys.size());
  for (size_t round = 0; !pending.empty(); ++round) {
    std::map<size_t, std::vector<size_t>> by_node;  // node -> indices of keys
    for (size_t i : pending)
      if (round < choices[i].size()) by_node[choices[i][round]].push_back(i);
    if (by_node.empty()) break;
    auto ask = [&](size_t node, const std::vector<size_t>& idx) {
      routed_ += idx.size();
      Node& n = *v->nodes[node];
      std::unique_lock<std::mutex> l;
      Status st = Reach(n, &l);
      if (!st.ok()) {
        for (size_t i : idx) out[i] = st;
        return;
      }
      std::vector<Result<T>> r = fn(*n.client, v->nodes[node], idx);
      Status unavailable = Status::Ok();
      for (size_t k = 0; k < idx.size(); ++k) {
        if (r[k].status().IsUnavailable()) unavailable = r[k].status();
        out[idx[k]] = std::move(r[k]);
      }
      Observe(n, unavailable);
    };
    std::vector<std::future<void>> parts;
    for (auto it = std::next(by_node.begin()); it != by_node.end(); ++it)
      parts.push_back(std::async(std::launch::async, ask, it->first, std::cref(it->second)));
    ask(by_node.begin()->first, by_node.begin()->second);
    for (auto& p : parts) p.get();
    std::vector<size_t> again;
    for (size_t i : pending) {
      if (out[i].ok()) {
        if (round >= opt_.replicas) ++fallback_hits_;
      } else if (TryNext(out[i].status())) {
        if (out[i].status().IsUnavailable()) {
          ++unavailable_;
          if (!owner_down[i]) owner_down[i] = out[i].status();
        }
        again.push_back(i);
      }
    }
    pending = std::move(again);
  }
  for (size_t i = 0; i < keys.size(); ++i)
    if (!out[i].ok() && TryNext(out[i].status()))
      out[i] = AsMiss(ns, keys[i], owner_down[i], out[i].status());
  return out;
}

namespace {
std::vector<std::string> Pick(const std::vector<std::string>& keys,
                              const std::vector<size_t>& idx) {
  std::vector<std::string> out;
  out.reserve(idx.size());
  for (size_t i : idx) out.push_back(keys[i]);
  return out;
}
}  // namespace

std::vector<Result<EntryInfo>> ClusterCache::GetMany(std::string_view ns,
                                                     const std::vector<std::string>& keys,
                                                     const std::vector<std::span<uint8_t>>& dsts) {
  return Batched<EntryInfo>(ns, keys, [&](net::Client& c, auto&, const std::vector<size_t>& idx) {
    std::vector<std::span<uint8_t>> d;
    for (size_t i : idx) d.push_back(dsts[i]);
    return c.GetMany(ns, Pick(keys, idx), d);
  });
}

std::vector<Result<ReadLease>> ClusterCache::AcquireMany(std::string_view ns,
                                                         const std::vector<std::string>& keys) {
  return Batched<ReadLease>(
      ns, keys,
      [&](net::Client& c, const std::shared_ptr<Node>& n, const std::vector<size_t>& idx) {
        auto got = c.AcquireMany(ns, Pick(keys, idx));
        for (auto& r : got) r = Wrap(n, std::move(r));
        return got;
      });
}

Result<std::vector<std::optional<EntryInfo>>> ClusterCache::LookupMany(
    std::string_view ns, const std::vector<std::string>& keys) {
  auto found =
      Batched<EntryInfo>(ns, keys, [&](net::Client& c, auto&, const std::vector<size_t>& idx) {
        std::vector<Result<EntryInfo>> out;
        auto r = c.LookupMany(ns, Pick(keys, idx));
        for (size_t k = 0; k < idx.size(); ++k) {
          if (!r.ok())
            out.push_back(r.status());
          else if ((*r)[k])
            out.push_back(*(*r)[k]);
          else
            out.push_back(Status::NotFound(keys[idx[k]]));
        }
        return out;
      });
  std::vector<std::optional<EntryInfo>> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i].ok())
      out[i] = std::move(found[i]).value();
    else if (!TryNext(found[i].status()))
      return found[i].status();
    // A node that does not answer: its keys are absent (misses), counted in unavailable.
  }
  return out;
}

Result<bool> ClusterCache::Prefetch(std::string_view ns, const std::vector<std::string>& keys) {
  bool all = true;
  auto r = Batched<bool>(ns, keys, [&](net::Client& c, auto&, const std::vector<size_t>& idx) {
    auto q = c.Prefetch(ns, Pick(keys, idx));
    // A hint goes to the owner only: a queued one is not asked again elsewhere.
    return std::vector<Result<bool>>(idx.size(), q.ok() ? Result<bool>(true) : q.status());
  });
  for (auto& x : r) {
    if (!x.ok() && x.status().IsInvalidArgument()) return x.status();
    all = all && x.ok();
  }
  return all;
}

Result<ClaimAnswer> ClusterCache::Claim(std::string_view ns, std::string_view key,
                                        std::chrono::milliseconds ttl) {
  auto v = Snapshot();
  if (v->ring.empty()) return ClaimAnswer{};
  ++routed_;
  auto a = OnNode(*v->nodes[v->ring.Choices(ns, key, 1)[0]],
                  [&](net::Client& c) { return c.Claim(ns, key, ttl); });
  if (!a.ok() && a.status().IsUnavailable()) {
    ++unavailable_;
    return ClaimAnswer{};
  }
  return a;
}

Status ClusterCache::Erase(std::string_view ns, std::string_view key) {
  std::vector<bool> erased;
  EC_RETURN_IF_ERROR(EraseMany({{std::string(ns), std::string(key)}}, &erased));
  if (!erased[0]) return Status::NotFound(std::string(ns) + "/" + std::string(key));
  return Status::Ok();
}

// Each entry at every place a read looks: an entry put while its owner was down, or before a
// join, is erased too.
Status ClusterCache::EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                               std::vector<bool>* erased) {
  erased->assign(ns_keys.size(), false);
  auto v = Snapshot();
  std::map<size_t, std::vector<size_t>> by_node;
  for (size_t i = 0; i < ns_keys.size(); ++i)
    for (size_t node : ReadChoices(*v, ns_keys[i].first, ns_keys[i].second))
      by_node[node].push_back(i);
  Status failed = Status::Ok();
  for (const auto& [node, idx] : by_node) {
    std::vector<std::pair<std::string, std::string>> part;
    for (size_t i : idx) part.push_back(ns_keys[i]);
    std::vector<bool> here;
    Status st = OnNode(*v->nodes[node], [&](net::Client& c) { return c.EraseMany(part, &here); });
    if (!st.ok()) {
      if (failed.ok()) failed = st;
      continue;
    }
    for (size_t k = 0; k < idx.size(); ++k)
      if (here[k]) (*erased)[idx[k]] = true;
  }
  return failed;
}

Status ClusterCache::ListPages(size_t page_size,
                               const std::function<bool(std::vector<EntryInfo>&&)>& on_page) {
  return ListNodePages(page_size, [&](std::vector<EntryInfo>&& page, const std::string&) {
    return on_page(std::move(page));
  });
}

Status ClusterCache::ListNodePages(
    size_t page_size,
    const std::function<bool(std::vector<EntryInfo>&&, const std::string&)>& on_page) {
  auto v = Snapshot();
  bool more = true;
  for (const auto& n : v->nodes) {
    if (!more) break;
    Status st = OnNode(*n, [&](net::Client& c) {
      return c.ListPages(page_size, [&](std::vector<EntryInfo>&& page) {
        return more = on_page(std::move(page), n->info.id);
      });
    });
    if (!st.ok())
      spdlog::warn("cluster {}: listing skips node {}: {}", name_, n->info.id, st.message());
  }
  return Status::Ok();
}

std::vector<ClusterCache::NodeStats> ClusterCache::StatsByNode() {
  auto v = Snapshot();
  std::vector<std::future<Result<StoreStats>>> asks;
  for (const auto& n : v->nodes)
    asks.push_back(std::async(std::launch::async, [this, n] {
      return OnNode(*n, [](net::Client& c) { return c.Stats(); });
    }));
  std::vector<NodeStats> out;
  for (size_t i = 0; i < asks.size(); ++i) out.push_back({v->nodes[i]->info, asks[i].get()});
  return out;
}

Result<StoreStats> ClusterCache::Stats() {
  StoreStats sum;
  size_t answered = 0;
  Status last = Status::Unavailable("cluster " + name_ + " has no live node");
  for (auto& ns : StatsByNode()) {
    if (!ns.stats.ok()) {
      last = ns.stats.status();
      continue;
    }
    const StoreStats& s = *ns.stats;
    ++answered;
    for (const TierStats& t : s.tiers) {
      TierStats& to = sum.at(t.tier);
      to.entries += t.entries, to.bytes += t.bytes, to.hits += t.hits, to.misses += t.misses;
      to.evictions += t.evictions, to.spills += t.spills, to.promotions += t.promotions;
      to.capacity += t.capacity, to.used += t.used;
    }
    sum.segments += s.segments, sum.corrupt_dropped += s.corrupt_dropped;
    sum.spill_errors += s.spill_errors, sum.compactions += s.compactions;
    sum.misses += s.misses, sum.lookup_hits += s.lookup_hits, sum.lookup_misses += s.lookup_misses;
    sum.connections += s.connections, sum.client_leases += s.client_leases;
    sum.leases += s.leases, sum.keydir_entries += s.keydir_entries;
    sum.keydir_compact_rows += s.keydir_compact_rows;
    sum.uptime_seconds = std::max(sum.uptime_seconds, s.uptime_seconds);
    if (sum.version.empty()) sum.version = s.version;
  }
  if (answered == 0) return last;
  return sum;
}

std::vector<std::pair<NodeInfo, std::string>> ClusterCache::Connections() const {
  std::vector<std::pair<NodeInfo, std::string>> out;
  for (const auto& n : Snapshot()->nodes) {
    std::lock_guard<std::mutex> l(n->mu);
    out.emplace_back(n->info, n->client ? n->client->transport() : "");
  }
  return out;
}

Status ClusterCache::RegisterMemory(const BufferDesc& memory) {
  {
    MutexLock g(&registered_mu_);
    registered_.push_back(memory);
  }
  Status failed;
  for (const auto& n : Snapshot()->nodes) {
    std::lock_guard<std::mutex> l(n->mu);
    if (!n->client) continue;
    failed = n->client->RegisterMemory(memory);
    if (!failed.ok()) {
      failed = failed.WithContext("cluster node " + n->info.id);
      break;
    }
  }
  if (!failed.ok()) UnregisterMemory(memory);
  return failed;
}

void ClusterCache::UnregisterMemory(const BufferDesc& memory) {
  {
    MutexLock g(&registered_mu_);
    std::erase_if(registered_, [&](const BufferDesc& m) {
      return m.data == memory.data && m.size == memory.size;
    });
  }
  for (const auto& n : Snapshot()->nodes) {
    std::lock_guard<std::mutex> l(n->mu);
    if (n->client) n->client->UnregisterMemory(memory);
  }
}

TransferStats ClusterCache::transfer_stats() const {
  TransferStats sum;
  for (const auto& n : Snapshot()->nodes) {
    std::lock_guard<std::mutex> l(n->mu);
    if (!n->client) continue;
    TransferStats t = n->client->transfer_stats();
    sum.direct_reads += t.direct_reads;
    sum.direct_bytes += t.direct_bytes;
    sum.bounced_reads += t.bounced_reads;
    sum.bounced_bytes += t.bounced_bytes;
  }
  return sum;
}

std::vector<NodeInfo> ClusterCache::Nodes() const {
  std::vector<NodeInfo> out;
  for (const auto& n : Snapshot()->nodes) out.push_back(n->info);
  return out;
}

std::vector<std::string> ClusterCache::Owners(std::string_view ns, std::string_view key,
                                              size_t n) const {
  auto v = Snapshot();
  std::vector<std::string> out;
  for (size_t i : v->ring.Choices(ns, key, n)) out.push_back(v->nodes[i]->info.id);
  return out;
}

ClusterCounters ClusterCache::counters() const {
  return {routed_.load(), fallback_hits_.load(), unavailable_.load(),
          watch_ ? watch_->changes() : 0, watch_ ? watch_->bad_records() : 0};
}

}  // namespace ecstore::cluster
