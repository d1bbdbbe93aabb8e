// Transports: how a Client moves entry bytes. The control frames (HELLO, GET, LOOKUP, ...)
// always travel on the Client's connection (a Channel); a Transport decides how the bytes of
// a get reach the caller -- in the reply stream (TCP), read in place from the server's
// shared pool (shared memory), or by the NIC reading the server's registered pool (RDMA
// verbs). One implementation per file; the Client picks one by capability.
// Thread rules: a Transport belongs to its Client and is used under the Client's rules.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache.h"
#include "net/protocol.h"
#include "net/put_arena.h"
#include "rdma/verbs.h"

namespace ecstore::net {

struct TransportCaps {
  bool same_host_zero_copy = false;  // reads the server's memory in place (same host)
  bool one_sided_read = false;       // the NIC reads the server's memory (no server copy)
  bool device_memory = false;        // reads the server's GPU pool in place (same host)
  bool device_puts = false;          // PutFromDevice: the server copies device memory itself
  bool streamed_leases = false;      // AcquireManyStreamed (same host, GET_SHM_STREAM)
};

// The Client's control connection, as transports see it.
class Channel {
 public:
  virtual ~Channel() = default;
  virtual Status SendRequest(Op op, const std::string& body,
                             std::span<const uint8_t> payload = {}) = 0;
  // The whole body of a small reply; with passed_fd, a descriptor sent with it, else -1.
  virtual Result<std::string> ReadReply(Op expect, int* passed_fd = nullptr) = 0;
  // The same where a frame of opcode `note` may come first; *is_note says which came.
  virtual Result<std::string> ReadReplyOrNote(Op expect, Op note, bool* is_note) = 0;
  // Whether bytes of another frame are already waiting to be read (no wait).
  virtual bool InputWaiting() = 0;
  // Reads a GET reply's info, then its bytes into dst_for(info).
  virtual Status ReadGetReply(const std::function<std::span<uint8_t>(const EntryInfo&)>& dst_for,
                              EntryInfo* info) = 0;
  virtual ReadLease::Releaser* lease_releaser() = 0;  // sends RELEASE of a lease id token
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;  // "tcp", "shm", "rdma"
  virtual TransportCaps caps() const = 0;
  // Gets entries of one namespace into dsts (result i for keys[i]). An Unavailable result
  // means the connection is broken; the Client reconnects. A transport that reads in place
  // (same_host_zero_copy) leaves this to the Client, which copies out of AcquireMany's
  // leases; its default answers each key that it cannot.
  virtual std::vector<Result<EntryInfo>> GetMany(Channel& ch, std::string_view ns,
                                                 const std::vector<std::string>& keys,
                                                 const std::vector<std::span<uint8_t>>& dsts);
  // The entry in place under a server lease (same_host_zero_copy only).
  virtual Result<ReadLease> AcquireInPlace(Channel& ch, std::string_view ns, std::string_view key);
  // Several entries in place under server leases, result i for keys[i] (at most
  // kMaxLeaseBatch keys; same_host_zero_copy only). The outer status is the connection's
  // (Unavailable: reconnect). Key by key is Cache::AcquireMany's default, not a transport's.
  Result<std::vector<Result<ReadLease>>> AcquireManyInPlace(Channel& ch, std::string_view ns,
                                                            const std::vector<std::string>& keys);
  // The same in two halves, so that several batches can be in flight: each batch's request
  // is sent, then their replies read in the order sent.
  virtual Status SendLeaseBatch(Channel& ch, std::string_view ns,
                                const std::vector<std::string>& keys);
  virtual Result<std::vector<Result<ReadLease>>> ReadLeaseBatch(
      Channel& ch, std::string_view ns, const std::vector<std::string>& keys);
  // As AcquireManyInPlace, telling `watch` of each entry's bytes as the server reads them
  // (streamed_leases; Cache::LandingWatch says how), watch->streamed set on return.
  // InvalidArgument where the server does not offer it.
  virtual Result<std::vector<Result<ReadLease>>> AcquireManyStreamed(
      Channel& ch, std::string_view ns, const std::vector<std::string>& keys,
      Cache::LandingWatch* watch);
  // Registers caller memory that gets will land in, so they need no bounce copy (RDMA:
  // host memory, and device memory the NIC can reach); Ok and nothing done where the
  // transport copies anyway. The memory must stay valid until UnregisterMemory or the
  // Client's end.
  virtual Status RegisterMemory(const BufferDesc& memory);
  virtual void UnregisterMemory(const BufferDesc& memory);
  // The server's pool as mapped here (shared memory), else empty.
  virtual std::span<const uint8_t> shared_pool() const { return {}; }
  // The entry in the server's device pool, in place under a server lease (device_memory:
  // same host, a server with a device tier; the pool's CUDA IPC handle is opened once).
  virtual Result<ReadLease> AcquireOnDevice(Channel& ch, std::string_view ns, std::string_view key);
  // Same host, a server offering put arenas (net/put_arena.h): a block of `size` bytes of
  // this connection's arena, asked for (or replaced by a larger one) as needed, for a put
  // whose PUT body before the bytes is `head`; with `landing`, and a server that offers it,
  // with a LandingCounter beside it. InvalidArgument elsewhere.
  virtual Result<ArenaReservation> ReservePut(Channel& ch, std::string head, uint64_t size,
                                              bool landing);
  // PUT_SHM where the reservation lies in this connection's arena; otherwise (another
  // transport, a re-established connection) a PUT carrying its bytes (always hashed).
  virtual Status CommitPut(Channel& ch, const ArenaReservation& r, bool checksum_when_spilled);
  // A PUT of `bytes` whose body before them is `head`: over the stream, or (same host, a
  // server with put arenas) copied into a block of the arena and committed with PUT_SHM.
  virtual Status Put(Channel& ch, const std::string& head, std::span<const uint8_t> bytes);
  // Same host, a server offering put arenas: this connection's arena mapped now if it has
  // none (Client::PreparePutArena). Ok and nothing done elsewhere.
  virtual Status PreparePutArena(Channel&) { return Status::Ok(); }
  // Same host, a server offering kFeaturePutDevice: PUT_DEVICE of the device memory at src
  // (net/device_put.h), `head` as Put's. InvalidArgument elsewhere.
  virtual Status PutFromDevice(Channel& ch, const std::string& head, const void* src, uint64_t size,
                               uint8_t flags);
  // Same host, a server offering kFeaturePutDeviceMany: the items in PUT_DEVICE_MANY requests
  // (net/device_put.h), each item's status in (*out)[i]; the call's own status is the
  // connection's. InvalidArgument and *out untouched elsewhere: put each with PutFromDevice.
  virtual Status PutManyFromDevice(Channel& ch, std::string_view ns,
                                   const std::vector<DeviceSource>& items, uint8_t flags,
                                   std::vector<Status>* out);
  // PREPARE_DEVICE_PUTS where the server offers them; Ok and nothing done elsewhere.
  virtual Status PrepareDevicePuts(Channel&) { return Status::Ok(); }
  // Put arenas are registered with `registrar` from now on (the one mapped now too).
  virtual Status SetArenaRegistrar(std::shared_ptr<MemoryRegistrar>) { return Status::Ok(); }
};

std::unique_ptr<Transport> NewTcpTransport();
// Maps the pool fd the server passed with HELLO_OK (read-only); `features` are HELLO_OK's.
Result<std::unique_ptr<Transport>> NewShmTransport(
    int pool_fd, uint64_t pool_bytes, uint32_t features,
    std::shared_ptr<MemoryRegistrar> arena_registrar = nullptr);
// Connects an RC queue pair to the server's rdma_cm address; `bounce_bytes` of bounce
// buffer registered once for destinations that are not registered; `counters` told of
// every read.
Result<std::unique_ptr<Transport>> NewRdmaTransport(const std::string& rdma_addr,
                                                    size_t bounce_bytes,
                                                    std::chrono::milliseconds timeout,
                                                    std::shared_ptr<rdma::ReadCounters> counters);

// The GET/GET_SHM/PIN body: ns, key.
std::string KeyBody(std::string_view ns, std::string_view key);
// `have` bytes of room for `entry`: Status::BufferTooSmall carrying its size and layout.
Status BufferTooSmall(uint64_t have, const EntryInfo& entry);

}  // namespace ecstore::net
