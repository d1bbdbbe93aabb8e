// ConnTable: a Server's client connections. The acceptor hands each new socket to Adopt,
// which takes it within the limits (or says why not); the connection then waits on the
// EventLoop, costing a descriptor and its ServerConn but no thread, until its next request
// arrives, and one of a fixed pool of workers serves it a turn. Tick, every 100 ms, closes
// those that did not say HELLO in time, left a frame half-sent or a reply untaken past its
// deadline, or stayed idle too long; it expires their leases, and frees the closed ones.
//
//   ConnTable table(limits, &leases_held, &arena_bytes);
//   EC_RETURN_IF_ERROR(table.Start(workers, [&](ServerConn* c, uint32_t events) {
//     return Serve(c, events);  // kRead: wait for the next request; kWrite; kClose
//   }));
//   std::string why = table.Adopt(&fd, peer, /*shm=*/false);  // "" when taken
//   table.Tick(Clock::now());
//   table.CloseAll();
//
// Thread rules: Adopt and Tick from one thread (the acceptor's); a turn runs on a worker
// under its connection's `turn`; Greeted from the turn; counts() from any thread; CloseAll
// from the owner once the acceptor has stopped.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>

#include "base/mutex.h"
#include "server/event_loop.h"
#include "server/server_conn.h"

namespace ecstore::net {

class ConnTable {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Next { kRead, kWrite, kClose };
  using Turn = std::function<Next(ServerConn*, uint32_t events)>;
  struct Limits {
    size_t max_connections = 16384;
    size_t max_ungreeted = 1024;  // accepted, not yet said HELLO
    std::chrono::milliseconds hello_timeout{5000};
    std::chrono::milliseconds idle_timeout{600000};  // 0: never
    std::chrono::milliseconds io_timeout{30000};     // a frame begun must arrive within it
    LeaseTable::Limits leases;
  };
  // What /metrics shows of the connections and the workers.
  struct Counts {
    uint64_t open = 0, ungreeted = 0, waiting = 0, busy = 0, sending = 0;
    unsigned workers = 0, workers_busy = 0;
    double tick_lag_seconds = 0;  // how late the last tick ran: the loop's own lag
  };
  ConnTable(Limits limits, std::atomic<uint64_t>* leases_held, std::atomic<uint64_t>* arena_bytes)
      : limits_(limits), leases_held_(leases_held), arena_bytes_(arena_bytes) {}
  ~ConnTable() { CloseAll(); }

  Status Start(unsigned workers, Turn turn);
  // Takes a new client's socket (*fd moved from): "" when taken, else why it is refused (*fd
  // left with the caller, who tells the client and closes it).
  std::string Adopt(UniqueFd* fd, std::string peer, bool shm);
  // The turn's: the connection said HELLO.
  void Greeted(ServerConn* c) REQUIRES(c->turn);
  void Tick(Clock::time_point now);
  void CloseAll();

  uint64_t open() const { return open_.load(std::memory_order_relaxed); }
  unsigned workers() const { return loop_.workers(); }
  Counts counts() const;

 private:
  void Ready(ServerConn* c, uint32_t events);
  void Close(ServerConn* c) REQUIRES(c->turn);
  // Shuts the connection's socket down without its turn, which the worker blocked on it
  // holds: only the descriptor is read, the same from Adopt until the connection is freed.
  static void ShutDown(ServerConn& c) NO_THREAD_SAFETY_ANALYSIS;
  bool Overdue(ServerConn* c, Clock::time_point now) REQUIRES(c->turn);

  const Limits limits_;
  std::atomic<uint64_t>* const leases_held_;
  std::atomic<uint64_t>* const arena_bytes_;
  Turn turn_;
  mutable Mutex mu_;
  std::list<ServerConn> conns_ GUARDED_BY(mu_);
  EventLoop loop_;  // after conns_: its workers stop before the connections go
  std::atomic<uint64_t> open_{0}, ungreeted_{0};
  Clock::time_point last_tick_{};
  std::atomic<int64_t> tick_lag_ns_{0};
};

}  // namespace ecstore::net
