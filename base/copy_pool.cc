#include "base/copy_pool.h"

#include <algorithm>
#include <cstring>
#include <system_error>

namespace ecstore {

unsigned CopyPool::DefaultThreads(unsigned cores) {
  return cores < 2 ? 0 : std::clamp(cores / 4, 1u, 3u);
}

unsigned CopyPool::ServerThreads(unsigned cores) { return std::min(7u, cores / 2 - (cores >= 2)); }

CopyPool::CopyPool(unsigned threads, size_t piece_bytes)
    : piece_bytes_(std::max<size_t>(piece_bytes, 4096)) {
  // A helper that cannot start (address space or thread limits) is done without: copies run
  // on fewer threads (threads() says how many), never abort the process.
  for (unsigned i = 0; i < threads; ++i) try {
      threads_.emplace_back([this] { Work(); });
    } catch (const std::system_error&) {
      break;
    }
}

CopyPool::~CopyPool() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  wake_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void CopyPool::Copy(const std::vector<Item>& items) {
  size_t total = 0;
  for (const Item& it : items) total += it.n;
  auto here = [&] {
    for (const Item& it : items) std::memcpy(it.dst, it.src, it.n);
  };
  if (threads_.empty() || total < 2 * piece_bytes_) return here();
  if (!job_mu_.TryLock()) return here();  // the helpers are another copy's
  Spread(items);
  job_mu_.unlock();
}

void CopyPool::Spread(const std::vector<Item>& items) {
  UniqueLock l(&mu_);
  while (active_ != 0) done_cv_.Wait(l);  // a late helper of the last job has left
  pieces_.clear();
  for (const Item& it : items)
    for (size_t off = 0; off < it.n; off += piece_bytes_)
      pieces_.push_back({static_cast<uint8_t*>(it.dst) + off,
                         static_cast<const uint8_t*>(it.src) + off,
                         std::min(piece_bytes_, it.n - off)});
  next_ = 0;
  done_ = 0;
  ++gen_;
  const size_t total = pieces_.size();
  l.unlock();
  wake_.NotifyAll();
  const size_t mine = Drain(total);
  l.lock();
  done_ += mine;
  while (!(done_ == total && active_ == 0)) done_cv_.Wait(l);
}

// Copies pieces until none are left; returns how many it copied. pieces_ does not change
// meanwhile: a new job waits until no helper is inside.
size_t CopyPool::Drain(size_t total) {
  size_t finished = 0;
  for (size_t i; (i = next_.fetch_add(1)) < total; ++finished)
    std::memcpy(pieces_[i].dst, pieces_[i].src, pieces_[i].n);
  return finished;
}

void CopyPool::Work() {
  uint64_t seen = 0;
  UniqueLock l(&mu_);
  for (;;) {
    while (!(stop_ || gen_ != seen)) wake_.Wait(l);
    if (stop_) return;
    seen = gen_;
    ++active_;
    const size_t total = pieces_.size();
    l.unlock();
    const size_t mine = Drain(total);
    l.lock();
    done_ += mine;
    --active_;
    done_cv_.NotifyAll();
  }
}

}  // namespace ecstore
