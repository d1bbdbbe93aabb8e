#include "cluster/fan_out.h"

#include <algorithm>

namespace ecstore::cluster {

FanOut::FanOut(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
}

FanOut::~FanOut() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  wake_.NotifyAll();
  for (auto& t : threads_) t.join();
}

// Never freed: a part may still run while the process's static destructors do.
FanOut& FanOut::Process() {
  static FanOut* pool = new FanOut(std::clamp(2 * std::thread::hardware_concurrency(), 4u, 32u));
  return *pool;
}

void FanOut::Finished(Job* job) {
  if (++job->done == job->parts->size()) finished_.NotifyAll();
}

void FanOut::Run(const std::vector<std::function<void()>>& parts) {
  if (parts.empty()) return;
  Job job{&parts};
  UniqueLock l(&mu_);
  if (parts.size() > 1) {
    queue_.push_back(&job);
    wake_.NotifyAll();
  }
  while (job.next < parts.size()) {
    const size_t at = job.next++;
    if (job.next == parts.size()) std::erase(queue_, &job);
    l.unlock();
    parts[at]();
    l.lock();
    Finished(&job);
  }
  while (job.done < parts.size()) finished_.Wait(l);
}

void FanOut::Work() {
  UniqueLock l(&mu_);
  while (true) {
    while (!stop_ && queue_.empty()) wake_.Wait(l);
    if (stop_) return;
    Job* job = queue_.front();
    const size_t at = job->next++;
    if (job->next == job->parts->size()) queue_.pop_front();
    l.unlock();
    (*job->parts)[at]();
    l.lock();
    Finished(job);
  }
}

}  // namespace ecstore::cluster
