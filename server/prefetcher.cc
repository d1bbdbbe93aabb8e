#include "server/prefetcher.h"

#include <spdlog/spdlog.h>

namespace ecstore::net {

bool Prefetcher::Queue(std::string ns, std::vector<std::string> keys) {
  MutexLock l(&mu_);
  if (stop_ || queued_keys_ + keys.size() > kMaxQueuedKeys) {
    ++counters_.dropped;
    return false;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  queued_keys_ += keys.size();
  ++counters_.hints;
  queue_.emplace_back(std::move(ns), std::move(keys));
  cv_.NotifyOne();
  return true;
}

void Prefetcher::Stop() {
  std::thread t;
  {
    MutexLock l(&mu_);
    stop_ = true;
    queue_.clear();
    t = std::move(thread_);
  }
  cv_.NotifyOne();
  if (t.joinable()) t.join();
}

Prefetcher::Counters Prefetcher::counters() const {
  MutexLock l(&mu_);
  return counters_;
}

// One hint at a time, off the lock: Store::Prefetch reads the disk-only entries of its keys
// in one batch. Busy (no free room for some) and errors are a hint's to lose; errors are
// logged at debug level, as the reads that follow report their own.
void Prefetcher::Loop() {
  for (;;) {
    std::pair<std::string, std::vector<std::string>> hint;
    {
      UniqueLock l(&mu_);
      while (!stop_ && queue_.empty()) cv_.Wait(l);
      if (stop_) return;
      hint = std::move(queue_.front());
      queue_.pop_front();
    }
    Result<bool> done = store_->Prefetch(hint.first, hint.second);
    if (!done.ok())
      spdlog::debug("prefetch of {} keys: {}", hint.second.size(), done.status().ToString());
    MutexLock l(&mu_);
    queued_keys_ -= hint.second.size();
    ++counters_.done;
  }
}

Result<Answer> AnswerPrefetch(Prefetcher* prefetcher, BodyReader* r) {
  auto req = ParseKeysBody(r);
  if (!req.ok()) return req.status();
  Status bad;  // the namespace was checked by ParseKeysBody
  for (size_t i = 0; bad.ok() && i < req->keys.size(); ++i) bad = ValidateKey(req->keys[i]);
  if (!bad.ok()) return Answer{bad, Op::kOk, ""};
  BodyWriter w;
  w.U8(prefetcher->Queue(std::move(req->ns), std::move(req->keys)) ? 1 : 0);
  return Answer{Status::Ok(), Op::kOk, w.data()};
}

}  // namespace ecstore::net
