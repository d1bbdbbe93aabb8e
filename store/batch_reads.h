// BatchReads: the reads of several keys at once -- GetMany (copied out), AcquireMany (leased,
// zero copy) and Prefetch (into the pool only). Each leases what is in the pool, sends the
// disk-only entries' reads out as one batch (HostEvictor::PromoteKeys keeps the ring full
// across entries), and hands a key it could not serve that way to the single-key path
// (the store's Get / Acquire), which answers its error or retries a lost race.
// Private to store/.
// Thread rules: thread-safe; its copy helpers serve one GetMany at a time (another copies on
// its own thread). It takes no lock itself: its leases and lookups are the keydir's calls.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/copy_pool.h"
#include "store/evictor.h"
#include "store/keydir.h"

namespace ecstore {

class BatchReads {
 public:
  // `single` answers the keys a batch leaves over; kd and ev outlive this.
  BatchReads(Cache* single, Keydir* kd, HostEvictor* ev, bool promote_on_get)
      : single_(single), kd_(kd), ev_(ev), promote_(promote_on_get) {}

  std::vector<Result<EntryInfo>> GetMany(std::string_view ns, const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts)
      EXCLUDES(kd_->mu);
  // With a watch, as Store's: the disk reads told as they land.
  std::vector<Result<ReadLease>> AcquireMany(std::string_view ns,
                                             const std::vector<std::string>& keys,
                                             Cache::LandingWatch* watch) EXCLUDES(kd_->mu);

 private:
  std::vector<std::string> WithinLeaseBudget(std::string_view ns,
                                             const std::vector<std::string>& keys,
                                             const std::vector<std::optional<ReadLease>>& got,
                                             std::vector<bool>* over, std::vector<size_t>* index)
      EXCLUDES(kd_->mu);

  Cache* const single_;
  Keydir* const kd_;
  HostEvictor* const ev_;
  const bool promote_;
  // GetMany's copies out of the pool, split over a few threads.
  CopyPool copy_pool_{CopyPool::DefaultThreads(std::thread::hardware_concurrency())};
};

}  // namespace ecstore
