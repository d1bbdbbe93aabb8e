// Outbox: a GET reply (its header and info, then the entry's bytes straight from pool memory
// under a read lease) sent without letting a slow reader hold a worker. Push sends what the
// socket takes, waiting for it to take more only while the reader keeps up; what is left
// stays here, with the lease, until the socket is writable again (the event loop says when)
// or the reply's deadline passes.
//
//   Outbox out(std::move(head), std::move(lease), deadline);
//   auto done = out.Push(fd, std::chrono::milliseconds(5), budget);  // inline, on the worker
//   if (done.ok() && !*done) /* park: arm EPOLLOUT, then */ out.Push(fd, {}, {});
//
// Thread rules: one thread at a time (the worker serving its connection).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "cache/cache.h"
#include "net/socket.h"

namespace ecstore::net {

class Outbox {
 public:
  using Clock = std::chrono::steady_clock;
  Outbox(std::string head, ReadLease lease, Deadline by)
      : head_(std::move(head)),
        lease_(std::move(lease)),
        total_(head_.size() + lease_.size()),
        by_(by) {}
  // Sends on (a plain stream socket, non-blocking sends). Between sends it waits for room at
  // most `stall` at a time and `budget` in all; both zero: no waiting. True once everything
  // is sent; false when the reader is slower than that (the rest is kept). Unavailable when
  // the reader hung up or the deadline passed.
  Result<bool> Push(int fd, std::chrono::milliseconds stall, Clock::duration budget);
  Deadline deadline() const { return by_; }
  uint64_t left() const { return total_ - sent_; }

  // How long a worker goes on sending one reply inline: 50 ms, plus the time to send its
  // bytes at 2 GB/s, so a reader that keeps up is served in one go.
  static Clock::duration InlineBudget(uint64_t bytes) {
    return std::chrono::milliseconds(50) + std::chrono::microseconds(bytes / 2000);
  }

 private:
  std::string head_;
  ReadLease lease_;
  const uint64_t total_;
  uint64_t sent_ = 0;  // of head_, then of the lease's bytes
  Deadline by_;
};

}  // namespace ecstore::net
