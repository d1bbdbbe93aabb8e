// Mutex, MutexLock, UniqueLock and CondVar: std::mutex and std::condition_variable_any with
// clang's thread-safety attributes, so `-Wthread-safety` (`make tsan`)
// checks that data marked GUARDED_BY(mu) is touched only with mu held and that functions
// marked REQUIRES(mu) are called with it. Under GCC the attributes compile to nothing.
// Thread rules: as std::mutex's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define EC_TSA(x) __attribute__((x))
#else
#define EC_TSA(x)
#endif
#define CAPABILITY(x) EC_TSA(capability(x))
#define SCOPED_CAPABILITY EC_TSA(scoped_lockable)
#define GUARDED_BY(x) EC_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) EC_TSA(pt_guarded_by(x))
#define REQUIRES(...) EC_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) EC_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) EC_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) EC_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) EC_TSA(try_acquire_capability(__VA_ARGS__))
#define ACQUIRED_AFTER(...) EC_TSA(acquired_after(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS EC_TSA(no_thread_safety_analysis)

namespace ecstore {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Holds the mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() RELEASE() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// Holds the mutex for its scope, and can let go of it in between (unlock ... lock) or wait
// on a CondVar. `M` is Mutex (UniqueLock) or another capability with lock and unlock.
template <typename M>
class SCOPED_CAPABILITY BasicUniqueLock {
 public:
  explicit BasicUniqueLock(M* mu) ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~BasicUniqueLock() RELEASE() {
    if (held_) mu_->unlock();
  }
  void lock() ACQUIRE() {
    mu_->lock();
    held_ = true;
  }
  void unlock() RELEASE() {
    held_ = false;
    mu_->unlock();
  }
  BasicUniqueLock(const BasicUniqueLock&) = delete;
  BasicUniqueLock& operator=(const BasicUniqueLock&) = delete;

 private:
  M* mu_;
  bool held_ = true;
};
using UniqueLock = BasicUniqueLock<Mutex>;

// Waits release the lock and hold it again when they return; callers loop on their
// condition (in the locked scope, where the analysis can see the lock is held).
// `Lock` is a BasicUniqueLock or a lock made from one.
class CondVar {
 public:
  template <typename Lock>
  void Wait(Lock& l) {
    cv_.wait(l);
  }
  template <typename Lock, typename Clock, typename Duration>
  bool WaitUntil(Lock& l, std::chrono::time_point<Clock, Duration> deadline) {
    return cv_.wait_until(l, deadline) == std::cv_status::no_timeout;
  }
  template <typename Lock, typename Rep, typename Period>
  void WaitFor(Lock& l, std::chrono::duration<Rep, Period> d) {
    cv_.wait_for(l, d);
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace ecstore
