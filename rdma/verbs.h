// RDMA verbs transport (libibverbs + librdmacm): the data path for remote gets.
// The server registers the whole pool once (remote read) and accepts RC queue pairs over
// rdma_cm; a get is answered on the control connection with (addr, rkey, length, lease),
// the client RDMA-READs straight into the caller's memory where the caller registered it
// (host, or device memory the NIC can reach), else into its bounce buffer (registered
// once) and copies out; then it releases.
// Thread rules: RdmaListener runs one event thread; an RdmaConnection is used by one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "base/host_port.h"
#include "base/memory_backend.h"
#include "base/status.h"

struct rdma_event_channel;
struct rdma_cm_id;
struct ibv_pd;
struct ibv_cq;
struct ibv_mr;

namespace ecstore::rdma {

using net::HostPort;

// The server's verbs transport. It is the pool's MemoryRegistrar for RDMA: the store
// registers the pool with its protection domain once (Store::AddRegistrar), and every get is
// a remote read of that one memory region.
class RdmaListener : public MemoryRegistrar {
 public:
  // Binds rdma_cm to `at` (an address of an RDMA device); register the pool before serving.
  static Result<std::unique_ptr<RdmaListener>> Start(const HostPort& at);
  ~RdmaListener() override;
  const char* Name() const override { return "the RDMA device"; }
  Status Register(const MemoryRegion& pool) override;
  void Deregister(const MemoryRegion& pool) override;
  uint32_t rkey() const;  // of the registered pool
  // GPUDirect RDMA: registers a device pool so the NIC reads it directly -- from a dma-buf
  // fd when one is given (ibv_reg_dmabuf_mr), else the device address itself (works where
  // the nvidia-peermem module is loaded). Unavailable when neither works: remote reads of
  // device entries are then staged through the host pool. Once, before serving.
  Status RegisterDevice(const MemoryRegion& device_pool, int dmabuf_fd);
  void DeregisterDevice();
  uint32_t device_rkey() const;  // 0: the device pool is not registered
  uint16_t port() const { return port_; }

 private:
  RdmaListener() = default;
  void EventLoop();
  rdma_event_channel* ec_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* pool_mr_ = nullptr;
  ibv_mr* device_mr_ = nullptr;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  struct Peer {
    rdma_cm_id* id;
    ibv_cq* cq;
  };
  std::vector<Peer> peers_;  // event thread only
};

// What a client's reads did: straight into registered caller memory, or through the bounce
// buffer and a copy out of it. Shared by the connections a client makes in turn.
struct ReadCounters {
  std::atomic<uint64_t> direct_reads{0}, direct_bytes{0};
  std::atomic<uint64_t> bounced_reads{0}, bounced_bytes{0};
};

struct RemoteRead {
  uint64_t remote_addr;
  uint32_t rkey;
  uint64_t length;
  uint8_t* dst;
};

class RdmaConnection {
 public:
  // `counters` (optional) is told of every read.
  static Result<std::unique_ptr<RdmaConnection>> Connect(
      const HostPort& to, size_t bounce_bytes, std::chrono::milliseconds timeout,
      std::shared_ptr<ReadCounters> counters = nullptr);
  ~RdmaConnection();
  // Posts the reads of a batch together, waits for their completions. A read whose dst lies
  // in a registered buffer lands there directly; the others go through the bounce buffer
  // (as many as fit at a time) and are copied out. A failed completion is Unavailable.
  Status ReadMany(const std::vector<RemoteRead>& reads);
  // Registers caller memory once (local write) so reads into it need no bounce: host memory
  // with ibv_reg_mr; device memory from its dma-buf fd where one is given
  // (ibv_reg_dmabuf_mr), else by its address (nvidia-peermem). Unavailable, saying why,
  // where the NIC cannot reach it.
  Status RegisterBuffer(std::span<uint8_t> memory, bool device = false, int dmabuf_fd = -1);
  void UnregisterBuffer(std::span<uint8_t> memory);

 private:
  RdmaConnection() = default;
  rdma_event_channel* ec_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  uint8_t* bounce_ = nullptr;
  std::vector<ibv_mr*> user_mrs_;  // RegisterBuffer's
  std::shared_ptr<ReadCounters> counters_;
  ibv_mr* RegisteredFor(const uint8_t* p, uint64_t len) const;
  // One RDMA READ of a batch: a whole read straight into registered caller memory (direct),
  // or a piece of one through the bounce buffer at bounce_off.
  struct ReadPiece {
    size_t read;
    uint64_t off_in_read, len, bounce_off;
    ibv_mr* direct;  // the caller's registered buffer, or null: through the bounce buffer
  };
  // The next group from reads[*next] (*carried bytes into it already): consecutive reads
  // that fit the bounce buffer and the send queue together, larger ones in bounce-sized
  // pieces. Advances *next and *carried past what it takes; empty when nothing is left.
  std::vector<ReadPiece> NextGroup(const std::vector<RemoteRead>& reads, size_t* next,
                                   uint64_t* carried) const;
  // Posts a group's READs in one chain and polls until all complete (or timeout_ passes).
  Status PostAndWait(const std::vector<RemoteRead>& reads, const std::vector<ReadPiece>& pieces);
  size_t bounce_bytes_ = 0;
  std::chrono::milliseconds timeout_{5000};
};

// True when this machine has at least one RDMA device.
bool RdmaDevicePresent();

}  // namespace ecstore::rdma
