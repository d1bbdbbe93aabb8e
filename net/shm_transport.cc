// Shared memory (same host): the server's pool is a memfd passed once with HELLO_OK and
// mapped read-only here; GET_SHM answers an offset under a lease, and the bytes are read in
// place (Acquire, AcquireMany) or copied out of a lease by the Client (Get, GetMany). A server with
// a device tier also hands out its device pool: its CUDA IPC handle is asked for and opened once
// (~0.8 ms), then GET_DEVICE answers offsets into it under leases, as GET_SHM does for the host
// pool. A server that offers put arenas gives the connection one on its first ReservePut
// (net/put_arena.h): puts are then written there and copied once by the server.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/memory_backend.h"
#include "cuda/cuda.h"
#include "net/device_put.h"
#include "net/transport.h"

namespace ecstore::net {
namespace {

class ShmTransport : public Transport {
 public:
  ShmTransport(const uint8_t* map, size_t bytes, uint32_t features,
               std::shared_ptr<MemoryRegistrar> registrar)
      : map_(map), bytes_(bytes), features_(features), registrar_(std::move(registrar)) {}
  ~ShmTransport() override {
    munmap(const_cast<uint8_t*>(map_), bytes_);
    cuda::CloseIpcHandle(device_base_);
  }
  const char* name() const override { return "shm"; }
  TransportCaps caps() const override {
    return {.same_host_zero_copy = true,
            .device_memory = cuda::Built(),
            .device_puts = cuda::Built() && (features_ & kFeaturePutDevice) != 0,
            .streamed_leases = (features_ & kFeatureStreamedLeases) != 0};
  }

  Result<ReadLease> AcquireOnDevice(Channel& ch, std::string_view ns,
                                    std::string_view key) override {
    if (!device_base_) EC_RETURN_IF_ERROR(OpenDevicePool(ch));
    return LeaseIn(ch, Op::kGetDevice, Op::kGetDeviceOk, ns, key,
                   static_cast<const uint8_t*>(device_base_), device_bytes_, MemoryKind::kDevice);
  }
  std::span<const uint8_t> shared_pool() const override { return {map_, bytes_}; }

  Result<ArenaReservation> ReservePut(Channel& ch, std::string head, uint64_t size,
                                      bool landing) override {
    if (!(features_ & kFeaturePutArena))
      return Transport::ReservePut(ch, std::move(head), size, landing);
    landing = landing && (features_ & kFeaturePutLanding);
    const uint64_t block = landing ? LandingBlockBytes(size) : size;
    std::optional<uint64_t> at = arena_ ? arena_->Allocate(block) : std::nullopt;
    if (!at) {  // none yet, or too small for this block beside those still held: a larger one
      const uint64_t need = std::max<uint64_t>(2 * size, arena_ ? 2 * arena_->bytes().size() : 0);
      uint64_t want = kMinArenaBytes;
      while (want < need) want *= 2;
      EC_RETURN_IF_ERROR(NewArena(ch, std::min(want, kMaxArenaBytes)));
      at = arena_->Allocate(block);
      if (!at)
        return Status::InvalidArgument("a put of " + std::to_string(size) +
                                       " bytes is larger than a put arena can be");
    }
    if (!landing) return ArenaReservation(arena_, *at, size, std::move(head));
    ArenaReservation r(arena_, *at, size, std::move(head), LandingCounterAt(*at, size));
    r.Landing().Landed(0);  // the word may hold an earlier block's bytes
    return r;
  }

  // Through the arena where there is one: a memcpy into the arena and the server's copy out
  // of it beat the unix socket's two copies by more than half again (bench remote, shm_put,
  // new keys of 2.9-58 MB). From a server offering
  // landing blocks, the commit goes out first and the bytes follow kPutLandingPiece at a
  // time, the server copying each piece out as it lands: the two copies overlap (bench
  // remote's shm_put, alternated runs: p50 2.8-3.1 ms against 3.3-3.5 filling the block
  // first; GB/s the same, 2.0-2.3, bound by making room in a full pool).
  Status Put(Channel& ch, const std::string& head, std::span<const uint8_t> bytes) override {
    if (!(features_ & kFeaturePutArena)) return Transport::Put(ch, head, bytes);
    const bool landing = bytes.size() > kPutLandingPiece;
    auto r = ReservePut(ch, head, bytes.size(), landing);
    // The server's arenas are at their budget: through the socket, as without an arena.
    if (r.status().IsBusy()) return Transport::Put(ch, head, bytes);
    if (!r.ok()) return r.status();
    LandingCounter landed = r->Landing();
    if (!landed) {
      std::memcpy(r->bytes().data(), bytes.data(), bytes.size());
      return CommitPut(ch, *r, false);
    }
    Status sent = SendCommit(ch, *r, false);
    if (!sent.ok()) {
      landed.Fail();  // had the server read the commit, it stores nothing
      return sent;
    }
    uint8_t* dst = r->bytes().data();
    for (uint64_t at = 0; at < bytes.size(); at += kPutLandingPiece) {
      const uint64_t n = std::min<uint64_t>(kPutLandingPiece, bytes.size() - at);
      std::memcpy(dst + at, bytes.data() + at, n);
      landed.Landed(at + n);
    }
    return ch.ReadReply(Op::kOk).status();
  }

  Status PreparePutArena(Channel& ch) override {
    if (!(features_ & kFeaturePutArena) || arena_) return Status::Ok();
    return NewArena(ch, kMinArenaBytes);
  }

  Status PutFromDevice(Channel& ch, const std::string& head, const void* src, uint64_t size,
                       uint8_t flags) override {
    if (!(features_ & kFeaturePutDevice))
      return Transport::PutFromDevice(ch, head, src, size, flags);
    auto a = cuda::AllocationOf(src);
    if (!a.ok()) return a.status().WithContext("a device put");
    const uint64_t offset = static_cast<const uint8_t*>(src) - a->base;
    if (size > a->bytes - offset)
      return Status::InvalidArgument("a device put of " + std::to_string(size) +
                                     " bytes runs past its allocation's end");
    auto handle = HandleOf(*a);
    if (!handle.ok()) return handle.status().WithContext("a device put");
    EC_RETURN_IF_ERROR(
        ch.SendRequest(Op::kPutDevice, PutDeviceBody(head, *a, *handle, offset, size, flags)));
    return ch.ReadReply(Op::kOk).status();
  }

  Status PutManyFromDevice(Channel& ch, std::string_view ns, const std::vector<DeviceSource>& items,
                           uint8_t flags, std::vector<Status>* out) override {
    if (!(features_ & kFeaturePutDeviceMany))
      return Transport::PutManyFromDevice(ch, ns, items, flags, out);
    out->assign(items.size(), Status::Ok());
    for (size_t at = 0; at < items.size(); at += kMaxDevicePutBatch) {
      DevicePutBatch b{std::string(ns), flags, {}};
      std::vector<size_t> sent;  // b's items' indexes in `items`
      for (size_t i = at; i < std::min(items.size(), at + kMaxDevicePutBatch); ++i) {
        auto item = DeviceItem(items[i]);
        if (item.ok())
          b.items.push_back(std::move(item).value()), sent.push_back(i);
        else
          (*out)[i] = item.status();
      }
      if (b.items.empty()) continue;
      EC_RETURN_IF_ERROR(ch.SendRequest(Op::kPutDeviceMany, PutDeviceManyBody(b)));
      auto body = ch.ReadReply(Op::kPutDeviceManyOk);
      if (!body.ok()) return body.status();
      BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
      std::vector<Status> got;
      EC_RETURN_IF_ERROR(ParsePutDeviceManyReply(&r, sent.size(), &got));
      for (size_t k = 0; k < sent.size(); ++k) (*out)[sent[k]] = std::move(got[k]);
    }
    return Status::Ok();
  }

  Status PrepareDevicePuts(Channel& ch) override {
    if (!(features_ & kFeaturePutDevice)) return Status::Ok();
    EC_RETURN_IF_ERROR(ch.SendRequest(Op::kPrepareDevicePuts, ""));
    return ch.ReadReply(Op::kOk).status();
  }

  Status SetArenaRegistrar(std::shared_ptr<MemoryRegistrar> registrar) override {
    registrar_ = std::move(registrar);
    return arena_ ? arena_->RegisterWith(registrar_) : Status::Ok();
  }

  Status CommitPut(Channel& ch, const ArenaReservation& r, bool checksum_when_spilled) override {
    if (!arena_ || r.arena() != arena_.get())
      return Transport::CommitPut(ch, r, checksum_when_spilled);
    EC_RETURN_IF_ERROR(SendCommit(ch, r, checksum_when_spilled));
    return ch.ReadReply(Op::kOk).status();
  }

  Result<ReadLease> AcquireInPlace(Channel& ch, std::string_view ns,
                                   std::string_view key) override {
    return LeaseIn(ch, Op::kGetShm, Op::kGetShmOk, ns, key, map_, bytes_, MemoryKind::kHost);
  }

  // One GET_SHM_MANY: the server reads the disk-only entries in one batch.
  Status SendLeaseBatch(Channel& ch, std::string_view ns,
                        const std::vector<std::string>& keys) override {
    return ch.SendRequest(Op::kGetShmMany, KeysBody(ns, keys));
  }
  Result<std::vector<Result<ReadLease>>> ReadLeaseBatch(
      Channel& ch, std::string_view ns, const std::vector<std::string>& keys) override {
    auto body = ch.ReadReply(Op::kGetShmManyOk);
    if (!body.ok()) return body.status();
    return Leases(ch, *body, ns, keys, nullptr);
  }

  // GET_SHM_STREAM: each GET_SHM_LANDED frame told to the watch as it comes (where in the
  // mapping, how much), batch_end where no other frame waits; then the leases. Where the
  // server marks a lease as of the bytes told, and they were told whole, at the lease's
  // place, the watch was told of exactly that lease's bytes (streamed).
  Result<std::vector<Result<ReadLease>>> AcquireManyStreamed(Channel& ch, std::string_view ns,
                                                             const std::vector<std::string>& keys,
                                                             Cache::LandingWatch* watch) override {
    if (!(features_ & kFeatureStreamedLeases))
      return Transport::AcquireManyStreamed(ch, ns, keys, watch);
    EC_RETURN_IF_ERROR(ch.SendRequest(Op::kGetShmStream, KeysBody(ns, keys)));
    std::vector<Told> told(keys.size());
    for (;;) {
      bool landed = false;
      auto body = ch.ReadReplyOrNote(Op::kGetShmManyOk, Op::kGetShmLanded, &landed);
      if (!body.ok()) return body.status();
      if (landed) EC_RETURN_IF_ERROR(Tell(*body, watch, &told));
      if (watch->batch_end && (!landed || !ch.InputWaiting())) watch->batch_end();
      if (landed) continue;
      std::vector<uint8_t> oks;
      auto leases = Leases(ch, *body, ns, keys, &oks);
      if (!leases.ok()) return leases;
      watch->streamed.assign(keys.size(), false);
      for (size_t i = 0; i < keys.size(); ++i) {
        const auto& l = (*leases)[i];
        watch->streamed[i] = oks[i] == kLeaseStreamed && l.ok() &&
                             l->data() == map_ + told[i].offset && told[i].landed == l->size();
      }
      return leases;
    }
  }

 private:
  // PUT_SHM of a reservation in this connection's arena; a landing one's counter with it.
  static Status SendCommit(Channel& ch, const ArenaReservation& r, bool checksum_when_spilled) {
    const bool landing = r.counter_offset() != ArenaReservation::kNoCounter;
    const uint8_t flags =
        (checksum_when_spilled ? kPutChecksumWhenSpilled : 0) | (landing ? kPutLanding : 0);
    return ch.SendRequest(
        Op::kPutShm, PutShmBody(r.head(), r.offset(), r.bytes().size(), flags, r.counter_offset()));
  }
  // A server-side lease of (ns, key), answered as an offset into `base` (the mapped host
  // pool, or the opened device pool) of `bytes` bytes.
  Result<ReadLease> LeaseIn(Channel& ch, Op op, Op reply, std::string_view ns, std::string_view key,
                            const uint8_t* base, uint64_t bytes, MemoryKind kind) {
    EC_RETURN_IF_ERROR(ch.SendRequest(op, KeyBody(ns, key)));
    auto body = ch.ReadReply(reply);
    if (!body.ok()) return body.status();
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    auto lease = LeaseFrom(ch, &r, ns, key, base, bytes, kind);
    return lease.ok() ? std::move(lease) : Malformed(reply);
  }

  // Where a streamed entry lies in the pool, and how much of it was told.
  struct Told {
    uint64_t offset = UINT64_MAX;
    uint64_t landed = 0;
  };
  // A GET_SHM_LANDED frame, checked against the mapping and told to the watch.
  Status Tell(const std::string& frame, Cache::LandingWatch* watch, std::vector<Told>* told) const {
    BodyReader r(reinterpret_cast<const uint8_t*>(frame.data()), frame.size());
    uint32_t key;
    uint64_t offset, landed;
    if (!r.U32(&key) || !r.U64(&offset) || !r.U64(&landed) || key >= told->size() ||
        offset > bytes_ || landed > bytes_ - offset)
      return Malformed(Op::kGetShmLanded);
    (*told)[key] = {offset, landed};
    if (watch->landed) watch->landed(key, map_ + offset, landed);
    return Status::Ok();
  }

  // A GET_SHM_MANY_OK body: per key a lease or its error (Unavailable if malformed); each
  // item's ok byte into *oks.
  Result<std::vector<Result<ReadLease>>> Leases(Channel& ch, const std::string& body,
                                                std::string_view ns,
                                                const std::vector<std::string>& keys,
                                                std::vector<uint8_t>* oks) const {
    BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
    uint32_t n;
    if (!r.U32(&n) || n != keys.size()) return Malformed(Op::kGetShmManyOk);
    std::vector<Result<ReadLease>> out;
    for (const std::string& key : keys) {
      uint8_t ok;
      if (!r.U8(&ok)) return Malformed(Op::kGetShmManyOk);
      if (oks) oks->push_back(ok);
      auto lease = ok ? LeaseFrom(ch, &r, ns, key, map_, bytes_, MemoryKind::kHost)
                      : Result<ReadLease>(ParseErrorBody(&r));
      if (lease.status().IsUnavailable() && ok) return lease.status();
      out.push_back(std::move(lease));
    }
    return out;
  }

  static Status Malformed(Op reply) {
    return Status::Unavailable("malformed lease reply (opcode " +
                               std::to_string(static_cast<int>(reply)) + ")");
  }

  // One leased entry of a reply: lease id, offset into `base`, info. Unavailable if malformed.
  static Result<ReadLease> LeaseFrom(Channel& ch, BodyReader* r, std::string_view ns,
                                     std::string_view key, const uint8_t* base, uint64_t bytes,
                                     MemoryKind kind) {
    uint64_t lease_id, offset;
    EntryInfo info;
    if (!r->U64(&lease_id) || !r->U64(&offset) || !ReadInfo(r, &info) || offset > bytes ||
        info.bytes > bytes - offset)
      return Status::Unavailable("malformed lease reply");
    info.ns = ns;
    info.key = key;
    // The token is the server's lease id (never 0: the server numbers leases from 1).
    return ReadLease(ch.lease_releaser(), reinterpret_cast<void*>(lease_id), base + offset,
                     std::move(info), kind);
  }

  Status OpenDevicePool(Channel& ch) {
    EC_RETURN_IF_ERROR(ch.SendRequest(Op::kDevicePool, ""));
    auto body = ch.ReadReply(Op::kDevicePoolOk);
    if (!body.ok()) return body.status();
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    uint32_t gpu;
    uint64_t bytes;
    std::string handle;
    if (!r.U32(&gpu) || !r.U64(&bytes) || !r.Str(&handle, 256))
      return Status::Unavailable("malformed DEVICE_POOL reply");
    auto base = cuda::OpenIpcHandle(handle, static_cast<int>(gpu));
    if (!base.ok()) return base.status().WithContext("opening the server's device pool");
    device_base_ = *base;
    device_bytes_ = bytes;
    return Status::Ok();
  }

  // PUT_ARENA: the server's new arena for this connection replaces the last (whose blocks
  // still held are then committed as plain PUTs).
  Status NewArena(Channel& ch, uint64_t bytes) {
    BodyWriter w;
    w.U64(bytes);
    EC_RETURN_IF_ERROR(ch.SendRequest(Op::kPutArena, w.data()));
    int fd = -1;
    auto body = ch.ReadReply(Op::kPutArenaOk, &fd);
    if (!body.ok()) {
      if (fd >= 0) close(fd);
      return body.status();
    }
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    uint64_t got;
    if (!r.U64(&got)) {
      if (fd >= 0) close(fd);
      return Malformed(Op::kPutArenaOk);
    }
    auto arena = SharedArena::Map(fd, got);  // owns fd from here
    if (!arena.ok()) return arena.status().WithContext("mapping the server's put arena");
    EC_RETURN_IF_ERROR((*arena)->RegisterWith(registrar_));
    arena_ = std::move(arena).value();
    return Status::Ok();
  }

  // The IPC handle of an allocation, exported once per buffer id (ids are never reused).
  // A PUT_DEVICE_MANY item: the source's allocation and offset in it, or why it cannot be.
  Result<DevicePutItem> DeviceItem(const DeviceSource& s) {
    auto a = cuda::AllocationOf(s.src);
    if (!a.ok()) return a.status().WithContext("a device put");
    const uint64_t offset = static_cast<const uint8_t*>(s.src) - a->base;
    if (s.bytes > a->bytes - offset)
      return Status::InvalidArgument("a device put of " + std::to_string(s.bytes) +
                                     " bytes runs past its allocation's end");
    auto handle = HandleOf(*a);
    if (!handle.ok()) return handle.status().WithContext("a device put");
    return DevicePutItem{s.key, s.meta, a->bus_id, *handle, a->buffer_id, offset, s.bytes};
  }

  Result<std::string> HandleOf(const cuda::DeviceAllocation& a) {
    for (const auto& [id, h] : handles_)
      if (id == a.buffer_id) return h;
    auto h = cuda::ExportIpcHandle(a.base);
    if (!h.ok()) return h.status();
    if (handles_.size() >= kMaxDeviceImports) handles_.erase(handles_.begin());
    handles_.emplace_back(a.buffer_id, *h);
    return h;
  }

  const uint8_t* map_;
  size_t bytes_;
  uint32_t features_;
  std::shared_ptr<SharedArena> arena_;  // this connection's put arena, asked for on first use
  std::shared_ptr<MemoryRegistrar> registrar_;  // each arena registered with (CUDA), or none
  void* device_base_ = nullptr;                 // the server's device pool, opened on first use
  uint64_t device_bytes_ = 0;
  std::vector<std::pair<uint64_t, std::string>> handles_;  // (buffer id, IPC handle)
  // Splits a stream's copies out of the mapping, as an embedded GetMany's (one helper on 2
  // cores about doubles a shm get's speed: one thread's memcpy does not fill the memory bus).
};

}  // namespace

Result<std::unique_ptr<Transport>> NewShmTransport(int pool_fd, uint64_t pool_bytes,
                                                   uint32_t features,
                                                   std::shared_ptr<MemoryRegistrar> registrar) {
  if (pool_fd < 0 || pool_bytes == 0)
    return Status::Unavailable("server did not pass its shared pool");
  void* p = MapSharedAligned(pool_fd, pool_bytes, PROT_READ);  // its huge pages whole
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap the server's pool");
  return std::unique_ptr<Transport>(std::make_unique<ShmTransport>(
      static_cast<const uint8_t*>(p), pool_bytes, features, std::move(registrar)));
}

}  // namespace ecstore::net
