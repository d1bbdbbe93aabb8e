#include "server/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace ecstore::net {

unsigned EventLoop::DefaultWorkers(unsigned cores) {
  return std::clamp(2 * std::max(1u, cores), 8u, 64u);
}

Status EventLoop::Start(unsigned workers, Handler handler) {
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return Status::FromErrno(errno, "epoll_create1");
  wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return Status::FromErrno(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered and never read: it wakes every worker at Stop
  ev.data.ptr = nullptr;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0)
    return Status::FromErrno(errno, "epoll_ctl");
  handler_ = std::move(handler);
  try {
    for (unsigned i = 0; i < std::max(1u, workers); ++i) threads_.emplace_back([this] { Run(); });
  } catch (const std::system_error& e) {
    Stop();
    return Status::Unavailable(std::string("cannot start the server's workers: ") + e.what());
  }
  return Status::Ok();
}

namespace {
Status Control(int epoll, int op, int fd, void* tag, uint32_t events) {
  epoll_event ev{};
  ev.events = events | EPOLLONESHOT | EPOLLRDHUP;
  ev.data.ptr = tag;
  if (epoll_ctl(epoll, op, fd, &ev) != 0) return Status::FromErrno(errno, "epoll_ctl");
  return Status::Ok();
}
}  // namespace

Status EventLoop::Add(int fd, void* tag, uint32_t events) {
  return Control(epoll_.get(), EPOLL_CTL_ADD, fd, tag, events);
}

Status EventLoop::Arm(int fd, void* tag, uint32_t events) {
  return Control(epoll_.get(), EPOLL_CTL_MOD, fd, tag, events);
}

void EventLoop::Forget(int fd) { epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }

void EventLoop::Stop() {
  if (stop_.exchange(true)) return;
  if (wake_.valid()) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_.get(), &one, sizeof(one));
  }
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void EventLoop::Run() {
  // One event per wait: a worker takes one socket, and the others stay for other workers.
  epoll_event ev;
  while (!stop_.load(std::memory_order_acquire)) {
    int n = epoll_wait(epoll_.get(), &ev, 1, -1);
    if (n <= 0 || ev.data.ptr == nullptr) continue;  // EINTR, or the wake at Stop
    busy_.fetch_add(1, std::memory_order_relaxed);
    turns_.fetch_add(1, std::memory_order_relaxed);
    handler_(ev.data.ptr, ev.events);
    busy_.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace ecstore::net
