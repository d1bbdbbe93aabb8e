// EventLoop: many sockets on one epoll set, served by a fixed pool of worker threads. Each
// socket is armed one-shot, so exactly one worker gets it when it becomes ready; that worker
// serves it (blocking calls are allowed, each bounded by a deadline) and then arms it again
// for what it waits for next, or forgets it. An idle socket costs no thread, and the number
// of threads does not grow with the number of sockets. There is no hand-off between a
// readiness thread and a worker: the worker that epoll wakes is the one that serves.
//
//   EventLoop loop;
//   EC_RETURN_IF_ERROR(loop.Start(8, [&](void* tag, uint32_t events) { Serve(tag); }));
//   EC_RETURN_IF_ERROR(loop.Add(fd, conn, EPOLLIN));  // one-shot
//   loop.Arm(fd, conn, EPOLLIN);                       // after each turn
//   loop.Forget(fd);                                   // before closing fd
//   loop.Stop();                                       // joins the workers
//
// Thread rules: Add/Arm/Forget from any thread; the handler runs on the workers, for one tag
// at a time while the tag's socket is only ever armed one-shot; Start/Stop from the owner.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "base/status.h"
#include "net/socket.h"

namespace ecstore::net {

class EventLoop {
 public:
  using Handler = std::function<void(void* tag, uint32_t events)>;
  EventLoop() = default;
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  ~EventLoop() { Stop(); }

  // Workers for a machine of `cores`: twice the cores, at least 8 (a worker may wait on a
  // client's bytes for a while) and at most 64.
  static unsigned DefaultWorkers(unsigned cores);
  // Starts `workers` threads; handler(tag, epoll events) runs on them.
  Status Start(unsigned workers, Handler handler);
  // Watches fd one-shot for `events` (EPOLLIN, EPOLLOUT); ready hang-ups and errors always.
  Status Add(int fd, void* tag, uint32_t events);
  // Watches it again after a turn.
  Status Arm(int fd, void* tag, uint32_t events);
  void Forget(int fd);
  // Wakes and joins the workers; the sockets stay open, each with whoever owns it.
  void Stop();

  unsigned workers() const { return static_cast<unsigned>(threads_.size()); }
  unsigned busy() const { return busy_.load(std::memory_order_relaxed); }
  // Turns served since Start (each a socket that became ready).
  uint64_t turns() const { return turns_.load(std::memory_order_relaxed); }

 private:
  void Run();
  UniqueFd epoll_;
  UniqueFd wake_;  // an eventfd, level-triggered: once written, every worker sees it
  Handler handler_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<unsigned> busy_{0};
  std::atomic<uint64_t> turns_{0};
};

}  // namespace ecstore::net
