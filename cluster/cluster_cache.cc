#include "cluster/cluster_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "cluster/fan_out.h"
#include "net/client.h"

namespace ecstore::cluster {

// The members one call routes by: layout.ring.members()[i] is nodes[i].
ClusterCache::ClusterCache(std::string name, ClusterOptions o)
    : name_(std::move(name)),
      opt_(std::move(o)),
      fresh_(opt_.fresh_for),
      view_(std::make_shared<View>()) {}

Status ClusterCache::Doubt(bool miss, const std::string& what) {
  // WithMembers: the caller's view; fresh_for 0: the nodes check each request's view.
  if (!watch_ || opt_.fresh_for.count() == 0 || fresh_.fresh()) return Status::Ok();
  ++stale_view_;
  return fresh_.Stale(miss, name_, what);
}

Result<std::unique_ptr<ClusterCache>> ClusterCache::Open(const std::string& uri,
                                                         ClusterOptions options) {
  std::string name;
  auto etcd = EtcdClient::Parse(uri, &name, std::chrono::seconds(2), options.etcd);
  if (!etcd.ok()) return etcd.status();
  EC_RETURN_IF_ERROR(options.Check());
  const auto idle = options.watch_idle;
  std::unique_ptr<ClusterCache> c(new ClusterCache(name, std::move(options)));
  auto watch = MemberWatch::Start(
      std::move(etcd).value(), name,
      [p = c.get()](std::vector<NodeInfo> members, int64_t revision) {
        p->Install(std::move(members), revision);
      },
      idle, c->opt_.fresh_for.count() > 0 ? &c->fresh_ : nullptr);
  if (!watch.ok()) return watch.status();
  c->watch_ = std::move(watch).value();
  return c;
}

std::unique_ptr<ClusterCache> ClusterCache::WithMembers(std::string name, ClusterOptions options) {
  if (options.replicas == 0) options.replicas = 1;
  return std::unique_ptr<ClusterCache>(new ClusterCache(std::move(name), std::move(options)));
}

ClusterCache::~ClusterCache() {
  watch_.reset();  // no view is installed after this
  MutexLock g(&registered_mu_);
  Reregister(*Snapshot(), ClusterView{});  // the shared links forget this handle's memory
}

std::shared_ptr<const ClusterView> ClusterCache::Snapshot() const {
  MutexLock l(&view_mu_);
  return view_;
}

// A new view from `members`, keeping the connections of nodes that did not change.
// Links are shared with the process's other handles (LinkRegistry); this handle's registered
// memory is registered with the links it starts using and unregistered from those it stops.
void ClusterCache::Install(std::vector<NodeInfo> members, int64_t revision) {
  MutexLock g(&registered_mu_);
  auto old = Snapshot();
  auto v = ClusterView::Next(
      *old, std::move(members), revision,
      [&](const NodeInfo& m) {
        if (opt_.connector)  // an in-process node: not shared
          return std::make_shared<NodeLink>(m, name_, opt_.client, opt_.down_for, opt_.connector);
        return LinkRegistry::Process().Share(m, name_, opt_.client, opt_.down_for, opt_.idle_close);
      },
      opt_.settle);
  Reregister(*old, *v);
  MutexLock l(&view_mu_);
  view_ = std::move(v);
}

void ClusterCache::Reregister(const View& from, const View& to) {
  auto in = [](const View& v, const std::shared_ptr<NodeLink>& n) {
    return std::find(v.nodes.begin(), v.nodes.end(), n) != v.nodes.end();
  };
  for (const auto& n : to.nodes)
    if (!in(from, n))
      for (const BufferDesc& m : registered_)  // best effort: unregistered memory is bounced
        if (Status st = n->Register(m); !st.ok())
          spdlog::warn("cluster {}: node {}: {}", name_, n->info().id, st.ToString());
  for (const auto& n : from.nodes)
    if (!in(to, n))
      for (const BufferDesc& m : registered_) n->Unregister(m);
}

template <typename Fn>
auto ClusterCache::OnNode(const View& v, NodeLink& n, Fn fn)
    -> decltype(fn(std::declval<Cache&>())) {
  auto r = n.Call(fn, v.revision);
  if constexpr (std::is_same_v<decltype(r), Status>)
    NoteView(v, r);
  else
    NoteView(v, r.status());
  return r;
}

// A node whose view changed after this one refused the call: the members are read again.
void ClusterCache::NoteView(const View& v, const Status& st) {
  if (!st.ok() && watch_ && st.message().find(kViewBehind) != std::string::npos)
    watch_->Refresh(v.revision);
}

std::vector<size_t> ClusterCache::ReadChoices(const View& v, std::string_view ns,
                                              std::string_view key) const {
  auto places = v.Places(ns, key);
  if (!opt_.fallback && places.size() > opt_.replicas) places.resize(opt_.replicas);
  return places;
}

template <typename T, typename Fn>
Result<T> ClusterCache::ReadFirst(std::string_view ns, std::string_view key, Fn fn) {
  if (Status d = Doubt(true, "a miss of " + std::string(ns) + "/" + std::string(key)); !d.ok())
    return d;
  auto v = Snapshot();
  if (v->layout.ring.empty())
    return Status::Unavailable("cluster " + name_ +
                               " has no live node (ec-store --cluster ... "
                               "cluster status lists them)");
  std::optional<Status> owner_down;
  Status last = Status::NotFound(std::string(ns) + "/" + std::string(key));
  const auto choices = ReadChoices(*v, ns, key);
  for (size_t i = 0; i < choices.size(); ++i) {
    const auto& node = v->nodes[choices[i]];
    ++routed_;
    Result<T> r = OnNode(*v, *node, [&](Cache& c) { return fn(c, node); });
    if (r.ok()) {
      if (i >= opt_.replicas) ++fallback_hits_;
      return r;
    }
    if (!TryNextPlace(r.status())) return r;
    if (r.status().IsUnavailable()) {
      ++unavailable_;
      if (!owner_down) owner_down = r.status();
    }
    last = r.status();
  }
  return ReadMiss(ns, key, owner_down, last);
}

Result<EntryInfo> ClusterCache::Get(std::string_view ns, std::string_view key,
                                    std::span<uint8_t> dst) {
  return ReadFirst<EntryInfo>(ns, key, [&](Cache& c, auto&) { return c.Get(ns, key, dst); });
}

Result<ReadLease> ClusterCache::Acquire(std::string_view ns, std::string_view key) {
  return ReadFirst<ReadLease>(ns, key, [&](Cache& c, const std::shared_ptr<NodeLink>& n) {
    return n->Wrap(c.Acquire(ns, key));
  });
}

Result<ReadLease> ClusterCache::Pin(std::string_view ns, std::string_view key) {
  return ReadFirst<ReadLease>(ns, key, [&](Cache& c, const std::shared_ptr<NodeLink>& n) {
    return n->Wrap(c.Pin(ns, key));
  });
}

Result<EntryInfo> ClusterCache::Lookup(std::string_view ns, std::string_view key) {
  return ReadFirst<EntryInfo>(ns, key, [&](Cache& c, auto&) { return c.Lookup(ns, key); });
}

Status ClusterCache::Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
                         std::span<const uint8_t> bytes) {
  if (Status d = Doubt(
          false, "the put of " + std::string(ns) + "/" + std::string(key) + " is not acknowledged");
      !d.ok())
    return d;
  auto v = Snapshot();
  if (v->layout.ring.empty())
    return Status::Unavailable("cluster " + name_ + " has no live node to put to");
  if (opt_.replicas > v->layout.keep)
    return Status::InvalidArgument(
        "--replicas " + std::to_string(opt_.replicas) + " is more places than cluster " + name_ +
        "'s nodes keep a key at (" + std::to_string(v->layout.keep) +
        "): start them with --cluster-keep " + std::to_string(opt_.replicas) + " or more");
  // The replicas at the key's first places, and every other place a reader may try cleared
  // (ClusterView::ToClear), all at once (different nodes).
  const auto places = v->Places(ns, key);
  const size_t replicas = std::min(opt_.replicas, places.size());
  const auto cleared = v->ToClear(ns, key, replicas);
  routed_ += replicas + cleared.size();
  std::vector<Status> answers(replicas + cleared.size());
  std::vector<std::function<void()>> parts;
  for (size_t k = 0; k < replicas; ++k)
    parts.push_back([&, k] {
      answers[k] =
          OnNode(*v, *v->nodes[places[k]], [&](Cache& c) { return c.Put(ns, key, meta, bytes); });
    });
  for (size_t k = 0; k < cleared.size(); ++k)
    parts.push_back([&, k] {
      std::vector<bool> gone;
      answers[replicas + k] =
          v->Cleared(cleared[k], OnNode(*v, *v->Link(cleared[k]), [&](Cache& c) {
                       return c.EraseMany({{std::string(ns), std::string(key)}}, &gone);
                     }));
    });
  FanOut::Process().Run(parts);
  for (const Status& st : answers) unavailable_ += st.IsUnavailable();
  return PutOutcome(ns, key, answers);
}

template <typename T, typename Fn>
std::vector<Result<T>> ClusterCache::Batched(std::string_view ns,
                                             const std::vector<std::string>& keys, Fn fn) {
  std::vector<Result<T>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out.emplace_back(Status::NotFound(keys[i]));
  if (Status d = Doubt(true, "a miss of " + std::to_string(keys.size()) + " key(s)"); !d.ok()) {
    for (auto& r : out) r = d;
    return out;
  }
  auto v = Snapshot();
  if (v->layout.ring.empty()) {
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
      bool asked = false;
      Status st = v->nodes[node]->Call(
          [&](Cache& c) {
            asked = true;
            std::vector<Result<T>> r = fn(c, v->nodes[node], idx);
            Status unavailable = Status::Ok();
            for (size_t k = 0; k < idx.size(); ++k) {
              if (r[k].status().IsUnavailable()) unavailable = r[k].status();
              out[idx[k]] = std::move(r[k]);
            }
            return unavailable;  // what the link observes
          },
          v->revision);
      if (!asked)
        for (size_t i : idx) out[i] = st;
    };
    std::vector<std::function<void()>> parts;
    for (const auto& part : by_node)
      parts.push_back([&ask, p = &part] { ask(p->first, p->second); });
    FanOut::Process().Run(parts);
    std::vector<size_t> again;
    for (size_t i : pending) {
      if (out[i].ok()) {
        if (round >= opt_.replicas) ++fallback_hits_;
      } else if (TryNextPlace(out[i].status())) {
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
    if (!out[i].ok() && TryNextPlace(out[i].status()))
      out[i] = ReadMiss(ns, keys[i], owner_down[i], out[i].status());
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
  return Batched<EntryInfo>(ns, keys, [&](Cache& c, auto&, const std::vector<size_t>& idx) {
    std::vector<std::span<uint8_t>> d;
    for (size_t i : idx) d.push_back(dsts[i]);
    return c.GetMany(ns, Pick(keys, idx), d);
  });
}

std::vector<Result<ReadLease>> ClusterCache::AcquireMany(std::string_view ns,
                                                         const std::vector<std::string>& keys,
                                                         LandingWatch* watch) {
  if (watch) watch->streamed.assign(keys.size(), false);
  return Batched<ReadLease>(
      ns, keys, [&](Cache& c, const std::shared_ptr<NodeLink>& n, const std::vector<size_t>& idx) {
        auto got = c.AcquireMany(ns, Pick(keys, idx));
        for (auto& r : got) r = n->Wrap(std::move(r));
        return got;
      });
}

Result<std::vector<std::optional<EntryInfo>>> ClusterCache::LookupMany(
    std::string_view ns, const std::vector<std::string>& keys) {
  auto found = Batched<EntryInfo>(ns, keys, [&](Cache& c, auto&, const std::vector<size_t>& idx) {
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
    else if (!TryNextPlace(found[i].status()))
      return found[i].status();
    // A node that does not answer: its keys are absent (misses), counted in unavailable.
  }
  return out;
}

Result<std::vector<std::vector<Location>>> ClusterCache::Locate(
    std::string_view ns, const std::vector<std::string>& keys) {
  auto v = Snapshot();
  std::vector<std::vector<size_t>> places(keys.size());
  std::map<size_t, std::vector<size_t>> by_node;  // node -> indices of keys it is a place of
  for (size_t i = 0; i < keys.size(); ++i) {
    places[i] = v->Places(ns, keys[i]);
    for (size_t node : places[i]) by_node[node].push_back(i);
  }
  std::map<size_t, Result<std::vector<std::optional<EntryInfo>>>> asks;
  std::vector<std::function<void()>> parts;
  for (const auto& [node, idx] : by_node) {
    auto* r = &asks.emplace(node, Status::Unavailable("not asked")).first->second;
    parts.push_back([&, r, node = node, &idx = idx] {
      routed_ += idx.size();
      *r = OnNode(*v, *v->nodes[node], [&](Cache& c) { return c.LookupMany(ns, Pick(keys, idx)); });
    });
  }
  FanOut::Process().Run(parts);
  std::map<size_t, std::vector<std::optional<EntryInfo>>> answers;
  for (auto& [node, r] : asks) {
    if (r.ok()) {
      answers[node] = std::move(r).value();
    } else if (r.status().IsUnavailable()) {
      unavailable_ += by_node[node].size();
    } else {
      return r.status();
    }
  }
  std::vector<std::vector<Location>> out(keys.size());
  for (const auto& [node, found] : answers) {
    const auto& idx = by_node[node];
    for (size_t k = 0; k < idx.size(); ++k)
      if (found[k]) out[idx[k]].push_back({v->nodes[node]->info().id, found[k]->tier()});
  }
  for (size_t i = 0; i < keys.size(); ++i) {  // in the key's order of places: owner first
    auto rank = [&](const Location& l) {
      for (size_t p = 0; p < places[i].size(); ++p)
        if (v->nodes[places[i][p]]->info().id == l.node) return p;
      return places[i].size();
    };
    std::sort(out[i].begin(), out[i].end(),
              [&](const Location& a, const Location& b) { return rank(a) < rank(b); });
  }
  return out;
}

Result<bool> ClusterCache::Prefetch(std::string_view ns, const std::vector<std::string>& keys) {
  bool all = true;
  auto r = Batched<bool>(ns, keys, [&](Cache& c, auto&, const std::vector<size_t>& idx) {
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
  if (v->layout.ring.empty()) return ClaimAnswer{};
  ++routed_;
  auto a = OnNode(*v, *v->nodes[v->layout.ring.Choices(ns, key, 1)[0]],
                  [&](Cache& c) -> Result<ClaimAnswer> {
                    Claims* claims = c.capabilities().claims;
                    if (!claims) return ClaimAnswer{};  // no claims there: compute
                    return claims->Claim(ns, key, ttl);
                  });
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

// Each entry at every place it may be (its places: a node drops a key it is not a place of).
// A place that does not answer may still hold it: the erase is not done, and says so.
Status ClusterCache::EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                               std::vector<bool>* erased) {
  erased->assign(ns_keys.size(), false);
  if (Status d = Doubt(false, "the erase is not done"); !d.ok() && !ns_keys.empty()) return d;
  auto v = Snapshot();
  if (v->layout.ring.empty() && !ns_keys.empty())
    return Status::Unavailable("cluster " + name_ + " has no live node: nothing was erased");
  std::map<size_t, std::vector<size_t>> by_node;
  for (size_t i = 0; i < ns_keys.size(); ++i)
    for (size_t node : v->ToClear(ns_keys[i].first, ns_keys[i].second, 0))
      by_node[node].push_back(i);
  Status failed = Status::Ok();
  for (const auto& [node, idx] : by_node) {
    std::vector<std::pair<std::string, std::string>> part;
    for (size_t i : idx) part.push_back(ns_keys[i]);
    std::vector<bool> here;
    Status st = OnNode(*v, *v->Link(node), [&](Cache& c) { return c.EraseMany(part, &here); });
    if (!st.ok() && v->Cleared(node, st).ok()) continue;  // a member that left, serving nothing
    if (!st.ok()) {
      if (failed.ok())
        failed =
            st.IsUnavailable()
                ? Status::Unavailable("the erase is not done: node " + v->Link(node)->info().id +
                                      ", a place of the keys, did not answer (" + st.message() +
                                      "); run it again")
                : st;
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
    Status st = OnNode(*v, *n, [&](Cache& c) {
      return c.ListPages(page_size, [&](std::vector<EntryInfo>&& page) {
        return more = on_page(std::move(page), n->info().id);
      });
    });
    if (!st.ok())
      spdlog::warn("cluster {}: listing skips node {}: {}", name_, n->info().id, st.message());
  }
  return Status::Ok();
}

std::vector<ClusterCache::NodeStats> ClusterCache::StatsByNode() {
  auto v = Snapshot();
  std::vector<NodeStats> out;
  std::vector<std::function<void()>> parts;
  for (const auto& n : v->nodes) out.push_back({n->info(), Status::Unavailable("not asked")});
  for (size_t i = 0; i < out.size(); ++i)
    parts.push_back(
        [&, i] { out[i].stats = OnNode(*v, *v->nodes[i], [](Cache& c) { return c.Stats(); }); });
  FanOut::Process().Run(parts);
  return out;
}

Result<StoreStats> ClusterCache::Stats(std::vector<std::string>* missing) {
  StoreStats sum;
  size_t answered = 0;
  Status last = Status::Unavailable("cluster " + name_ + " has no live node");
  for (auto& ns : StatsByNode()) {
    if (!ns.stats.ok()) {
      last = ns.stats.status();
      if (missing) missing->push_back(ns.node.id);
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
  for (const auto& n : Snapshot()->nodes) out.emplace_back(n->info(), n->transport());
  return out;
}

Status ClusterCache::RegisterMemory(const BufferDesc& memory) {
  MutexLock g(&registered_mu_);
  auto v = Snapshot();
  for (size_t i = 0; i < v->nodes.size(); ++i) {
    if (Status st = v->nodes[i]->Register(memory); !st.ok()) {
      for (size_t j = 0; j < i; ++j) v->nodes[j]->Unregister(memory);
      return st.WithContext("cluster node " + v->nodes[i]->info().id);
    }
  }
  registered_.push_back(memory);
  return Status::Ok();
}

void ClusterCache::UnregisterMemory(const BufferDesc& memory) {
  MutexLock g(&registered_mu_);
  auto it = std::find_if(registered_.begin(), registered_.end(), [&](const BufferDesc& m) {
    return m.data == memory.data && m.size == memory.size;
  });
  if (it == registered_.end()) return;
  registered_.erase(it);
  for (const auto& n : Snapshot()->nodes) n->Unregister(memory);
}

TransferStats ClusterCache::transfer_stats() const {
  TransferStats sum;
  for (const auto& n : Snapshot()->nodes)
    n->IfConnected([&](Cache& c) {
      MemoryRegistration* m = c.capabilities().memory;
      TransferStats t = m ? m->transfer_stats() : TransferStats{};
      sum.direct_reads += t.direct_reads;
      sum.direct_bytes += t.direct_bytes;
      sum.bounced_reads += t.bounced_reads;
      sum.bounced_bytes += t.bounced_bytes;
    });
  return sum;
}

std::vector<NodeInfo> ClusterCache::Nodes() const {
  std::vector<NodeInfo> out;
  for (const auto& n : Snapshot()->nodes) out.push_back(n->info());
  return out;
}

std::vector<std::string> ClusterCache::Owners(std::string_view ns, std::string_view key,
                                              size_t n) const {
  auto v = Snapshot();
  std::vector<std::string> out;
  for (size_t i : CopyOrder(v->layout.ring, v->layout.hosts, ns, key, n))
    out.push_back(v->nodes[i]->info().id);
  return out;
}

ClusterCounters ClusterCache::counters() const {
  return {routed_.load(),
          fallback_hits_.load(),
          unavailable_.load(),
          watch_ ? watch_->changes() : 0,
          watch_ ? watch_->bad_records() : 0,
          NodeLink::unproven(),
          stale_view_.load()};
}

}  // namespace ecstore::cluster
