// Client: gets entries from a running `ec-store serve` (or an in-process Server).
//   auto c = Client::Connect("tcp://10.0.0.5:7070", {.token = secret});
//   auto info = c.value()->Get("qwen", mm_hash, dst);
// A dead or unreachable server is an Unavailable status within options.timeout (per
// attempt), never a hang; transport failures are retried `retries` times with a reconnect.
// Thread rules: one thread at a time per Client; use one Client per thread. A lease from
// Acquire is released over its Client's connection: destroy it where the Client may be used,
// and before the Client.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/copy_pool.h"
#include "cache/cache.h"
#include "net/claims.h"
#include "net/connection.h"
#include "net/protocol.h"
#include "net/remote_admin.h"
#include "net/shm_reads.h"
#include "net/socket.h"
#include "net/transport.h"

namespace ecstore::net {

// A Client is a Cache with the facets its server and transport offer: memory registration and
// admin always; claims (decided by the server); device I/O and reservations on the same host
// where the server offers them.
class Client : public Cache,
               public DeviceIo,
               public MemoryRegistration,
               public Reservations,
               public Claims {
 public:
  // uri: "tcp://host:port", "host:port", "tls://host:port" (TLS: ClientOptions::tls, else
  // the system's CAs and the host's name), or "unix:/path/serve.sock" (shared memory).
  static Result<std::unique_ptr<Client>> Connect(const std::string& uri,
                                                 const ClientOptions& options = {});
  ~Client() override;
  const char* transport() const override {
    return link_.transport() ? link_.transport()->name() : "tcp";
  }
  TransportCaps caps() const {
    return link_.transport() ? link_.transport()->caps() : TransportCaps{};
  }
  // From the transport's caps (same host: in-place reads, put arenas, and device puts and
  // leases where the server offers them -- device puts until it refuses this process's
  // memory, device leases until it answers that it has no device pool); prefetch is queued by the
  // server, and claims are decided there (an older server grants every claim).
  CacheCapabilities capabilities() override {
    TransportCaps t = caps();
    const bool device_puts = t.device_puts && !device_puts_refused_;
    const bool device_leases = t.device_memory && !no_device_pool_;
    return {.device_puts = device_puts,
            .device_leases = device_leases,
            .in_place_reads = t.same_host_zero_copy,
            .reserve = t.same_host_zero_copy,
            .prefetch = true,
            .prefetch_queued = true,
            .device_io = device_puts || device_leases ? this : nullptr,
            .memory = this,
            .reservations = t.same_host_zero_copy ? this : nullptr,
            .claims = this,
            .admin = &admin_};
  }

  // The Cache interface. Acquire over shared memory reads the server's pool in place, pinned
  // by a server-side lease until the ReadLease is destroyed (or the server's lease TTL
  // passes, after which the bytes may change); over TCP and RDMA it gets the entry into a
  // buffer the lease owns. GetMany over shared memory leases its keys in batches (as
  // AcquireMany) and copies each out of the mapping; over TCP it is pipelined: all requests
  // are sent, then the replies read in order. ListPages pages through the server's snapshot of one
  // listing.
  Status Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
             std::span<const uint8_t> bytes) override;
  Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst) override;
  std::vector<Result<EntryInfo>> GetMany(std::string_view ns, const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts) override;
  Result<ReadLease> Acquire(std::string_view ns, std::string_view key) override;
  // Over shared memory, one GET_SHM_MANY per kMaxLeaseBatch keys (the server reads the
  // disk-only entries in one batch); elsewhere, or from a server without it, Acquire key by
  // key.
  using Cache::AcquireMany;
  // With a watch (Cache::LandingWatch), from a server that streams leases (same host,
  // caps().streamed_leases): one GET_SHM_STREAM per batch, each GET_SHM_LANDED frame told as
  // it comes, batch_end before each wait for the next. Elsewhere as AcquireMany.
  std::vector<Result<ReadLease>> AcquireMany(std::string_view ns,
                                             const std::vector<std::string>& keys,
                                             LandingWatch* watch) override;
  // A hint that the keys will be read soon: PREFETCH, kMaxLeaseBatch keys a request. The
  // server queues it and answers at once; its prefetcher then reads the disk-only entries
  // into its pool in one batch (evicting nothing). True where every request was queued;
  // false where the server does not offer it (an older one) or its queue was full. A bad
  // key is InvalidArgument, and nothing is sent.
  Result<bool> Prefetch(std::string_view ns, const std::vector<std::string>& keys) override;
  // A cluster client's view of the members (its etcd revision), declared to the server
  // before the next request and after every reconnect (Op::kView): a cluster node refuses
  // requests routed by a view older than its own.
  Status SetView(int64_t revision) { return link_.SetView(revision); }
  // A claim on a key this caller found absent (server/claim_table.h): granted (compute and put
  // it), held by another caller (wait for its put, ms_left at most), or present. A server
  // without claims grants every one: each caller computes, as without claims.
  Result<ClaimAnswer> Claim(std::string_view ns, std::string_view key,
                            std::chrono::milliseconds ttl) override;
  Result<ReadLease> Pin(std::string_view ns, std::string_view key) override;
  Result<EntryInfo> Lookup(std::string_view ns, std::string_view key) override;
  Result<std::vector<std::optional<EntryInfo>>> LookupMany(
      std::string_view ns, const std::vector<std::string>& keys) override;
  Status Erase(std::string_view ns, std::string_view key) override;
  Status EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                   std::vector<bool>* erased) override;
  Status ListPages(size_t page_size,
                   const std::function<bool(std::vector<EntryInfo>&&)>& on_page) override;
  Result<StoreStats> Stats() override;
  // Shared memory only: the server's pool as mapped here (read-only), e.g. to register it
  // with CUDA once so copies out of leases run at pinned speed; {nullptr, 0} otherwise. A
  // reconnect to a restarted server maps a new pool.
  std::span<const uint8_t> shared_pool() const {
    return link_.transport() ? link_.transport()->shared_pool() : std::span<const uint8_t>();
  }
  // Same host, a server with a device tier: the entry in the server's device pool, read in
  // place (a CUDA device pointer; memory_kind() kDevice) under a server lease -- the pool's
  // CUDA IPC handle is opened once per connection. Copy out of it device to device.
  Result<ReadLease> AcquireOnDevice(std::string_view ns, std::string_view key) override;
  // Same host, a server offering put arenas (net/put_arena.h): a block of this connection's
  // put arena to fill in place (a device->host copy straight into it), then CommitPut --
  // the bytes cross no socket and the server copies them once. InvalidArgument over TCP or
  // RDMA, or from a server without arenas: use Put. checksum_when_spilled as
  // PutReservation::ChecksumWhenSpilled. With `landing` (a server offering
  // kFeaturePutLanding), the reservation's Landing() counter lets CommitPut go out while the
  // bytes are still being written, from another thread: raise it as pieces land and the
  // server copies each as it does (net/put_arena.h). CommitPut holds this client meanwhile.
  Result<ArenaReservation> ReservePut(std::string_view ns, std::string_view key,
                                      const TensorMeta& meta, uint64_t size, bool landing = false);
  Status CommitPut(ArenaReservation r, bool checksum_when_spilled = false);
  // ReservePut and CommitPut as a PutSlot (Cache::ReserveSlot; net/arena_slot.cc).
  Result<std::unique_ptr<PutSlot>> ReserveSlot(std::string_view ns, std::string_view key,
                                               const TensorMeta& meta, uint64_t bytes,
                                               bool landing) override;
  // Same host: maps this connection's put arena now (64 MiB) if it has none, so the first
  // ReservePut or Put does not wait for it (and its CUDA registration, tens of ms). A no-op
  // elsewhere, or from a server without put arenas.
  Status PreparePutArena();
  // Same host, a server offering kFeaturePutDevice (net/device_put.h): `size` bytes of this
  // process's device memory at `src`, copied into the store by the server itself (one copy
  // by the GPU's copy engine, opened over CUDA IPC); readable when this returns Ok. The
  // memory must be written (its stream synchronized) and stay unchanged until then.
  // InvalidArgument elsewhere, or for memory the server cannot open (a VMM allocation, a GPU
  // it does not see): put through ReservePut instead. checksum_when_spilled as CommitPut's.
  Status PutFromDevice(std::string_view ns, std::string_view key, const TensorMeta& meta,
                       const void* src, uint64_t size, bool checksum_when_spilled = false) override;
  // PutFromDevice of each item; through a server offering kFeaturePutDeviceMany one request
  // per kMaxDevicePutBatch items (one round trip, the server's copies enqueued together and
  // waited for once). An item refused alone is refused with its own status.
  std::vector<Status> PutManyFromDevice(std::string_view ns, const std::vector<DeviceSource>& items,
                                        bool checksum_when_spilled = false) override;
  // Has a server offering device puts register its pool with CUDA now, so the first
  // PutFromDevice does not wait for it. A no-op elsewhere.
  Status PrepareDevicePuts();
  // Registers every put arena this client maps (the one mapped now too) with `registrar`
  // (cuda::NewHostRegistrar: device->host copies into it at pinned speed), and deregisters
  // each before it is unmapped; kept across reconnects.
  Status RegisterArenasWith(std::shared_ptr<MemoryRegistrar> registrar) {
    return link_.SetArenaRegistrar(std::move(registrar));
  }
  // Memory gets land in: registered once with an RDMA transport (the NIC writes it, no
  // bounce copy), kept across reconnects; a no-op for TCP and shared memory.
  Status RegisterMemory(const BufferDesc& memory) override { return link_.RegisterMemory(memory); }
  void UnregisterMemory(const BufferDesc& memory) override { link_.UnregisterMemory(memory); }
  bool GetsInto(const BufferDesc& memory) const override {
    return !memory.on_device() || link_.WritesDirectly(memory);
  }
  TransferStats transfer_stats() const override;
  // Shared memory: the server's pool as mapped here (shared_pool), read-only.
  HostPoolView host_pool() const override { return {shared_pool(), true}; }
  // Same host: RegisterArenasWith(registrar), then the arena mapped and (a server offering
  // device puts) its pool registered now, best effort -- a failure there is the first put's
  // to report, with its context. False elsewhere.
  Result<bool> RegisterPutMemoryWith(std::shared_ptr<MemoryRegistrar> registrar) override;
  // The server has no device tier this process can copy from: load through leases.
  Result<EntryInfo> GetToDevice(std::string_view ns, std::string_view key, void* dst,
                                uint64_t dst_bytes) override;

 private:
  Client(HostPort hp, std::string unix_path, ClientOptions o)
      : link_(std::move(hp), std::move(unix_path), std::move(o)) {}
  template <typename Fn>
  auto WithRetry(Fn fn) -> decltype(fn());
  void NoteRefusedBatch(const Status& st);

  Connection link_;                // the server: control connection, data path, leases
  bool no_lease_batches_ = false;  // the server answered GET_SHM_MANY "unknown opcode"
  ShmReads shm_reads_{this, &link_, &no_lease_batches_};  // GetMany over shared memory
  bool no_erase_batches_ = false;                         // ... and ERASE_MANY
  bool device_puts_refused_ = false;  // the server could not open this process's memory
  bool no_device_pool_ = false;       // the server has no device pool to share
  RemoteAdmin admin_{&link_};         // capabilities().admin
};

}  // namespace ecstore::net
