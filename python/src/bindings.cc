// ecstore._ecstore: the Cache interface (cache/cache.h) for Python, bound once for every
// Cache -- the embedded Store, the remote Client, a cluster -- with no branch on which it is
// (cluster() and owners() are a cluster client's alone). The Python package
// (python/ecstore/__init__.py) turns tensors and arrays into the views these functions take.
// Thread rules: the GIL is released for every call that does I/O or copies. A Store is
// thread-safe; a Client is not, so a remote Cache serialises its calls with a mutex.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <optional>

#include "cache/buffer_io.h"
#include "cache/cache_parts.h"
#include "cache/stats_json.h"
#include "cuda/cuda.h"
#include "cuda/peer.h"
#include "net/client.h"
#include "python/src/client_options.h"
#include "python/src/entries.h"
#include "store/store.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace ecstore::py {
namespace {

using InBytes = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using OutBytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

class PyCache {
 public:
  explicit PyCache(std::unique_ptr<Store> s) : core_(std::make_shared<Core>()) {
    core_->cache = std::move(s);
    core_->embedded = true;
  }
  explicit PyCache(std::unique_ptr<net::Client> c) : core_(std::make_shared<Core>()) {
    core_->cache = std::move(c);
    core_->one_thread = true;
  }
  explicit PyCache(std::unique_ptr<cluster::ClusterCache> c) : core_(std::make_shared<Core>()) {
    core_->cluster = c.get();
    core_->cache = std::move(c);
  }
  ~PyCache() {
    try {
      close();
    } catch (const StatusError&) {  // a destructor cannot raise; close() explicitly to see it
    }
  }

  std::string transport() const { return core_->closed ? "closed" : core_->Live()->transport(); }

  void put(const std::string& ns, const std::string& key, const std::string& dtype,
           const std::vector<int64_t>& shape, InBytes data) {
    TensorMeta meta = ToMeta(dtype, shape);
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    Check(core_->Live()->Put(ns, key, meta, {data.data(), data.size()}));
  }

  Info get_into(const std::string& ns, const std::string& key, OutBytes out) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    return ToInfo(Check(core_->Live()->Get(ns, key, {out.data(), out.size()})));
  }

  // The entry in a new array that alloc(dtype, shape) makes and returns with its writable
  // uint8 view, sized by the cache's answer: an embedded store's get into no buffer says the
  // entry's size and layout; a daemon or cluster is asked LOOKUP first (a get would move the
  // bytes). An entry replaced meanwhile by one of another size is sized again from the get's
  // own answer. NotFound raises. Returns (array, info).
  std::pair<nb::object, Info> get_new(const std::string& ns, const std::string& key,
                                      nb::callable alloc) {
    Cache* c = core_->Live();
    Result<EntryInfo> got = Status::NotFound("");
    {
      nb::gil_scoped_release nogil;
      auto l = core_->Lock();
      got = core_->embedded ? c->Get(ns, key, {}) : c->Lookup(ns, key);
    }
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (!got.ok() && !got.status().IsBufferTooSmall()) Check(got.status());
      const TensorMeta& meta = got.ok() ? got->meta : *got.status().needed_meta();
      nb::tuple made = nb::cast<nb::tuple>(alloc(DTypeName(meta.dtype), meta.shape));
      OutBytes out = nb::cast<OutBytes>(made[1]);
      {
        nb::gil_scoped_release nogil;
        auto l = core_->Lock();
        got = c->Get(ns, key, {out.data(), out.size()});
      }
      if (got.ok() && got->bytes == out.size()) return {made[0], ToInfo(*got)};
    }
    Check(Status::Busy(ns + "/" + key + " kept changing size while being read"));
    __builtin_unreachable();
  }

  std::vector<std::optional<Info>> get_many(const std::string& ns,
                                            const std::vector<std::string>& keys,
                                            std::vector<OutBytes> outs) {
    std::vector<std::span<uint8_t>> dsts;
    for (auto& o : outs) dsts.emplace_back(o.data(), o.size());
    std::vector<Result<EntryInfo>> got;
    {
      nb::gil_scoped_release nogil;
      auto l = core_->Lock();
      got = core_->Live()->GetMany(ns, keys, dsts);
    }
    return InfosOrNone(got);
  }

  // Entries whose bytes lie in several pieces of host memory the caller owns (store/
  // cache_parts.h): ptrs[i][j] and sizes[i][j] are entry i's pieces, in order. Result i:
  // (ok, absent, why) -- a failed entry never raises, so that one bad key costs only itself.
  using PartsResult = std::tuple<bool, bool, std::string>;
  using Pointers = std::vector<std::vector<uint64_t>>;
  std::vector<PartsResult> get_into_parts(const std::string& ns,
                                          const std::vector<std::string>& keys,
                                          const Pointers& ptrs, const Pointers& sizes) {
    return OnParts(ns, keys, ptrs, sizes,
                   [](Cache& c, std::string_view n, const auto& k, const auto& p) {
                     return GetIntoParts(c, n, k, p);
                   });
  }
  std::vector<PartsResult> put_from_parts(const std::string& ns,
                                          const std::vector<std::string>& keys,
                                          const Pointers& ptrs, const Pointers& sizes) {
    return OnParts(ns, keys, ptrs, sizes,
                   [](Cache& c, std::string_view n, const auto& k, const auto& p) {
                     return PutFromParts(c, n, k, p);
                   });
  }
  template <typename Fn>
  std::vector<PartsResult> OnParts(const std::string& ns, const std::vector<std::string>& keys,
                                   const Pointers& ptrs, const Pointers& sizes, Fn fn) {
    std::vector<Parts> parts = ToParts(keys, ptrs, sizes);
    std::vector<Status> done;
    {
      nb::gil_scoped_release nogil;
      auto l = core_->Lock();
      done = fn(*core_->Live(), ns, keys, parts);
    }
    std::vector<PartsResult> out;
    for (const Status& s : done)
      out.emplace_back(s.ok(), s.IsNotFound(), s.ok() ? "" : s.ToString());
    return out;
  }
  Lease acquire(const std::string& ns, const std::string& key) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    return Lease(Check(core_->Live()->Acquire(ns, key)), core_);
  }

  // None where absent; any other failure raises (the leases already taken are released).
  // Every lease is wrapped before anything raises: a Lease releases under the core's lock.
  std::vector<std::optional<Lease>> acquire_many(const std::string& ns,
                                                 const std::vector<std::string>& keys) {
    std::vector<Result<ReadLease>> got;
    {
      nb::gil_scoped_release nogil;
      auto l = core_->Lock();
      got = core_->Live()->AcquireMany(ns, keys);
    }
    std::vector<std::optional<Lease>> out;
    Status failed;
    for (auto& g : got) {
      if (g.ok()) {
        out.emplace_back(Lease(std::move(*g), core_));
        continue;
      }
      if (!g.status().IsNotFound() && failed.ok()) failed = g.status();
      out.emplace_back(std::nullopt);
    }
    Check(failed);
    return out;
  }

  // ---- any memory: buffer descriptors (cache/buffer_io.h)
  // descs[i] = (address, bytes, CUDA device or -1 for host memory, stream): keys[i]'s bytes
  // land there, device memory after the work queued on `stream` (torch's current stream),
  // complete on return. None where absent; any other failure raises.
  using Desc = std::tuple<uint64_t, uint64_t, int, uint64_t>;
  std::vector<std::optional<Info>> get_into_buffers(const std::string& ns,
                                                    const std::vector<std::string>& keys,
                                                    const std::vector<Desc>& descs) {
    std::vector<BufferDesc> dsts;
    for (const auto& [ptr, n, device, stream] : descs)
      dsts.push_back(ToDesc(ptr, n, device, stream));
    Cache* c = core_->Live();
    std::vector<Result<EntryInfo>> got;
    {
      nb::gil_scoped_release nogil;
      auto l = core_->Lock();
      got = GetIntoBuffers(*c, ns, keys, dsts);
    }
    return InfosOrNone(got);
  }
  // Each item's bytes at its descriptor (as above) put under (ns, key), after the work queued
  // on its stream, a step's saves in one call (cache/buffer_io.h's PutManyFromBuffers):
  // device memory copied by the cache itself, into reserved blocks, or staged. Returns for
  // each item the way it went ("host", "cache", "slot", "landing" or "staged"), or the
  // ecstore error it failed with (not raised: the other items are in).
  using Item = std::tuple<std::string, std::string, std::vector<int64_t>, Desc>;
  nb::list put_many_from_buffers(const std::string& ns, const std::vector<Item>& items,
                                 bool checksum_when_spilled, bool device_puts, bool landing) {
    std::vector<BufferPut> puts;
    for (const auto& [key, dtype, shape, src] : items) {
      const auto& [ptr, n, device, stream] = src;
      puts.push_back({key, ToMeta(dtype, shape), ToDesc(ptr, n, device, stream)});
    }
    Cache* c = core_->Live();
    BufferPutOptions o{checksum_when_spilled, device_puts, landing};
    std::vector<PutRoute> routes;
    std::vector<Status> got;
    {
      nb::gil_scoped_release nogil;
      auto l = core_->Lock();
      got = PutManyFromBuffers(*c, ns, puts, o, &routes);
    }
    nb::list out;
    for (size_t i = 0; i < got.size(); ++i)
      out.append(got[i].ok() ? nb::object(nb::str(PutRouteName(routes[i]))) : ErrorObject(got[i]));
    return out;
  }
  // CacheCapabilities by name: what this cache does itself (cache/cache.h).
  nb::dict capabilities() {
    CacheCapabilities c = core_->Live()->capabilities();
    nb::dict d;
    d["device_tier"] = c.device_tier;
    d["device_puts"] = c.device_puts;
    d["device_leases"] = c.device_leases;
    d["in_place_reads"] = c.in_place_reads;
    d["reserve"] = c.reserve;
    d["prefetch"] = c.prefetch;
    d["prefetch_queued"] = c.prefetch_queued;
    d["claims"] = c.claims != nullptr;
    return d;
  }
  // src: a device address (torch's data_ptr()); the copy is complete on return.
  // Embedded: into the device tier. A same-host client of a server offering device puts:
  // copied by the server out of this process's device memory (net/device_put.h).
  // InvalidArgument where the cache does not copy device memory itself.
  void put_device(const std::string& ns, const std::string& key, const std::string& dtype,
                  const std::vector<int64_t>& shape, uint64_t src, uint64_t nbytes,
                  bool checksum_when_spilled) {
    TensorMeta meta = ToMeta(dtype, shape);
    const void* p = reinterpret_cast<const void*>(src);
    Cache* c = core_->Live();
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    Check(Device(c, "copy the tensor to host memory and put that")
              .PutFromDevice(ns, key, meta, p, nbytes, checksum_when_spilled));
  }
  // Embedded: from the store's device tier. A same-host client: the server's device pool,
  // opened once over CUDA IPC.
  Lease acquire_device(const std::string& ns, const std::string& key, int device) {
    Cache* c = core_->Live();
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    ReadLease lease = Check(Device(c, "acquire the host copy").AcquireOnDevice(ns, key));
    cuda::IsDevicePointer(lease.data(), &device);  // the pool's GPU, wherever it lives
    return Lease(std::move(lease), core_, device);
  }

  // A hint: an embedded store reads the keys' disk-only entries into its pool in one batch;
  // a server offering PREFETCH queues it and does the same on its own thread. True when it
  // was acted on (or queued) for every key.
  bool prefetch(const std::string& ns, const std::vector<std::string>& keys) {
    Cache* c = core_->Live();
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    return Check(c->Prefetch(ns, keys));
  }

  // A claim on a key found absent (server/claim_table.h): ("granted" | "held" | "present",
  // ms left on a held claim). An embedded store grants every claim (nothing else computes
  // for it).
  std::pair<std::string, uint32_t> claim(const std::string& ns, const std::string& key,
                                         uint32_t ttl_ms) {
    Cache* c = core_->Live();
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    ClaimAnswer got =
        Check(ClaimOrGrant(c->capabilities(), ns, key, std::chrono::milliseconds(ttl_ms)));
    return {net::ClaimOutcomeName(got.outcome), got.ms_left};
  }

  Lease pin(const std::string& ns, const std::string& key) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    return Lease(Check(core_->Live()->Pin(ns, key)), core_);
  }

  std::optional<Info> lookup(const std::string& ns, const std::string& key) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    auto r = core_->Live()->Lookup(ns, key);
    if (r.status().IsNotFound()) return std::nullopt;
    return ToInfo(Check(std::move(r)));
  }

  std::vector<std::optional<Info>> lookup_many(const std::string& ns,
                                               const std::vector<std::string>& keys) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    std::vector<std::optional<Info>> out;
    for (auto& e : Check(core_->Live()->LookupMany(ns, keys)))
      out.push_back(e ? std::optional<Info>(ToInfo(*e)) : std::nullopt);
    return out;
  }

  // Per key, (node, medium) of every copy: "" for the node of an embedded store or daemon.
  std::vector<std::vector<std::pair<std::string, std::string>>> locate(
      const std::string& ns, const std::vector<std::string>& keys) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    std::vector<std::vector<std::pair<std::string, std::string>>> out;
    for (auto& at : Check(core_->Live()->Locate(ns, keys))) {
      auto& row = out.emplace_back();
      for (auto& loc : at) row.emplace_back(std::move(loc.node), TierName(loc.medium));
    }
    return out;
  }

  bool contains(const std::string& ns, const std::string& key) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    return Check(core_->Live()->Contains(ns, key));
  }

  std::vector<bool> contains_many(const std::string& ns, const std::vector<std::string>& keys) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    return Check(core_->Live()->ContainsMany(ns, keys));
  }

  bool erase(const std::string& ns, const std::string& key) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    Status st = core_->Live()->Erase(ns, key);
    if (st.IsNotFound()) return false;
    Check(st);
    return true;
  }

  // One durable tombstone write for the lot (one ERASE_MANY request per 1024 keys remotely).
  std::vector<bool> erase_many(const std::string& ns, const std::vector<std::string>& keys) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    std::vector<std::pair<std::string, std::string>> ns_keys;
    for (const std::string& k : keys) ns_keys.emplace_back(ns, k);
    std::vector<bool> erased;
    Check(core_->Live()->EraseMany(ns_keys, &erased));
    return erased;
  }

  std::vector<Info> list(const std::optional<std::string>& ns) {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    std::vector<Info> out;
    Check(core_->Live()->ListPages(1024, [&](std::vector<EntryInfo>&& page) {
      for (auto& e : page)
        if (!ns || e.ns == *ns) out.push_back(ToInfo(e));
      return true;
    }));
    return out;
  }

  // A cluster client's view: its members (as last seen), whether etcd is current, and what
  // it routed; "null" for anything else.
  std::string cluster_json() {
    core_->Live();
    if (!core_->cluster) return "null";
    return ClusterJson(*core_->cluster);
  }
  // The ids of the key's first n choices in a cluster, best first (its owner first).
  std::vector<std::string> owners(const std::string& ns, const std::string& key, size_t n) {
    core_->Live();
    if (!core_->cluster) Check(Status::InvalidArgument("owners: not a cluster client"));
    return core_->cluster->Owners(ns, key, n);
  }

  std::string stats_json() {
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    StoreStats s = Check(core_->Live()->Stats());
    MemoryRegistration* m = core_->Live()->capabilities().memory;
    TransferStats t = m ? m->transfer_stats() : TransferStats{};
    // Gets into another GPU than the one holding the entry, this process's (cuda/peer.h).
    cuda::PeerRoutes::Counts g = cuda::PeerRoutes::Process().counts();
    std::string extra = std::string("{\"transport\":\"") + core_->Live()->transport() +
                        "\",\"transfer\":{\"direct_reads\":" + std::to_string(t.direct_reads) +
                        ",\"direct_bytes\":" + std::to_string(t.direct_bytes) +
                        ",\"bounced_reads\":" + std::to_string(t.bounced_reads) +
                        ",\"bounced_bytes\":" + std::to_string(t.bounced_bytes) +
                        ",\"peer_copies\":" + std::to_string(g.peer_copies) +
                        ",\"peer_bytes\":" + std::to_string(g.peer_bytes) +
                        ",\"host_path_copies\":" + std::to_string(g.host_path_copies) +
                        ",\"host_path_bytes\":" + std::to_string(g.host_path_bytes) + "}}";
    return StatsToJson(s, -1, extra);
  }

  // The host pool as this process sees it: (address, bytes, read_only), e.g. to register it
  // with CUDA once. An embedded store's pool, or a shared-memory client's mapping of the
  // server's; (0, 0, True) where there is none here.
  std::tuple<uint64_t, uint64_t, bool> pool_region() {
    MemoryRegistration* m = core_->Live()->capabilities().memory;
    HostPoolView p = m ? m->host_pool() : HostPoolView{};
    return {reinterpret_cast<uint64_t>(p.bytes.data()), p.bytes.size(), p.read_only};
  }

  // The host memory this process fills for puts (a same-host client's put arenas)
  // registered with CUDA from now on; false where there is none, or without CUDA here.
  bool register_put_memory_with_cuda() {
    Cache* c = core_->Live();
    std::shared_ptr<MemoryRegistrar> reg = cuda::NewHostRegistrar();
    if (!reg) return false;
    nb::gil_scoped_release nogil;
    auto lock = core_->Lock();
    MemoryRegistration* m = c->capabilities().memory;
    return m && Check(m->RegisterPutMemoryWith(std::move(reg)));
  }

  // Memory gets will land in, registered once (RDMA: the NIC writes it, no bounce copy):
  // host memory, or device memory (`device` >= 0) where the NIC reaches it.
  void register_memory(uint64_t ptr, uint64_t nbytes, int device) {
    Cache* c = core_->Live();
    nb::gil_scoped_release nogil;
    auto lock = core_->Lock();
    if (MemoryRegistration* m = c->capabilities().memory)
      Check(m->RegisterMemory(ToDesc(ptr, nbytes, device)));
  }
  void unregister_memory(uint64_t ptr, uint64_t nbytes, int device) {
    Cache* c = core_->Live();
    nb::gil_scoped_release nogil;
    auto lock = core_->Lock();
    if (MemoryRegistration* m = c->capabilities().memory)
      m->UnregisterMemory(ToDesc(ptr, nbytes, device));
  }

  Reservation reserve(const std::string& ns, const std::string& key, const std::string& dtype,
                      const std::vector<int64_t>& shape, bool landing) {
    TensorMeta meta = ToMeta(dtype, shape);
    uint64_t bytes = Check(meta.ByteSize());
    Cache* c = core_->Live();
    nb::gil_scoped_release nogil;
    auto lock = core_->Lock();
    core_->Live();  // closed meanwhile?
    Reservations* r = c->capabilities().reservations;
    if (!r)
      Check(Status::InvalidArgument(std::string("a ") + c->transport() +
                                    " cache has no memory to reserve a put in (reserve is for "
                                    "an embedded store or a same-host daemon); use put"));
    return Reservation(Check(r->ReserveSlot(ns, key, meta, bytes, landing)), core_);
  }

  void flush() {
    Cache* c = core_->Live();
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    Check(c->Flush());
  }

  // Persists an embedded store and stops using the cache; leases still held (and arrays
  // viewing them) stay valid: the cache is closed when the last of them goes.
  void close() {
    if (core_->closed) return;
    nb::gil_scoped_release nogil;
    auto l = core_->Lock();
    core_->closed = true;
    {
      MutexLock g(&core_->leases_mu);
      if (core_->leases > 0) {
        core_->shut_when_released = true;
        Check(core_->Any()->Flush());
        return;
      }
    }
    Check(core_->Any()->Close());
  }

 private:
  std::shared_ptr<Core> core_;
};

std::unique_ptr<PyCache> Open(const std::string& dir, uint64_t pool_bytes,
                              uint64_t disk_quota_bytes, bool shareable, bool compress,
                              bool promote_on_get, int device, uint64_t device_pool_bytes,
                              const std::string& eviction_policy) {
  Options o;
  o.eviction_policy = eviction_policy;
  o.device = device;
  o.device_pool_bytes = device_pool_bytes;
  o.pool_bytes = pool_bytes;
  o.disk_quota_bytes = disk_quota_bytes;
  if (shareable) o.memory_backend = NewSharedHostBackend;
  o.compress = compress;
  o.promote_on_get = promote_on_get;
  std::unique_ptr<Store> s;
  {
    nb::gil_scoped_release nogil;
    s = Check(Store::Open(dir, o));
  }
  return std::make_unique<PyCache>(std::move(s));
}

std::unique_ptr<PyCache> Connect(const std::string& uri, const std::string& token,
                                 const std::string& transport, double timeout_s, int retries,
                                 bool put_arena, double connect_timeout_s, size_t replicas,
                                 const std::optional<std::map<std::string, std::string>>& tls,
                                 const std::map<std::string, std::string>& etcd) {
  net::ClientOptions o =
      ToClientOptions(token, transport, timeout_s, retries, put_arena, connect_timeout_s, tls);
  nb::gil_scoped_release nogil;
  if (uri.rfind("etcd://", 0) == 0 || uri.rfind("etcds://", 0) == 0) {  // a cluster
    cluster::ClusterOptions co;
    co.client = o;  // each node reached with these options
    co.etcd = ToEtcdAccess(etcd);
    co.replicas = replicas;
    return std::make_unique<PyCache>(Check(cluster::ClusterCache::Open(uri, co)));
  }
  return std::make_unique<PyCache>(Check(net::Client::Connect(uri, o)));
}

void BindCache(nb::module_& m) {
  nb::class_<PyCache>(m, "Cache")
      .def_prop_ro("transport", &PyCache::transport)
      .def("put", &PyCache::put, "ns"_a, "key"_a, "dtype"_a, "shape"_a, "data"_a)
      .def("get_into", &PyCache::get_into, "ns"_a, "key"_a, "out"_a)
      .def("get_new", &PyCache::get_new, "ns"_a, "key"_a, "alloc"_a)
      .def("get_many", &PyCache::get_many, "ns"_a, "keys"_a, "outs"_a)
      .def("acquire", &PyCache::acquire, "ns"_a, "key"_a)
      .def("acquire_many", &PyCache::acquire_many, "ns"_a, "keys"_a)
      .def("get_into_parts", &PyCache::get_into_parts, "ns"_a, "keys"_a, "ptrs"_a, "sizes"_a)
      .def("put_from_parts", &PyCache::put_from_parts, "ns"_a, "keys"_a, "ptrs"_a, "sizes"_a)
      .def("get_into_buffers", &PyCache::get_into_buffers, "ns"_a, "keys"_a, "descs"_a)
      .def("put_many_from_buffers", &PyCache::put_many_from_buffers, "ns"_a, "items"_a,
           "checksum_when_spilled"_a = false, "device_puts"_a = true, "landing"_a = true)
      .def("prefetch", &PyCache::prefetch, "ns"_a, "keys"_a)
      .def("capabilities", &PyCache::capabilities)
      .def("put_device", &PyCache::put_device, "ns"_a, "key"_a, "dtype"_a, "shape"_a, "src"_a,
           "nbytes"_a, "checksum_when_spilled"_a = false)
      .def("acquire_device", &PyCache::acquire_device, "ns"_a, "key"_a, "device"_a)
      .def("pin", &PyCache::pin, "ns"_a, "key"_a)
      .def("claim", &PyCache::claim, "ns"_a, "key"_a, "ttl_ms"_a)
      .def("lookup", &PyCache::lookup, "ns"_a, "key"_a)
      .def("lookup_many", &PyCache::lookup_many, "ns"_a, "keys"_a)
      .def("locate", &PyCache::locate, "ns"_a, "keys"_a)
      .def("contains", &PyCache::contains, "ns"_a, "key"_a)
      .def("contains_many", &PyCache::contains_many, "ns"_a, "keys"_a)
      .def("erase", &PyCache::erase, "ns"_a, "key"_a)
      .def("erase_many", &PyCache::erase_many, "ns"_a, "keys"_a)
      .def("list", &PyCache::list, "ns"_a = nb::none())
      .def("stats_json", &PyCache::stats_json)
      .def("cluster_json", &PyCache::cluster_json)
      .def("owners", &PyCache::owners, "ns"_a, "key"_a, "n"_a = 1)
      .def("pool_region", &PyCache::pool_region)
      .def("reserve", &PyCache::reserve, "ns"_a, "key"_a, "dtype"_a, "shape"_a, "landing"_a = false)
      .def("register_put_memory_with_cuda", &PyCache::register_put_memory_with_cuda)
      .def("register_memory", &PyCache::register_memory, "ptr"_a, "nbytes"_a, "device"_a = -1)
      .def("unregister_memory", &PyCache::unregister_memory, "ptr"_a, "nbytes"_a, "device"_a = -1)
      .def("flush", &PyCache::flush)
      .def("close", &PyCache::close);
}

// The module's functions that make a Cache: open, connect.
void BindFunctions(nb::module_& m) {
  m.def("open", &Open, "dir"_a, "pool_bytes"_a, "disk_quota_bytes"_a, "shareable"_a = false,
        "compress"_a = false, "promote_on_get"_a = true, "device"_a = 0, "device_pool_bytes"_a = 0,
        "eviction_policy"_a = "freq");
  m.def("connect", &Connect, "uri"_a, "token"_a = "", "transport"_a = "auto", "timeout_s"_a = 5.0,
        "retries"_a = 1, "put_arena"_a = true, "connect_timeout_s"_a = 0.0, "replicas"_a = 1,
        "tls"_a = nb::none(), "etcd"_a = std::map<std::string, std::string>());
}

}  // namespace
}  // namespace ecstore::py

NB_MODULE(_ecstore, m) {
  using namespace ecstore::py;
  m.doc() = "ec-store's C++ core: use the ecstore package, not this module";
  m.attr("__version__") = EC_STORE_VERSION;
  m.attr("DEFAULT_NAMESPACE") = ecstore::kDefaultNamespace;
  BindErrors();
  BindEntries(m);
  BindCache(m);
  BindFunctions(m);
  BindUtilities(m);
}
