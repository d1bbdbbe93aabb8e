// CopyPool: a few threads that split large copies with the caller. One thread's memcpy does
// not reach a machine's memory bandwidth, and a GetMany copies out several entries of
// 3-60 MB at once.
// Thread rules: thread-safe. One Copy at a time uses the threads; a Copy that finds them busy
// copies on its caller's thread alone (never waits behind another caller's copy).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace ecstore {

class CopyPool {
 public:
  struct Item {
    void* dst;
    const void* src;
    size_t n;
  };
  // Up to `threads` helpers besides the caller (0: every Copy runs on the caller alone; fewer
  // where a thread cannot be started); a copy is
  // split into pieces of `piece_bytes` (a thread's share of a small copy costs more to hand
  // over than to do below ~1 MiB: a helper's wake-up is ~10 us, a 1 MiB copy ~150-250 us).
  explicit CopyPool(unsigned threads, size_t piece_bytes = kDefaultPieceBytes);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  // Copies every item; returns when all bytes have landed.
  void Copy(const std::vector<Item>& items);
  unsigned threads() const { return static_cast<unsigned>(threads_.size()); }

  // Helpers for a machine with `cores`: one per four cores, at least 1 where there are two or
  // more, at most 3 (the engine that embeds the store needs its cores too; a helper works
  // only while its caller waits on the copy). Bench `mixed` (GetMany of 4) gains with them
  // on small and large hosts alike, and a same-host client's shared-memory gets about
  // double with one helper.
  static unsigned DefaultThreads(unsigned cores);
  // Helpers for a daemon's copies out of its clients' put arenas on a machine with `cores`:
  // half the cores less the caller, at most 7. The daemon has no engine to share its process
  // with, and a same-host save waits for this copy.
  static unsigned ServerThreads(unsigned cores);
  static constexpr size_t kDefaultPieceBytes = 4ull << 20;

 private:
  const size_t piece_bytes_;
  struct Piece {
    uint8_t* dst;
    const uint8_t* src;
    size_t n;
  };
  void Work();                 // a helper's loop
  size_t Drain(size_t total);  // takes pieces until none are left
  void Spread(const std::vector<Item>& items) REQUIRES(job_mu_);  // over the helpers too

  Mutex job_mu_;  // held by the Copy that uses the helpers
  Mutex mu_ ACQUIRED_AFTER(job_mu_);
  CondVar wake_, done_cv_;
  // The job's pieces: written under mu_ before a new generation, read by Drain without it
  // (no job starts while a helper is inside).
  std::vector<Piece> pieces_;
  std::atomic<size_t> next_{0};
  size_t done_ GUARDED_BY(mu_) = 0;      // pieces finished
  unsigned active_ GUARDED_BY(mu_) = 0;  // helpers inside Drain
  uint64_t gen_ GUARDED_BY(mu_) = 0;     // a new job
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ecstore
