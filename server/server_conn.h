// ServerConn: the state of one client connection of a Server -- its stream, the principal it
// proved, its leases and listing, its same-host put arena and device imports, a reply a slow
// reader has not taken yet, and where it stands between requests. Nothing here is a thread:
// the connection waits on the event loop (server/conn_table.h) and a worker serves it a turn
// at a time. Its put arena and device imports are made at first use, not on connect.
// Thread rules: everything but `id`, `state` and `done` is GUARDED_BY `turn`, held by the
// worker serving the connection or by the ticker looking at it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "base/mutex.h"
#include "net/put_arena.h"
#include "net/stream.h"
#include "server/device_puts.h"
#include "server/gate.h"
#include "server/lease_table.h"
#include "server/list_cursor.h"
#include "server/reply_outbox.h"
#include "server/request_arrival.h"
#include "server/request_record.h"

namespace ecstore::net {

struct ServerConn {
  using Clock = std::chrono::steady_clock;
  enum State : uint8_t { kWaiting, kBusy, kSending };
  ServerConn(LeaseTable::Limits limits, std::atomic<uint64_t>* leases_held)
      : leases(limits, leases_held) {}
  // Unique for the process's life: who holds this connection's claims (ClaimTable's cap).
  static inline std::atomic<uint64_t> next_id{0};
  const uint64_t id = ++next_id;
  Mutex turn;
  std::atomic<State> state{kWaiting};
  std::atomic<bool> done{false};          // closed; the table frees it at its next tick
  Stream io GUARDED_BY(turn);             // the socket, through TLS where the gate asks for it
  Identity who GUARDED_BY(turn);          // the principal it proved at HELLO
  bool shm GUARDED_BY(turn) = false;      // came over the unix socket
  bool secured GUARDED_BY(turn) = false;  // TLS handshake done, or none needed
  std::unique_ptr<TlsSession> handshake
      GUARDED_BY(turn);                   // TLS: the session while its handshake goes on
  bool greeted GUARDED_BY(turn) = false;  // said HELLO
  // Its principal's read grant covers every namespace, so it may read the pool in place
  // (the pool's memfd, the device pool's IPC handle, RDMA): set at HELLO, re-checked per read.
  bool maps_pool GUARDED_BY(turn) = false;
  std::string peer GUARDED_BY(turn);  // "IP:PORT", or "unix pid N" on the shared-memory socket
  Clock::time_point hello_by GUARDED_BY(turn);
  Clock::time_point last_request GUARDED_BY(turn);
  int64_t view_revision GUARDED_BY(turn) =
      0;  // a cluster client's view of the members (VIEW; 0: none)
  RequestArrival arrival GUARDED_BY(turn){RequestArrival::kFrames};
  RequestRecord req GUARDED_BY(turn);  // the request being answered, for its metrics and log line
  // The leases this reader holds (shared memory, RDMA, CUDA IPC, pins).
  LeaseTable leases GUARDED_BY(turn);
  ListCursor listing GUARDED_BY(turn);  // a LIST in progress
  std::shared_ptr<SharedArena> arena
      GUARDED_BY(turn);  // same host: this client's put arena, once asked for
  std::unique_ptr<DeviceImports> imports
      GUARDED_BY(turn);                              // same host: its device memory opened here
  std::unique_ptr<Outbox> sending GUARDED_BY(turn);  // a GET reply its reader has not taken yet
};

}  // namespace ecstore::net
