#include "disk/io_queue.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <unordered_map>

#include "base/mutex.h"

namespace ecstore {
namespace {

constexpr uint64_t kWakeupId = UINT64_MAX;  // no batch piece ever gets this id

class UringIoQueue : public IoQueue {
 public:
  UringIoQueue(unsigned depth, Env* env) : depth_(depth), env_(env) {}
  ~UringIoQueue() override {
    if (ring_ok_) io_uring_queue_exit(&ring_);
  }
  Status Init() {
    int rc = io_uring_queue_init(depth_ + 1, &ring_, 0);  // + the wakeup read
    if (rc < 0) return Status::FromErrno(-rc, "io_uring_queue_init (is io_uring disabled?)");
    ring_ok_ = true;
    return Status::Ok();
  }
  unsigned depth() const override { return depth_; }

  bool Enqueue(const IoRequest& req) override {
    if (outstanding_ >= depth_) return false;
    int inject = env_->BeforeIo(req.op, req.fd, req.offset, req.len);
    uint64_t len = req.len;
    if (inject > 0) {
      injected_.push_back({req.user_data, -static_cast<int64_t>(inject)});
      ++outstanding_;
      return true;
    }
    if (inject < 0 && req.op == IoOp::kWrite) {  // torn write: only a prefix reaches the file
      len = std::min<uint64_t>(len, static_cast<uint64_t>(-inject));
      torn_.emplace(req.user_data, true);
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) return false;
    switch (req.op) {
      case IoOp::kRead:
        io_uring_prep_read(sqe, req.fd, req.buf, static_cast<unsigned>(len), req.offset);
        break;
      case IoOp::kWrite:
        io_uring_prep_write(sqe, req.fd, req.buf, static_cast<unsigned>(len), req.offset);
        break;
      case IoOp::kSync:
        io_uring_prep_fsync(sqe, req.fd, IORING_FSYNC_DATASYNC);
        break;
    }
    io_uring_sqe_set_data64(sqe, req.user_data);
    ++outstanding_;
    ++unposted_;
    return true;
  }

  bool ArmWakeup(int eventfd, uint64_t* buf, uint64_t user_data) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) return false;
    io_uring_prep_read(sqe, eventfd, buf, sizeof(*buf), 0);
    io_uring_sqe_set_data64(sqe, user_data);
    ++wakeups_;
    ++unposted_;
    return true;
  }

  Status Post() override {
    if (unposted_ == 0) return Status::Ok();
    int rc = io_uring_submit(&ring_);
    if (rc < 0) return Status::FromErrno(-rc, "io_uring_submit");
    unposted_ = 0;
    return Status::Ok();
  }

  Status Poll(std::vector<IoCompletion>* out, unsigned min_complete) override {
    unsigned got = 0;
    while (!injected_.empty()) {
      out->push_back(injected_.back());
      injected_.pop_back();
      --outstanding_;
      ++got;
    }
    while (outstanding_ + wakeups_ > 0) {
      io_uring_cqe* cqe = nullptr;
      int rc =
          got >= min_complete ? io_uring_peek_cqe(&ring_, &cqe) : io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EAGAIN || rc == -EINTR) {
        if (got >= min_complete) break;
        continue;
      }
      if (rc < 0) return Status::FromErrno(-rc, "io_uring_wait_cqe");
      IoCompletion c{io_uring_cqe_get_data64(cqe), cqe->res};
      io_uring_cqe_seen(&ring_, cqe);
      if (c.user_data == kWakeupId) {
        --wakeups_;
        out->push_back(c);
        ++got;
        continue;
      }
      auto torn = torn_.find(c.user_data);
      if (torn != torn_.end()) {
        torn_.erase(torn);
        c.result = -EIO;
      }
      out->push_back(c);
      --outstanding_;
      ++got;
    }
    return Status::Ok();
  }

 private:
  unsigned depth_;
  Env* env_;
  io_uring ring_{};
  bool ring_ok_ = false;
  unsigned outstanding_ = 0;
  unsigned wakeups_ = 0;  // armed wakeup reads (outside the depth budget)
  unsigned unposted_ = 0;
  std::vector<IoCompletion> injected_;
  std::unordered_map<uint64_t, bool> torn_;
};

}  // namespace

Result<std::unique_ptr<IoQueue>> NewUringIoQueue(unsigned depth, Env* env) {
  auto q = std::make_unique<UringIoQueue>(depth, env);
  EC_RETURN_IF_ERROR(q->Init());
  return std::unique_ptr<IoQueue>(std::move(q));
}

struct IoService::Job {
  const std::vector<IoRequest>* batch;
  bool track = false;  // the caller wants IoProgress
  // Between the loop and Run's thread:
  Mutex mu;
  CondVar cv;
  bool finished GUARDED_BY(mu) = false;
  bool advanced GUARDED_BY(mu) = false;  // landed moved since Run last looked
  Status result GUARDED_BY(mu);          // once finished
  // Per request: bytes complete from its start (track only).
  std::vector<uint64_t> landed GUARDED_BY(mu);
  // Loop thread only, while the job is active:
  std::deque<Piece> pending;
  unsigned inflight = 0;
  Status status;
  bool reads = false;            // a batch of reads only: its pieces go to the ring first
  unsigned window = 0;           // pieces it may have in flight (0: any number)
  std::vector<uint64_t> prefix;  // landed, before it is published
  std::vector<std::map<uint64_t, uint64_t>> ahead;  // complete pieces past prefix: from -> end
};

Result<std::unique_ptr<IoService>> IoService::Start(Env* env, unsigned depth, uint64_t chunk_bytes,
                                                    unsigned followed_window) {
  auto q = NewUringIoQueue(depth, env);
  if (!q.ok()) return q.status();
  std::unique_ptr<IoService> svc(
      new IoService(std::move(q).value(), chunk_bytes, std::min(followed_window, depth)));
  svc->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (svc->wake_fd_ < 0) return Status::FromErrno(errno, "eventfd");
  svc->thread_ = std::thread([s = svc.get()] { s->Loop(); });
  return svc;
}

IoService::~IoService() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  Wake();
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void IoService::Wake() {
  uint64_t one = 1;
  if (wake_fd_ >= 0 && write(wake_fd_, &one, sizeof(one)) < 0) {
    // EAGAIN: the counter is saturated, so a wakeup is pending anyway
  }
}

Status IoService::Run(const std::vector<IoRequest>& batch, const IoProgress& progress,
                      const IoMeanwhile& meanwhile) {
  if (batch.empty()) return Status::Ok();
  Job job;
  job.batch = &batch;
  job.track = progress != nullptr;
  if (job.track) {
    MutexLock l(&job.mu);  // before the loop sees the job
    job.landed.assign(batch.size(), 0);
  }
  {
    MutexLock l(&mu_);
    if (stop_) return Status::Unavailable("I/O service is shut down");
    jobs_.push_back(&job);
  }
  cv_.NotifyOne();
  Wake();
  if (meanwhile) meanwhile();
  std::vector<uint64_t> given(job.track ? batch.size() : 0), landed;
  UniqueLock l(&job.mu);
  for (;;) {
    while (!(job.finished || job.advanced)) job.cv.Wait(l);
    const bool finished = job.finished;
    if (job.advanced) landed = job.landed;
    job.advanced = false;
    l.unlock();  // the loop goes on landing pieces while this thread looks at them
    for (size_t i = 0; i < landed.size(); ++i)
      if (landed[i] > given[i]) {
        progress(i, given[i], landed[i] - given[i]);
        given[i] = landed[i];
      }
    l.lock();
    if (finished) return job.result;
  }
}

// Splits a batch into pieces small enough that even one small entry fills the ring (at least
// 64 KiB, at most chunk_), or with a window, fills it kFollowedWaves times over; the loop keeps
// the ring (or the window) full and resumes short transfers.
std::deque<IoService::Piece> IoService::Pieces(const std::vector<IoRequest>& batch,
                                               unsigned window) const {
  uint64_t batch_bytes = 0;
  for (const IoRequest& r : batch) batch_bytes += r.len;
  const uint64_t slots = window > 0 ? uint64_t{window} * kFollowedWaves : queue_->depth();
  const uint64_t most = window > 0 ? std::min(chunk_, kFollowedPieceBytes) : chunk_;
  uint64_t chunk = (batch_bytes / slots + 65535) / 65536 * 65536;
  chunk = std::clamp<uint64_t>(chunk, 65536, std::max<uint64_t>(most, 65536));
  std::deque<Piece> pending;
  for (size_t i = 0; i < batch.size(); ++i) {
    const IoRequest& r = batch[i];
    if (r.op == IoOp::kSync) {
      pending.push_back({r, i, 0});
      continue;
    }
    for (uint64_t off = 0; off < r.len; off += chunk) {
      IoRequest p = r;
      p.buf = static_cast<uint8_t*>(r.buf) + off;
      p.offset = r.offset + off;
      p.len = std::min<uint64_t>(chunk, r.len - off);
      pending.push_back({p, i, off});
    }
  }
  return pending;
}

// Several batches run at once. Free ring slots go to read batches first, and writes never
// hold the last kReadSlots of the ring, so a get of a disk entry starts at once instead of
// waiting behind a whole spill batch queued before it.
// Within a batch, pieces go in order, and a sync waits for every piece before it.
void IoService::Loop() {
  std::vector<Job*> active;
  Inflight inflight;
  uint64_t next_id = 1;
  std::vector<IoCompletion> done;
  for (;;) {
    {
      UniqueLock l(&mu_);
      while (!(stop_ || !jobs_.empty() || !active.empty())) cv_.Wait(l);
      if (stop_ && jobs_.empty() && active.empty()) return;
      for (Job* job : jobs_) Activate(job, &active);
      jobs_.clear();
    }
    for (bool reads : {true, false})  // reads first
      for (Job* job : active)
        if (job->reads == reads) Submit(job, &inflight, &next_id);

    if (!inflight.empty()) {
      if (!wake_armed_) wake_armed_ = queue_->ArmWakeup(wake_fd_, &wake_buf_, kWakeupId);
      Status st = queue_->Post();
      if (st.ok()) st = queue_->Poll(&done, 1);
      if (!st.ok()) {  // the ring itself failed: nothing in flight can complete
        for (Job* job : active) Finish(job, st);
        active.clear();
        inflight.clear();
        writes_inflight_ = 0;
        continue;
      }
      for (const IoCompletion& c : done) {
        if (c.user_data == kWakeupId)
          wake_armed_ = false;  // a new batch arrived: picked up at the top of the loop
        else
          Complete(c, &inflight);
      }
      done.clear();
    }
    std::erase_if(active, [](Job* job) {
      if (!job->pending.empty() || job->inflight > 0) return false;
      Finish(job, job->status);
      return true;
    });
  }
}

void IoService::Activate(Job* job, std::vector<Job*>* active) const {
  job->reads = std::all_of(job->batch->begin(), job->batch->end(),
                           [](const IoRequest& r) { return r.op == IoOp::kRead; });
  job->window = job->track && job->reads ? followed_window_ : 0;
  job->pending = Pieces(*job->batch, job->window);
  if (job->track) {
    job->prefix.assign(job->batch->size(), 0);
    job->ahead.resize(job->batch->size());
  }
  active->push_back(job);
}

// Moves the job's next pieces into the ring while it has room.
void IoService::Submit(Job* job, Inflight* inflight, uint64_t* next_id) {
  if (!job->status.ok()) job->pending.clear();  // a failed batch stops at its first error
  const unsigned depth = queue_->depth();
  const unsigned write_slots = depth > 2 * kReadSlots ? depth - kReadSlots : depth;
  while (!job->pending.empty()) {
    if (!job->reads && writes_inflight_ >= write_slots) return;
    if (job->window > 0) {
      // The last window's worth goes a third at a time: what the caller still does once the
      // final piece lands (its copy-out and checksum) then covers a third of the bytes.
      const unsigned cap =
          job->pending.size() > job->window ? job->window : std::max(1u, job->window / 3);
      if (job->inflight >= cap) return;
    }
    Piece p = job->pending.front();
    if (p.req.op == IoOp::kSync && job->inflight > 0) return;  // after the writes before it
    p.req.user_data = *next_id;
    if (!queue_->Enqueue(p.req)) return;
    inflight->emplace((*next_id)++, std::make_pair(job, p));
    ++job->inflight;
    if (!job->reads) ++writes_inflight_;
    job->pending.pop_front();
    if (p.req.op == IoOp::kSync) return;
  }
}

void IoService::Complete(const IoCompletion& c, Inflight* inflight) {
  auto it = inflight->find(c.user_data);
  if (it == inflight->end()) return;
  auto [job, p] = it->second;
  inflight->erase(it);
  --job->inflight;
  if (!job->reads) --writes_inflight_;
  if (c.result < 0) {
    if (job->status.ok())
      job->status = Status::FromErrno(static_cast<int>(-c.result),
                                      p.req.op == IoOp::kRead ? "disk read" : "disk write");
    return;
  }
  if (p.req.op == IoOp::kSync) return;
  uint64_t n = static_cast<uint64_t>(c.result);
  if (n == 0 && p.req.len > 0) {
    if (job->status.ok())
      job->status =
          Status::IOError("unexpected end of file at offset " + std::to_string(p.req.offset));
    return;
  }
  if (job->track) Landed(job, p, n);
  if (n < p.req.len) {  // short transfer: resume the rest
    p.req.buf = static_cast<uint8_t*>(p.req.buf) + n;
    p.req.offset += n;
    p.req.len -= n;
    p.from += n;
    job->pending.push_front(p);
  }
}

// The first n bytes of piece p are complete: moves its request's prefix past every piece
// that now joins it, and tells Run's thread.
void IoService::Landed(Job* job, const Piece& p, uint64_t n) {
  uint64_t& prefix = job->prefix[p.index];
  auto& ahead = job->ahead[p.index];
  if (p.from != prefix) {
    ahead.emplace(p.from, p.from + n);
    return;
  }
  prefix += n;
  for (auto next = ahead.begin(); next != ahead.end() && next->first == prefix;
       next = ahead.erase(next))
    prefix = next->second;
  MutexLock l(&job->mu);
  job->landed[p.index] = prefix;
  job->advanced = true;
  job->cv.NotifyOne();
}

// Ends a job. Run's thread may return (and free the job) as soon as the lock is released.
void IoService::Finish(Job* job, const Status& st) {
  MutexLock l(&job->mu);
  job->finished = true;
  job->result = st;
  job->cv.NotifyOne();
}

}  // namespace ecstore
