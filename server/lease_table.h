// A connection's leases: the entries its reader holds over shared memory, RDMA or CUDA IPC,
// or as pins, each with when it was granted. Bounded in count and bytes (a reader that never
// releases cannot hold the pool), and released for the reader when a lease outlives its TTL
// without a RELEASE, or when the connection ends.
//
//   LeaseTable t({.max_leases = 1024, .max_bytes = pool / 2, .ttl = 30s}, &server_total);
//   auto id = t.Add(std::move(lease));   // Busy when the table is full
//   t.Release(*id);                      // the reader's RELEASE
//   t.Expire(Clock::now());              // on the connection's poll turns
//
// Thread rules: owned by its connection's thread. `held_total`, shared by the tables of one
// server (its stats), is atomic and must outlive the table.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <unordered_map>

#include "base/status.h"
#include "cache/cache.h"

namespace ecstore::net {

class LeaseTable {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    size_t max_leases = 1024;
    uint64_t max_bytes = 0;  // the leased entries' bytes together
    std::chrono::milliseconds ttl{30000};
  };
  LeaseTable(Limits limits, std::atomic<uint64_t>* held_total)
      : limits_(limits), held_total_(held_total) {}
  ~LeaseTable() { Clear(); }
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;

  // Keeps `lease` and returns its id (ids start at 1 and are never reused). Busy, saying
  // what the table holds, when it is full in count or bytes; the lease is then released. The
  // first lease is always admitted: one entry may be larger than the byte share.
  Result<uint64_t> Add(ReadLease lease, Clock::time_point now = Clock::now());
  // The reader's RELEASE. An unknown id (expired already, or never granted) is ignored.
  void Release(uint64_t id);
  // Releases every lease granted a TTL or more before `now`, each with a warning; returns how
  // many.
  size_t Expire(Clock::time_point now);
  void Clear();  // the connection ended: its reader holds nothing

  bool empty() const { return leases_.empty(); }
  size_t size() const { return leases_.size(); }
  uint64_t bytes() const { return bytes_; }
  std::chrono::milliseconds ttl() const { return limits_.ttl; }

 private:
  struct Held {
    ReadLease lease;
    Clock::time_point granted;
  };
  const Limits limits_;
  std::atomic<uint64_t>* const held_total_;
  std::unordered_map<uint64_t, Held> leases_;
  uint64_t next_id_ = 1;
  uint64_t bytes_ = 0;
};

}  // namespace ecstore::net
