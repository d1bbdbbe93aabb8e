// The Python handles the bindings hand out (python/src/bindings.cc binds the Cache): entry
// info, a lease on an entry's bytes, a reservation to fill in place, and the Core a Cache
// and its handles share; Status errors as Python exceptions.
// Thread rules: a handle may be used from any Python thread; those of a remote Cache take
// its Core's mutex for every client call (a Client serves one thread at a time).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "cache/cache_parts.h"
#include "cluster/cluster_cache.h"
#include "net/client.h"
#include "store/store.h"

namespace ecstore::py {

namespace nb = nanobind;

// A failed call: translated into the ecstore.errors class named after its code.
struct StatusError {
  Status status;
};

// The ecstore.errors instance for a failed status (to return, not raise).
nb::object ErrorObject(const Status& st);

inline void Check(const Status& st) {
  if (!st.ok()) throw StatusError{st};
}
template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) throw StatusError{r.status()};
  return std::move(r).value();
}

// Entry metadata as Python sees it (ecstore.EntryInfo).
struct Info {
  std::string ns, key, dtype, tier;
  std::vector<std::string> tiers;
  std::vector<int64_t> shape;
  uint64_t bytes = 0, hits = 0, created_us = 0, last_access_us = 0, checksum = 0;
};

Info ToInfo(const EntryInfo& e);

TensorMeta ToMeta(const std::string& dtype, const std::vector<int64_t>& shape);

// A block reserved for one put and filled in place (Cache::ReserveSlot: a device->host copy
// straight into it, no staging buffer), then committed: pool memory of an embedded store, or
// a same-host client's put arena (net/put_arena.h), which the server copies from once. Its
// views stop being writable at commit or abandon (the block is then the entry's, or free);
// an abandoned block goes back only once the last view of it is gone, so a view never
// points at memory that another entry has taken.
class Reservation {
 public:
  Reservation(std::unique_ptr<PutSlot> slot, std::shared_ptr<struct Core> core);
  nb::object view();  // a writable uint8 numpy array over the block
  // (address, bytes) of the put arena the block lies in, to register it with CUDA once;
  // (0, 0) for pool memory (Cache.register_with_cuda registers the pool).
  std::pair<uint64_t, uint64_t> arena() {
    Bytes();
    auto m = held_->slot->region();
    return {reinterpret_cast<uint64_t>(m.data()), m.size()};
  }
  // A landing block's counter (reserve(..., landing=True) from a same-host daemon that
  // offers it); None otherwise: fill the block, then commit.
  struct Landing {
    std::shared_ptr<const PutSlot> slot;  // keeps the block (and its counter) mapped
    void set(uint64_t n) const { slot->Landed(n); }
    void fail() const { slot->FailLanding(); }
    uint64_t landed() const { return slot->landed(); }
  };
  std::optional<Landing> landing() {
    Bytes();
    if (!held_->slot->landing()) return std::nullopt;
    return Landing{std::shared_ptr<const PutSlot>(held_, held_->slot.get())};
  }
  void commit(bool checksum_when_spilled);
  void abandon();

 private:
  // The reserved block, shared with the views: an abandoned one is freed with the last. It
  // holds the cache open as a lease does (Core::Hold), so a view outliving close() or the
  // Cache itself still points into mapped memory, and the block is given back before it shuts.
  struct Held {
    explicit Held(std::shared_ptr<struct Core> c);
    ~Held();
    std::shared_ptr<struct Core> core;
    std::unique_ptr<PutSlot> slot;
  };
  std::span<uint8_t> Bytes() {
    if (ended_) Check(Status::InvalidArgument("this reservation was committed or abandoned"));
    return held_->slot->bytes();
  }
  void EndViews();  // every view made so far becomes read-only
  std::shared_ptr<Held> held_;
  std::vector<nb::weakref> views_;
  bool ended_ = false;
  std::shared_ptr<struct Core> core_;
};

// What a Cache and its leases share: the store or client, and (for a client, which serves
// one thread at a time) the mutex every call and every lease release takes. It lives until
// the Cache is closed and the last lease is gone, so a lease outliving close() stays valid.
// An embedded store closed while leases (or arrays viewing them) live is persisted at
// close() and shut only when the last of them goes: their bytes stay mapped until then.
// Holds a Core's `mu` for its scope where its client serves one thread at a time, else
// nothing. `mu` guards no field, only the order of calls into the client, so there is nothing
// for the analysis to check and it is told so.
class CallLock {
 public:
  explicit CallLock(Mutex* mu) NO_THREAD_SAFETY_ANALYSIS : mu_(mu) {
    if (mu_) mu_->lock();
  }
  ~CallLock() NO_THREAD_SAFETY_ANALYSIS {
    if (mu_) mu_->unlock();
  }
  CallLock(const CallLock&) = delete;
  CallLock& operator=(const CallLock&) = delete;

 private:
  Mutex* mu_;
};

struct Core {
  Mutex mu;
  std::unique_ptr<Cache> cache;
  bool one_thread = false;                   // a Client serves one thread at a time: calls take mu
  cluster::ClusterCache* cluster = nullptr;  // `cache`, where it is a cluster client
  bool embedded = false;                     // `cache` is a Store in this process
  bool closed = false;
  Mutex leases_mu;
  int leases GUARDED_BY(leases_mu) = 0;
  bool shut_when_released GUARDED_BY(leases_mu) = false;
  CallLock Lock() { return CallLock(one_thread ? &mu : nullptr); }
  Cache* Live() {
    if (closed) Check(Status::InvalidArgument("this cache is closed"));
    return cache.get();
  }
  Cache* Any() { return cache.get(); }  // open or closed
  // A lease or a reservation keeps the cache open past close(): Hold when it is made,
  // Release when the last of it (and of the arrays viewing it) goes; the last Release after
  // close() shuts the cache.
  void Hold() {
    MutexLock g(&leases_mu);
    ++leases;
  }
  void Release();
};

// A lease shared by the Python Lease object and every array viewing its bytes: the entry
// is released when the last of them goes (releasing the Lease early is safe). A remote
// lease is released under its client's mutex, whatever thread drops it.
class Lease {
 public:
  Lease(ReadLease l, std::shared_ptr<Core> core, int device = 0);
  Info info() const { return ToInfo(Held().info()); }
  bool pinned_only() const { return Held().data() == nullptr; }
  // The bytes, read-only, without a copy; the array keeps the lease alive.
  nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>> view() const {
    const ReadLease& l = Held();
    if (!l.data()) Check(Status::InvalidArgument("a pin holds no bytes to view; use acquire"));
    if (l.memory_kind() == MemoryKind::kDevice)
      Check(Status::InvalidArgument("a device lease has no host view; use tensor()"));
    auto* keep = new std::shared_ptr<ReadLease>(lease_);
    nb::capsule owner(keep,
                      [](void* p) noexcept { delete static_cast<std::shared_ptr<ReadLease>*>(p); });
    return nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>(l.data(), {l.size()}, owner);
  }
  // The same bytes as a torch uint8 tensor (through DLPack; torch has no read-only tensors:
  // writing to it is an error the store cannot stop -- a shared-memory mapping faults).
  nb::ndarray<nb::pytorch, uint8_t, nb::ndim<1>> torch_view() const {
    const ReadLease& l = Held();
    if (!l.data()) Check(Status::InvalidArgument("a pin holds no bytes to view; use acquire"));
    auto* keep = new std::shared_ptr<ReadLease>(lease_);
    nb::capsule owner(keep,
                      [](void* p) noexcept { delete static_cast<std::shared_ptr<ReadLease>*>(p); });
    const bool dev = l.memory_kind() == MemoryKind::kDevice;
    return nb::ndarray<nb::pytorch, uint8_t, nb::ndim<1>>(
        const_cast<uint8_t*>(l.data()), {l.size()}, owner, {}, nb::dtype<uint8_t>(),
        dev ? nb::device::cuda::value : nb::device::cpu::value, dev ? device_ : 0);
  }
  bool on_device() const { return Held().memory_kind() == MemoryKind::kDevice; }
  uint64_t address() const { return reinterpret_cast<uint64_t>(Held().data()); }
  void release() { lease_.reset(); }
  bool released() const { return !lease_; }

 private:
  const ReadLease& Held() const {
    if (!lease_) Check(Status::InvalidArgument("this lease was released"));
    return *lease_;
  }
  int device_;
  std::shared_ptr<ReadLease> lease_;
};

// Registers the translation of StatusError into ecstore.errors, and binds EntryInfo, Lease
// and Reservation.
void BindErrors();
void BindEntries(nb::module_& m);
void BindUtilities(nb::module_& m);  // utilities.cc

// The pieces of each key's entry from raw addresses and byte counts (a tensor's data_ptr()
// and nbytes): InvalidArgument, raised, for lists that do not match or a null or wrapping
// address.
std::vector<Parts> ToParts(const std::vector<std::string>& keys,
                           const std::vector<std::vector<uint64_t>>& ptrs,
                           const std::vector<std::vector<uint64_t>>& sizes);

// A buffer descriptor from Python's (address, bytes, CUDA device or -1 for host memory,
// stream).
BufferDesc ToDesc(uint64_t ptr, uint64_t nbytes, int device, uint64_t stream = 0);
// The cache's device facet, or a Python error saying what to do instead where it has none.
DeviceIo& Device(Cache* c, const char* instead);
// Result i: the entry's info, or None where keys[i] is absent. Other errors raise.
std::vector<std::optional<Info>> InfosOrNone(const std::vector<Result<EntryInfo>>& got);

}  // namespace ecstore::py
