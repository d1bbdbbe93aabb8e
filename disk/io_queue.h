// I/O queue in NIXL's enqueue / post / poll shape, with io_uring as the implementation, and
// IoService: the one thread that owns the ring and runs batches for other threads, several
// at once, reads ahead of writes.
// Thread rules: an IoQueue belongs to one thread (IoService's). IoService::Run may be called
// from any thread; it blocks the caller until its batch is complete, and runs the batch's
// IoProgress (if any) on the caller's thread meanwhile.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/env.h"
#include "base/mutex.h"
#include "base/status.h"

namespace ecstore {

struct IoRequest {
  IoOp op = IoOp::kRead;
  int fd = -1;
  void* buf = nullptr;  // 4 KiB aligned for O_DIRECT files
  uint64_t len = 0;
  uint64_t offset = 0;
  uint64_t user_data = 0;
};

struct IoCompletion {
  uint64_t user_data = 0;
  int64_t result = 0;  // bytes, or -errno
};

class IoQueue {
 public:
  virtual ~IoQueue() = default;
  virtual unsigned depth() const = 0;
  // Adds a request; false when `depth` requests are already in flight or queued.
  virtual bool Enqueue(const IoRequest& req) = 0;
  // Hands everything enqueued to the kernel in one system call.
  virtual Status Post() = 0;
  // Appends completions to `out`, waiting until at least `min_complete` are available.
  virtual Status Poll(std::vector<IoCompletion>* out, unsigned min_complete) = 0;
  // Arms one 8-byte read of an eventfd outside the `depth` budget (and outside Env's fault
  // point): a write to the eventfd then completes it, waking a Poll (its completion carries
  // `user_data`). Posted with the next Post.
  virtual bool ArmWakeup(int eventfd, uint64_t* buf, uint64_t user_data) = 0;
};

Result<std::unique_ptr<IoQueue>> NewUringIoQueue(unsigned depth, Env* env);

// What a read has landed so far: request `index` of the batch now holds [from, from + n) of
// its buffer, following what the previous call for it gave (each byte is given once, in
// order). Run calls it on its own thread while the rest of the batch is still in flight, so
// a reader checksums what has landed while the disk delivers the rest.
using IoProgress = std::function<void(size_t index, uint64_t from, uint64_t n)>;
// Other work for the caller's thread while its batch is in flight: Run calls it once, after
// the batch is handed over and before it waits (GetMany copies out its pool hits there while
// the disk reads the rest).
using IoMeanwhile = std::function<void()>;

class IoService {
 public:
  // chunk_bytes: large requests are split into pieces of this size, kept `depth` deep.
  // followed_window: a batch of reads whose caller follows it (an IoProgress) keeps at most
  // this many pieces in flight, in pieces of at most kFollowedPieceBytes sized so that it
  // takes at least kFollowedWaves windows (0: the whole ring, as any other batch); its last
  // window's worth goes a third of a window at a time. On a virtio disk every
  // request in flight completes together: with a whole 12 MB entry in flight its first byte
  // landed at 99 % of the read, so the caller's copy-out and checksum ran after the read
  // instead of under it; a window of about 12 pieces, sent a third at a time, lets them run
  // under the read (`bench get_disk`: windows of 8-16 measured alike).
  // The service's thread only reaps and submits: copying a teed read's pieces here as they
  // completed, to split the tail's work over two cores, left the disk idle meanwhile and
  // slowed promoted gets and GetMany by about a quarter.
  static Result<std::unique_ptr<IoService>> Start(Env* env, unsigned depth, uint64_t chunk_bytes,
                                                  unsigned followed_window = 0);
  static constexpr unsigned kFollowedWaves = 3;
  static constexpr uint64_t kFollowedPieceBytes = 384 << 10;
  ~IoService();
  // Runs every request of the batch; short transfers are resumed. Returns the first error.
  Status Run(const std::vector<IoRequest>& batch, const IoProgress& progress = nullptr,
             const IoMeanwhile& meanwhile = nullptr);

 private:
  struct Job;
  struct Piece {
    IoRequest req;
    size_t index = 0;   // of the request in the batch
    uint64_t from = 0;  // where in that request
  };
  IoService(std::unique_ptr<IoQueue> q, uint64_t chunk, unsigned window)
      : queue_(std::move(q)), chunk_(chunk), followed_window_(window) {}
  void Wake();  // a new batch: let a Loop blocked in Poll look at it
  using Inflight = std::unordered_map<uint64_t, std::pair<Job*, Piece>>;
  void Loop();
  void Activate(Job* job, std::vector<Job*>* active) const;
  void Submit(Job* job, Inflight* inflight, uint64_t* next_id);
  void Complete(const IoCompletion& c, Inflight* inflight);
  static void Landed(Job* job, const Piece& p, uint64_t n);
  static void Finish(Job* job, const Status& st);
  static constexpr unsigned kReadSlots = 2;  // ring slots writes leave to reads
  std::deque<Piece> Pieces(const std::vector<IoRequest>& batch, unsigned window) const;

  std::unique_ptr<IoQueue> queue_;
  uint64_t chunk_;
  unsigned followed_window_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Job*> jobs_ GUARDED_BY(mu_);
  unsigned writes_inflight_ = 0;  // Loop thread only
  int wake_fd_ = -1;              // eventfd; Run writes it, the ring has a read of it armed
  uint64_t wake_buf_ = 0;         // Loop thread only
  bool wake_armed_ = false;       // Loop thread only
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ecstore
