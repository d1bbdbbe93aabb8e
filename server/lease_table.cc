#include "server/lease_table.h"

#include <spdlog/spdlog.h>

#include <string>

namespace ecstore::net {

Result<uint64_t> LeaseTable::Add(ReadLease lease, Clock::time_point now) {
  if (!leases_.empty() &&
      (leases_.size() >= limits_.max_leases || bytes_ + lease.size() > limits_.max_bytes))
    return Status::Busy("this connection holds " + std::to_string(leases_.size()) + " leases (" +
                        std::to_string(bytes_) + " bytes); release some before acquiring more");
  bytes_ += lease.size();
  const uint64_t id = next_id_++;
  leases_.emplace(id, Held{std::move(lease), now});
  ++*held_total_;
  return id;
}

void LeaseTable::Release(uint64_t id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  bytes_ -= it->second.lease.size();
  leases_.erase(it);
  --*held_total_;
}

size_t LeaseTable::Expire(Clock::time_point now) {
  size_t expired = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (now - it->second.granted < limits_.ttl) {
      ++it;
      continue;
    }
    spdlog::warn("lease {} expired after {} ms without a release", it->first, limits_.ttl.count());
    bytes_ -= it->second.lease.size();
    it = leases_.erase(it);
    --*held_total_;
    ++expired;
  }
  return expired;
}

void LeaseTable::Clear() {
  *held_total_ -= leases_.size();
  leases_.clear();
  bytes_ = 0;
}

}  // namespace ecstore::net
