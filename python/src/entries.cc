#include "python/src/entries.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "base/mutex.h"

namespace ecstore::py {

using namespace nb::literals;

Info ToInfo(const EntryInfo& e) {
  Info i;
  i.ns = e.ns;
  i.key = e.key;
  i.dtype = DTypeName(e.meta.dtype);
  i.tier = TierName(e.tier());
  for (Tier t : kAllTiers)
    if (e.tiers.has(t)) i.tiers.push_back(TierName(t));
  i.shape = e.meta.shape;
  i.bytes = e.bytes;
  i.hits = e.hits;
  i.created_us = e.created_us;
  i.last_access_us = e.last_access_us;
  i.checksum = e.checksum;
  return i;
}

TensorMeta ToMeta(const std::string& dtype, const std::vector<int64_t>& shape) {
  TensorMeta m;
  m.dtype = Check(ParseDType(dtype));
  m.shape = shape;
  return m;
}

void Core::Release() {
  MutexLock g(&leases_mu);
  if (--leases > 0 || !shut_when_released) return;
  shut_when_released = false;
  Status st = Any()->Close();  // close() deferred it to the last lease
  if (!st.ok()) spdlog::error("closing the store after its last lease: {}", st.ToString());
}

Lease::Lease(ReadLease l, std::shared_ptr<Core> core, int device) : device_(device) {
  core->Hold();
  lease_.reset(new ReadLease(std::move(l)), [core](ReadLease* p) {
    nb::gil_scoped_release nogil;
    {
      auto lock = core->Lock();
      delete p;
    }
    core->Release();
  });
}

Reservation::Held::Held(std::shared_ptr<Core> c) : core(std::move(c)) { core->Hold(); }

Reservation::Held::~Held() {
  nb::gil_scoped_release nogil;
  {
    auto lock = core->Lock();
    slot.reset();  // an uncommitted block goes back to the pool while the cache is open
  }
  core->Release();
}

Reservation::Reservation(std::unique_ptr<PutSlot> slot, std::shared_ptr<Core> core)
    : held_(std::make_shared<Held>(core)), core_(std::move(core)) {
  held_->slot = std::move(slot);
}

nb::object Reservation::view() {
  auto b = Bytes();
  auto* keep = new std::shared_ptr<Held>(held_);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<Held>*>(p); });
  nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> arr(b.data(), {b.size()}, owner);
  nb::object obj = nb::cast(arr, nb::rv_policy::reference);
  views_.emplace_back(obj);
  return obj;
}

void Reservation::EndViews() {
  ended_ = true;
  for (nb::weakref& w : views_) {
    nb::object v = w();
    if (!v.is_none()) nb::setattr(v.attr("flags"), "writeable", nb::bool_(false));
  }
  views_.clear();
}

void Reservation::abandon() {
  if (ended_) return;
  EndViews();
  // Freed now unless a view still holds it; then with the last view.
  held_.reset();
}

void Reservation::commit(bool checksum_when_spilled) {
  Bytes();
  // The block is the entry's from now on: a write through a view would change it. A landing
  // block's bytes still land through its views while the daemon copies them: read-only once
  // the commit returns.
  PutSlot& slot = *held_->slot;
  const bool landing = slot.landing();
  if (!landing) EndViews();
  ended_ = true;
  struct EndAfter {
    Reservation* r;
    bool landing;
    ~EndAfter() {  // with the GIL again: after `nogil` below
      try {
        if (landing) r->EndViews();
      } catch (...) {  // unwinding already: the commit's own error is the one to raise
      }
      r->held_.reset();  // the views, if any, keep the block (and the cache open) until they go
    }
  } end_after{this, landing};
  nb::gil_scoped_release nogil;
  // A landing block's commit holds the connection until its bytes land: not before the first
  // piece has, waited for here without the connection, so that a block that never lands
  // fails alone and the Cache's other calls (one connection) go on meanwhile.
  if (landing) Check(slot.AwaitLanded(std::chrono::seconds(30), net::kPutLandingPiece));
  auto lock = core_->Lock();
  if (core_->closed) Check(Status::InvalidArgument("this cache is closed"));
  Check(slot.Commit(checksum_when_spilled));
}

// The library's messages name its Options fields; a Python caller sets the same thing
// through an argument of ecstore.open/connect, or a daemon's flag.
static std::string WithArgumentNames(std::string msg) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"Options::device_pool_bytes", "device_pool_size"},
      {"Options::pool_bytes", "pool_size"},
      {"Options::disk_quota_bytes", "disk_quota"},
      {"the TensorMeta shape/dtype", "the dtype/shape"},
      {"ServerOptions::rdma_listen", "the daemon's --rdma-listen"},
      {"ClientOptions::token", "connect(token=...) or EC_STORE_TOKEN"},
  };
  for (auto [lib, arg] : kNames)
    for (size_t at = msg.find(lib); at != std::string::npos; at = msg.find(lib, at + 1))
      msg.replace(at, std::strlen(lib), arg);
  return msg;
}

// Status errors raise the ecstore.errors class of their code, with the status's message.
void BindErrors() {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::object errors = nb::module_::import_("ecstore.errors");
      nb::object cls = errors.attr(ecstore::Status::CodeName(e.status.code()));
      PyErr_SetString(cls.ptr(), WithArgumentNames(e.status.message()).c_str());
    }
  });
}

nb::object ErrorObject(const Status& st) {
  nb::object errors = nb::module_::import_("ecstore.errors");
  return errors.attr(ecstore::Status::CodeName(st.code()))(WithArgumentNames(st.message()));
}

// What entries are and how their bytes are held: EntryInfo, Lease, Reservation.
void BindEntries(nb::module_& m) {
  nb::class_<Info>(m, "EntryInfo")
      .def_ro("namespace", &Info::ns)
      .def_ro("key", &Info::key)
      .def_ro("dtype", &Info::dtype, "safetensors spelling: BF16, F16, F32, ...")
      .def_ro("shape", &Info::shape)
      .def_ro("bytes", &Info::bytes)
      .def_ro("tier", &Info::tier, "the fastest tier holding it: device, pool or disk")
      .def_ro("tiers", &Info::tiers, "every tier holding a copy")
      .def_ro("hits", &Info::hits)
      .def_ro("created_us", &Info::created_us)
      .def_ro("last_access_us", &Info::last_access_us)
      .def_ro("checksum", &Info::checksum)
      .def("__repr__", [](const Info& i) {
        return "EntryInfo(" + i.ns + "/" + i.key + ", " + i.dtype + ", " + std::to_string(i.bytes) +
               " bytes, " + i.tier + ")";
      });

  nb::class_<Lease>(m, "Lease")
      .def_prop_ro("info", &Lease::info)
      .def_prop_ro("released", &Lease::released)
      .def_prop_ro("pinned_only", &Lease::pinned_only)
      .def_prop_ro("address", &Lease::address)
      .def("view", &Lease::view, "the bytes in place (read-only uint8 array; keeps the lease)")
      .def("torch_view", &Lease::torch_view, "the bytes in place as a torch uint8 tensor")
      .def_prop_ro("on_device", &Lease::on_device, "whether the bytes are in device memory")
      .def("release", &Lease::release);

  nb::class_<Reservation>(m, "Reservation")
      .def("view", &Reservation::view,
           "the reserved bytes, writable (uint8 array) until commit or abandon, read-only "
           "after")
      .def("commit", &Reservation::commit, "checksum_when_spilled"_a = false,
           "installs the entry; with checksum_when_spilled it is readable at once and hashed "
           "when first spilled (Store::PutReservation::ChecksumWhenSpilled)")
      .def("arena", &Reservation::arena,
           "(address, bytes) of the same-host put arena the block lies in, to register with "
           "CUDA once; (0, 0) for an embedded store's pool")
      .def("landing", &Reservation::landing,
           "the counter of a block still landing (reserve(..., landing=True) through a "
           "same-host daemon that offers it): set(n) as its first n bytes land, while "
           "another thread's commit() has the daemon copy them as they do; None otherwise")
      .def("abandon", &Reservation::abandon);

  nb::class_<Reservation::Landing>(m, "Landing")
      .def("set", &Reservation::Landing::set, "n"_a,
           "the block's first n bytes have landed (never lower it)")
      .def("fail", &Reservation::Landing::fail,
           "the bytes will not land: the daemon stores nothing and commit() raises")
      .def_prop_ro("landed", &Reservation::Landing::landed);
}

std::vector<Parts> ToParts(const std::vector<std::string>& keys,
                           const std::vector<std::vector<uint64_t>>& ptrs,
                           const std::vector<std::vector<uint64_t>>& sizes) {
  if (ptrs.size() != keys.size() || sizes.size() != keys.size())
    Check(Status::InvalidArgument("give one list of pointers and one of sizes per key"));
  std::vector<Parts> parts(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (ptrs[i].size() != sizes[i].size())
      Check(Status::InvalidArgument("key " + keys[i] + " has " + std::to_string(ptrs[i].size()) +
                                    " pointers but " + std::to_string(sizes[i].size()) + " sizes"));
    for (size_t j = 0; j < ptrs[i].size(); ++j) {
      // Raw addresses by design (a tensor's data_ptr()); what can be checked is.
      if (ptrs[i][j] == 0 || ptrs[i][j] + sizes[i][j] < ptrs[i][j])
        Check(Status::InvalidArgument(
            "key " + keys[i] + ", piece " + std::to_string(j) +
            (ptrs[i][j] == 0 ? ": a null address" : ": address + size wraps around") +
            "; give each piece's data_ptr() and its byte count"));
      parts[i].emplace_back(reinterpret_cast<uint8_t*>(ptrs[i][j]), sizes[i][j]);
    }
  }
  return parts;
}

BufferDesc ToDesc(uint64_t ptr, uint64_t nbytes, int device, uint64_t stream) {
  void* p = reinterpret_cast<void*>(ptr);
  return device >= 0 ? BufferDesc::Device(p, nbytes, device, stream)
                     : BufferDesc::Host({static_cast<uint8_t*>(p), nbytes});
}

// The facet, or a Python error saying what to do instead where this cache has none.
DeviceIo& Device(Cache* c, const char* instead) {
  if (DeviceIo* d = c->capabilities().device_io) return *d;
  Check(Status::InvalidArgument(std::string("a ") + c->transport() +
                                " cache does not copy device memory itself: " + instead));
  __builtin_unreachable();
}

// Result i: the entry's info, or None where keys[i] is absent. Other errors raise.
std::vector<std::optional<Info>> InfosOrNone(const std::vector<Result<EntryInfo>>& got) {
  std::vector<std::optional<Info>> out;
  for (auto& g : got) {
    if (g.ok())
      out.push_back(ToInfo(*g));
    else if (g.status().IsNotFound())
      out.push_back(std::nullopt);
    else
      Check(g.status());
  }
  return out;
}

}  // namespace ecstore::py
