#include "server/conn_table.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include "base/mutex.h"

namespace ecstore::net {

Status ConnTable::Start(unsigned workers, Turn turn) {
  turn_ = std::move(turn);
  return loop_.Start(workers,
                     [this](void* tag, uint32_t ev) { Ready(static_cast<ServerConn*>(tag), ev); });
}

std::string ConnTable::Adopt(UniqueFd* fd, std::string peer, bool shm) {
  if (ungreeted_ >= limits_.max_ungreeted)
    return "server has too many connections that have not said HELLO; try again later";
  if (open_ >= limits_.max_connections)
    return "server has " + std::to_string(open_.load()) +
           " connections, its limit; try again later";
  MutexLock l(&mu_);
  ServerConn& c = conns_.emplace_back(limits_.leases, leases_held_);
  MutexLock t(&c.turn);  // a worker may have it the moment it is added
  c.io.Adopt(std::move(*fd));
  c.shm = shm;
  c.peer = std::move(peer);
  c.last_request = Clock::now();
  c.hello_by = c.last_request + limits_.hello_timeout;
  c.arrival.set_framing(shm ? RequestArrival::kUnchecked : RequestArrival::kFrames);
  ++open_, ++ungreeted_;
  if (Status st = loop_.Add(c.io.fd(), &c, EPOLLIN); !st.ok()) {
    spdlog::warn("cannot watch a new connection: {}", st.ToString());
    *fd = c.io.Take();  // back to the caller, who refuses it
    Close(&c);
    return "server cannot take a connection now; try again later";
  }
  return "";
}

void ConnTable::ShutDown(ServerConn& c) {
  if (c.io.valid()) ::shutdown(c.io.fd(), SHUT_RDWR);
}

void ConnTable::Greeted(ServerConn* c) {
  if (!c->greeted) --ungreeted_;  // before the reply: its client may connect again at once
  c->greeted = true;
}

void ConnTable::Ready(ServerConn* c, uint32_t events) {
  MutexLock l(&c->turn);
  if (c->done) return;
  c->state = ServerConn::kBusy;
  const Next next = turn_(c, events);
  if (next != Next::kClose) {
    c->state = next == Next::kWrite ? ServerConn::kSending : ServerConn::kWaiting;
    if (loop_.Arm(c->io.fd(), c, next == Next::kWrite ? EPOLLOUT : EPOLLIN).ok()) return;
  }
  Close(c);
}

// The connection ends: the peer sees EOF now, and a reader that went away (or crashed) holds
// nothing. The descriptor is closed when the ticker frees it.
void ConnTable::Close(ServerConn* c) {
  if (c->done) return;
  if (c->io.valid()) {
    loop_.Forget(c->io.fd());
    ::shutdown(c->io.fd(), SHUT_RDWR);
  }
  c->sending.reset();
  c->leases.Clear();
  c->imports.reset();
  if (!c->greeted) --ungreeted_;
  if (c->arena) *arena_bytes_ -= c->arena->bytes().size();
  --open_;
  c->done = true;
}

// Whether a waiting connection is past a deadline: no HELLO in time, a reply left untaken,
// or idle past idle_timeout while holding nothing. Expires its leases meanwhile.
bool ConnTable::Overdue(ServerConn* c, Clock::time_point now) {
  if (!c->greeted && now >= c->hello_by) {
    spdlog::debug("closing a connection from {}: no HELLO within {} ms", c->peer,
                  limits_.hello_timeout.count());
    return true;
  }
  if (c->sending) return now >= c->sending->deadline();
  const auto partial = c->arrival.partial_since();
  if (partial != Clock::time_point{} && now - partial >= limits_.io_timeout) {
    spdlog::debug("closing a connection from {}: a frame begun was not sent whole within {} ms",
                  c->peer, limits_.io_timeout.count());
    return true;
  }
  if (!c->leases.empty()) c->leases.Expire(now);
  // Device memory the client opened to us and no longer puts from: let it go (it stays
  // allocated while open here, even once the client frees it).
  if (c->imports) c->imports->CloseIdle(now);
  if (c->leases.empty() && limits_.idle_timeout.count() > 0 &&
      now - c->last_request >= limits_.idle_timeout) {
    spdlog::debug("closing a connection idle for {} ms", limits_.idle_timeout.count());
    return true;
  }
  return false;
}

void ConnTable::Tick(Clock::time_point now) {
  if (last_tick_ != Clock::time_point{}) {
    const auto late = now - last_tick_ - std::chrono::milliseconds(100);
    tick_lag_ns_.store(std::max<int64_t>(0, late.count()), std::memory_order_relaxed);
  }
  last_tick_ = now;
  MutexLock l(&mu_);
  for (auto it = conns_.begin(); it != conns_.end();) {
    ServerConn& c = *it;
    if (c.done) {
      { MutexLock t(&c.turn); }  // its last turn has let go
      it = conns_.erase(it);
      continue;
    }
    // A connection being served is looked at on a later tick. One past its deadline is shut
    // down: its worker (or the next, woken by the hang-up) closes it.
    if (c.turn.TryLock()) {
      if (Overdue(&c, now)) ::shutdown(c.io.fd(), SHUT_RDWR);
      c.turn.unlock();
    }
    ++it;
  }
}

void ConnTable::CloseAll() {
  {
    MutexLock l(&mu_);
    for (ServerConn& c : conns_) ShutDown(c);  // a worker's blocking call ends
  }
  loop_.Stop();
  MutexLock l(&mu_);
  for (ServerConn& c : conns_) {
    MutexLock t(&c.turn);
    Close(&c);
  }
  conns_.clear();
}

ConnTable::Counts ConnTable::counts() const {
  Counts n;
  n.open = open_.load(std::memory_order_relaxed);
  n.ungreeted = ungreeted_.load(std::memory_order_relaxed);
  n.workers = loop_.workers();
  n.workers_busy = loop_.busy();
  n.tick_lag_seconds = tick_lag_ns_.load(std::memory_order_relaxed) * 1e-9;
  MutexLock l(&mu_);
  for (const ServerConn& c : conns_) {
    if (c.done) continue;
    switch (c.state.load(std::memory_order_relaxed)) {
      case ServerConn::kWaiting:
        ++n.waiting;
        break;
      case ServerConn::kBusy:
        ++n.busy;
        break;
      case ServerConn::kSending:
        ++n.sending;
        break;
    }
  }
  return n;
}

}  // namespace ecstore::net
