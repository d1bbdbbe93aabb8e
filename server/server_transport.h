// ServerTransport: one way the server hands a reader the bytes of an entry it serves, each
// with the request it answers and the state it needs:
//   TcpGets       GET: the bytes follow the reply on the connection, from pool memory;
//   ShmGets       GET_SHM: an offset into the pool's memfd, which a same-host reader maps;
//   RdmaGets      GET_RDMA: an address and key of memory the NIC has registered (the host
//                 pool, and the device pool where GPUDirect RDMA works), for a one-sided read;
//   DeviceIpcGets GET_DEVICE: an offset into the device pool, opened over CUDA IPC.
// The server keeps one per transport it offers and answers every get through
// Server::HandleGet: the transport chooses the copy to lease and says where it lies; the
// lease stays in the connection's table until the reader releases it (TCP: until sent).
// Thread rules: built at Server::Start, const afterwards; any connection thread may call.
#pragma once

#include <memory>
#include <string>

#include "net/protocol.h"
#include "net/socket.h"
#include "rdma/verbs.h"
#include "server/server_metrics.h"
#include "store/store.h"

namespace ecstore::net {

class ServerTransport {
 public:
  virtual ~ServerTransport() = default;
  virtual Op request() const = 0;  // the get it answers
  virtual Op reply() const = 0;
  virtual Wire wire() const = 0;  // its metrics label
  // The copy a get leases: the host pool's (promoting from disk or the device if need be),
  // unless the transport reads device memory itself.
  virtual Result<ReadLease> Acquire(Store* store, std::string_view ns, std::string_view key) const {
    return store->Acquire(ns, key);
  }
  // Whether the bytes go with the reply (no lease kept after it).
  virtual bool sends_bytes() const { return false; }
  // Where the reader finds the leased bytes (appended to the reply after the lease's id).
  virtual void Locate(const ReadLease& lease, BodyWriter* w) const = 0;
  // What HELLO tells a client of it (over TCP; the shared-memory socket's HELLO is its own).
  virtual void Advertise(HelloInfo* /*info*/) const {}
  // Before the server goes: whatever it registered or bound is let go.
  virtual void Stop() {}
};

class TcpGets : public ServerTransport {
 public:
  Op request() const override { return Op::kGet; }
  Op reply() const override { return Op::kGetOk; }
  Wire wire() const override { return Wire::kTcp; }
  bool sends_bytes() const override { return true; }
  void Locate(const ReadLease&, BodyWriter*) const override {}
};

// Owns the unix socket's listener (the acceptor polls it) and unlinks its path at Stop.
class ShmGets : public ServerTransport {
 public:
  // Needs a store whose pool is shared memory (Options::memory_backend).
  // The socket is the owner's only, or its group's too with group_access.
  static Result<std::unique_ptr<ShmGets>> Listen(Store* store, const std::string& path,
                                                 bool group_access = false);
  Op request() const override { return Op::kGetShm; }
  Op reply() const override { return Op::kGetShmOk; }
  Wire wire() const override { return Wire::kShm; }
  void Locate(const ReadLease& lease, BodyWriter* w) const override {
    w->U64(static_cast<uint64_t>(lease.data() - pool_.base));  // offset in the memfd
  }
  void Advertise(HelloInfo* info) const override { info->shm_path = path_; }
  void Stop() override;
  int listener() const { return fd_.get(); }

 private:
  ShmGets(MemoryRegion pool, std::string path, UniqueFd fd)
      : pool_(pool), path_(std::move(path)), fd_(std::move(fd)) {}
  const MemoryRegion pool_;
  const std::string path_;
  UniqueFd fd_;
};

// Owns the rdma_cm listener and its registrations: the host pool (as one of the store's
// registrars) and, where GPUDirect RDMA works, the device pool, whose entries are then read
// from GPU memory (else through their host copy, and the reason logged once).
class RdmaGets : public ServerTransport {
 public:
  static Result<std::unique_ptr<RdmaGets>> Listen(Store* store, const HostPort& at);
  Op request() const override { return Op::kGetRdma; }
  Op reply() const override { return Op::kGetRdmaOk; }
  Wire wire() const override { return Wire::kRdma; }
  Result<ReadLease> Acquire(Store* store, std::string_view ns, std::string_view key) const override;
  void Locate(const ReadLease& lease, BodyWriter* w) const override;
  void Advertise(HelloInfo* info) const override { info->rdma_addr = addr_; }
  void Stop() override;

 private:
  RdmaGets(Store* store, std::unique_ptr<rdma::RdmaListener> l, std::string addr)
      : store_(store), listener_(std::move(l)), addr_(std::move(addr)) {}
  void RegisterDevicePool();
  Store* const store_;
  std::unique_ptr<rdma::RdmaListener> listener_;
  const std::string addr_;  // "IP:PORT"
};

// The device pool's CUDA IPC handle, exported once for same-host readers to open.
class DeviceIpcGets : public ServerTransport {
 public:
  // Null where the store has no device tier or its pool cannot be exported (logged).
  static std::unique_ptr<DeviceIpcGets> Export(Store* store);
  Op request() const override { return Op::kGetDevice; }
  Op reply() const override { return Op::kGetDeviceOk; }
  Wire wire() const override { return Wire::kShm; }
  Result<ReadLease> Acquire(Store* store, std::string_view ns,
                            std::string_view key) const override {
    return store->AcquireOnDevice(ns, key);
  }
  void Locate(const ReadLease& lease, BodyWriter* w) const override {
    w->U64(static_cast<uint64_t>(lease.data() - device_.base));  // in the device pool
  }
  // DEVICE_POOL's answer: the device, the pool's size and the handle.
  std::string PoolBody(int device) const;
  // The answer where there is no DeviceIpcGets: InvalidArgument, not Unavailable, which a
  // client takes for a broken connection and reconnects, releasing every lease it holds.
  static Status NoPool();

 private:
  DeviceIpcGets(MemoryRegion device, std::string handle)
      : device_(device), handle_(std::move(handle)) {}
  const MemoryRegion device_;
  const std::string handle_;
};

}  // namespace ecstore::net
