// Server: serves a Store to remote and same-host consumers: TCP (frames of net/protocol.h),
// shared memory over its unix socket, RDMA verbs (rdma/) and CUDA IPC (net/device_put.h).
// Every get is answered under a read lease, through the ServerTransport of its kind
// (server/server_transport.h): over TCP straight from pool memory (one sendmsg), otherwise as
// a location the reader takes the bytes from; an eviction never overwrites bytes in flight.
// Thread rules: Start/Stop from the owner. Inside: an acceptor thread (server/acceptor.h), and
// a fixed pool of workers over an event loop that holds every connection between requests
// (server/conn_table.h), so threads do not grow with clients; on 4 or more cores, each
// worker that has received a PUT of two or more pieces has a PieceChecker helper.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/protocol.h"
#include "net/put_arena.h"
#include "net/socket.h"
#include "server/acceptor.h"
#include "server/arena_puts.h"
#include "server/claim_table.h"
#include "server/conn_table.h"
#include "server/device_puts.h"
#include "server/gate.h"
#include "server/lease_table.h"
#include "server/list_cursor.h"
#include "server/piece_checker.h"
#include "server/prefetcher.h"
#include "server/request_record.h"
#include "server/server_metrics.h"
#include "server/server_transport.h"
#include "store/store.h"

namespace ecstore::net {

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";
  // Clients must present it in HELLO: a principal with every right (server/gate.h). A
  // listen address that is not loopback needs it, an ACL, or client certificates required.
  std::string token;
  // TLS on the TCP port (net/tls.h): plain clients are refused there with why.
  std::optional<TlsOptions> tls;
  // Principals and their grants per namespace (server/acl.h); empty: none.
  std::string acl_file;
  std::chrono::milliseconds io_timeout{30000};
  // Same-host transport: a unix socket over which the pool's memfd is passed once; gets
  // return an offset under a lease. Needs a store opened with
  // Options::memory_backend = NewSharedHostBackend. Empty = off.
  std::string shm_socket;
  // RDMA verbs data path: an address of an RDMA device ("IP:PORT", port 0 = any). Empty = off.
  std::string rdma_listen;
  // A shared-memory lease not released by its reader within this time is released for it.
  std::chrono::milliseconds lease_ttl{30000};
  // Per connection: at most this many shared-memory/RDMA leases, over at most this many
  // bytes (0 = half the pool), so one reader cannot pin the pool and keep every put Busy.
  size_t max_leases_per_connection = 1024;
  // Clients beyond this many connections are refused with a clear error. A waiting
  // connection costs its descriptor and a few KiB, no thread (docs/limits.md). A connection
  // idle for idle_timeout, holding no lease, is closed (0 = never).
  size_t max_connections = 16384;
  // A connection must say HELLO within hello_timeout, and at most max_ungreeted (and a
  // quarter of max_connections) may be waiting to: sockets that never speak cannot fill the
  // connection limit.
  std::chrono::milliseconds hello_timeout{5000};
  size_t max_ungreeted = 1024;
  // Threads that serve requests (0: EventLoop::DefaultWorkers, twice the cores, 8 to 64).
  unsigned workers = 0;
  // Without a token only the server's own user (and root) may connect, over the unix socket
  // or loopback TCP (server/peer_access.h); with group_access the members of its group too, and
  // the socket is group-writable.
  bool group_access = false;
  // Same-host clients' put arenas together, at most this many bytes (0: the pool's size, at
  // least 256 MiB); past it a client's puts go through the socket.
  uint64_t max_arena_bytes = 0;
  std::chrono::milliseconds idle_timeout{600000};
  uint64_t max_leased_bytes_per_connection = 0;
  // A request that takes longer than this (header to reply) is logged as slow (0 = never).
  std::chrono::milliseconds slow_request{250};
  // Threads besides the connection's own that split each copy out of a client's put arena
  // (PUT_SHM) into the pool; -1: CopyPool::ServerThreads (7 on 16 cores, none on 2).
  int copy_threads = -1;
  // A TCP put's pieces checksummed (and compared with the entry the key holds) on a helper
  // thread per worker while the worker receives the next (server/piece_checker.h): 1 yes,
  // 0 no, -1 where the machine has 4 or more cores.
  int check_put_pieces = -1;
  // A cluster node's fence (cluster/consistency.h): asked before each request that reads or
  // writes entries, with the view revision the connection declared (VIEW; 0: none); a
  // refusal is answered as its Status, the connection kept. Empty: none.
  std::function<Status(int64_t view_revision)> fence;
  // Requests naming only this namespace pass a closed fence: the node's own start-up check
  // that its advertised address reaches it, before it is registered.
  std::string unfenced_namespace;
};

class Server {
 public:
  static Result<std::unique_ptr<Server>> Start(Store* store, const ServerOptions& options);
  ~Server();
  uint16_t port() const { return port_; }
  const char* transport() const {
    return rdma_ ? (shm_ ? "tcp+shm+rdma" : "tcp+rdma") : (shm_ ? "tcp+shm" : "tcp");
  }
  // Threads that serve requests (ServerOptions::workers).
  unsigned workers() const { return conns_ ? conns_->workers() : 0; }
  // Threads that copy one same-host put out of its arena: the worker's and the helpers.
  unsigned put_copy_threads() const { return copier_.threads() + 1; }
  // Whether a connection's TCP puts are checked on a helper (ServerOptions::check_put_pieces).
  bool checks_put_pieces_behind() const { return check_behind_; }
  // Stops accepting, closes every connection and joins the threads. Idempotent.
  void Stop();
  // What it has served (ops/prometheus.h renders it), and who it serves now.
  const ServerMetrics& metrics() const { return metrics_; }
  uint64_t connections() const { return conns_ ? conns_->open() : 0; }
  // Connections by state, and the workers (/metrics).
  ConnTable::Counts connection_counts() const {
    return conns_ ? conns_->counts() : ConnTable::Counts{};
  }
  uint64_t client_leases() const { return leases_held_.load(); }
  Prefetcher::Counters prefetches() const { return prefetcher_.counters(); }
  // CLAIMs answered: granted (the asker computes) and held (another asker is computing).
  std::pair<uint64_t, uint64_t> claims() const { return {claims_.granted(), claims_.held()}; }
  double uptime_seconds() const;
  // What SIGHUP may change while serving: the slow-request threshold, and the shared secret
  // new connections must present (connections already greeted keep theirs).
  void SetSlowRequest(std::chrono::milliseconds threshold) {
    slow_request_ms_.store(threshold.count());
  }
  void SetToken(std::string token) { gate_->SetToken(std::move(token)); }
  // Who may connect and what they may do: its ACL and certificate reloads (SIGHUP).
  Gate& gate() { return *gate_; }

 private:
  using Conn = ServerConn;
  Server(Store* s, ServerOptions o)
      : store_(s), opt_(std::move(o)), slow_request_ms_(opt_.slow_request.count()) {}
  using Clock = std::chrono::steady_clock;
  // One turn of a connection whose socket is ready: its TLS handshake, the requests that
  // have arrived, or the rest of a reply a slow reader left (what it waits for next).
  ConnTable::Next Turn(Conn* c, uint32_t events) REQUIRES(c->turn);
  Status ServeRequest(Conn* c) REQUIRES(c->turn);
  Result<FrameHeader> ReadRequestHeader(Conn* c) REQUIRES(c->turn);
  Status Handle(Conn* c, const FrameHeader& h, std::string& body) REQUIRES(c->turn);
  // A closed cluster fence's refusal for a request that reads or writes entries, else Ok.
  Status Fenced(Op op, std::string_view body, int64_t view_revision) const;
  // Answers a request with an error (counted as a miss when NotFound, else an error).
  Status ReplyError(Conn* c, const FrameHeader& h, const Status& st) REQUIRES(c->turn);
  Status HandleAdmin(Conn* c, const FrameHeader& h) REQUIRES(c->turn);
  Status HandleStoreRequest(Conn* c, const FrameHeader& h, BodyReader* r) REQUIRES(c->turn);
  uint64_t ArenaBudget() const;  // ServerOptions::max_arena_bytes, or its default
  // Counts an answered request and logs it (debug; warn when slow).
  void Finish(Conn* c, const FrameHeader& h) REQUIRES(c->turn);  // c->req counted and logged
  Status Hello(Conn* c, const FrameHeader& h, const std::string& body) REQUIRES(c->turn);
  Status HandleGet(Conn* c, const FrameHeader& h, BodyReader* r) REQUIRES(c->turn);
  Status HandleGetShmMany(Conn* c, const FrameHeader& h, BodyReader* r) REQUIRES(c->turn);
  Status HandleDevicePool(Conn* c, const FrameHeader& h) REQUIRES(c->turn);
  // The transport that answers a get opcode (null: not a get, or not offered here).
  const ServerTransport* TransportFor(Op op) const;
  Status HandleList(Conn* c, const FrameHeader& h, BodyReader* r) REQUIRES(c->turn);
  Status HandlePut(Conn* c, const FrameHeader& h, Deadline deadline) REQUIRES(c->turn);
  LeaseTable::Limits LeaseLimits() const;  // each connection's

  Store* store_;
  ServerOptions opt_;
  std::atomic<int64_t> slow_request_ms_{0};  // opt_.slow_request, then SetSlowRequest
  std::unique_ptr<Gate> gate_;               // the token, ACL and TLS certificate; made at Start
  UniqueFd listen_fd_;
  // The ways gets are answered: TCP always, the others where offered.
  TcpGets tcp_;
  std::unique_ptr<ShmGets> shm_;  // owns the unix listener
  std::unique_ptr<RdmaGets> rdma_;
  std::unique_ptr<DeviceIpcGets> device_ipc_;  // with a device tier that could be exported
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  Acceptor acceptor_;
  // Across connections (stats); declared before conns_, whose lease tables count into it.
  std::atomic<uint64_t> leases_held_{0};
  // Same-host PUT_DEVICE (the pool's CUDA registration); declared before conns_, whose
  // DeviceImports copy into the pool it registers.
  DevicePuts device_puts_{store_};
  // PREFETCH hints, acted on by its own thread; declared before conns_, which queue to it.
  Prefetcher prefetcher_{store_};
  ClaimTable claims_;
  std::atomic<uint64_t> arena_bytes_{0};  // every connection's put arena together
  std::unique_ptr<ConnTable> conns_;      // made at Start
  ServerMetrics metrics_;
  // Splits PUT_SHM's copies out of put arenas, in 1 MiB pieces (one copy at a time uses the
  // helpers, another connection's copies on its own thread meanwhile). After opt_.
  CopyPool copier_{opt_.copy_threads >= 0
                       ? static_cast<unsigned>(opt_.copy_threads)
                       : CopyPool::ServerThreads(std::thread::hardware_concurrency()),
                   1ull << 20};
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  const bool check_behind_ =
      CheckPiecesBehind(opt_.check_put_pieces, std::thread::hardware_concurrency());
};

}  // namespace ecstore::net
