// Evictor: keeps the host pool below its high watermark. A background thread takes the
// coldest unleased entries: one with a disk copy just leaves the pool; the rest are spilled
// to the DurableTier in batches of up to 64 MiB (one append, one fdatasync each). Puts that
// find no block wait here (up to Options::put_wait) while it makes room. After a failed spill
// it backs off, and Puts stop waiting once two spills in a row have failed.
// The device tier (issue 10) gets one of these too, demoting to the host pool.
// Thread rules: thread-safe; its state is guarded by the keydir's mu. Start once, Stop once
// (joins the thread); Allocate, SpillBatch and Flush never hold mu across their I/O.
#pragma once

#include <chrono>
#include <thread>
#include <vector>

#include "store/keydir.h"

namespace ecstore {

class Evictor {
 public:
  Evictor(Keydir* kd, std::chrono::milliseconds put_wait) : kd_(kd), put_wait_(put_wait) {}
  ~Evictor() { Stop(); }

  void Start();
  void Stop() EXCLUDES(kd_->mu);

  // A block of `bytes` in the pool. With `wait`, waits up to put_wait for the evictor to
  // make room; without, Busy at once (the evictor is nudged either way).
  Status Allocate(uint64_t bytes, bool wait, PoolBlock* out) EXCLUDES(kd_->mu);
  // Wakes the evictor if the pool is above its watermark or a Put is waiting.
  void NudgeLocked() REQUIRES(kd_->mu);
  void Nudge() EXCLUDES(kd_->mu);
  // Writes the entries (marked spilling by the caller) to disk. drop_from_pool: eviction
  // (their pool blocks go back once written); otherwise a Flush (they stay).
  Status SpillBatch(const std::vector<EntryPtr>& batch, bool drop_from_pool) EXCLUDES(kd_->mu);
  // Spills every entry that has no disk copy yet, then commits the index.
  Status Flush() EXCLUDES(kd_->mu);
  uint64_t SpillErrors() const EXCLUDES(kd_->mu);

 private:
  bool NeedsEvictionLocked() const REQUIRES(kd_->mu);
  bool EvictionDoneLocked() const REQUIRES(kd_->mu);
  void Loop();
  bool EvictSomeLocked() REQUIRES(kd_->mu);
  void DropUnspillableLocked(Entry* e, bool drop_from_pool) REQUIRES(kd_->mu);
  void InstallSpilledLocked(Entry* e, const DiskLocation& loc, bool drop_from_pool)
      REQUIRES(kd_->mu);
  void NoteSpillResultLocked(const Status& st, size_t entries) REQUIRES(kd_->mu);

  Keydir* const kd_;
  const std::chrono::milliseconds put_wait_;
  CondVar evict_cv_;                             // the evictor: work may be needed
  uint64_t need_bytes_ GUARDED_BY(kd_->mu) = 0;  // the largest block a waiting Put needs
  uint64_t spill_fail_gen_ GUARDED_BY(kd_->mu) = 0;
  int consecutive_spill_failures_ GUARDED_BY(kd_->mu) = 0;  // Puts give up after two
  std::chrono::steady_clock::time_point spill_retry_at_ GUARDED_BY(kd_->mu){};
  Status last_spill_error_ GUARDED_BY(kd_->mu);
  uint64_t spill_errors_ GUARDED_BY(kd_->mu) = 0;
  bool stop_ GUARDED_BY(kd_->mu) = false;
  std::thread thread_;
};

}  // namespace ecstore
