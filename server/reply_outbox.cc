#include "server/reply_outbox.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ecstore::net {

Result<bool> Outbox::Push(int fd, std::chrono::milliseconds stall, Clock::duration budget) {
  const auto start = Clock::now();
  while (sent_ < total_) {
    iovec iov[2];
    int n = 0;
    if (sent_ < head_.size()) iov[n++] = {head_.data() + sent_, head_.size() - sent_};
    const uint64_t from = sent_ > head_.size() ? sent_ - head_.size() : 0;
    if (lease_.size() > from)
      iov[n++] = {const_cast<uint8_t*>(lease_.data()) + from, lease_.size() - from};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t put = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (put > 0) {
      sent_ += static_cast<uint64_t>(put);
      continue;
    }
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return Status::Unavailable(std::string("client: ") + std::strerror(errno));
    const auto now = Clock::now();
    if (now >= by_) return Status::Unavailable("client did not take the whole reply in time");
    const auto left = budget - (now - start);
    if (left <= Clock::duration::zero()) return false;
    const auto wait = std::min<Clock::duration>(stall, left);
    pollfd p{fd, POLLOUT, 0};
    int rc = poll(&p, 1,
                  static_cast<int>(std::max<int64_t>(
                      1, std::chrono::ceil<std::chrono::milliseconds>(wait).count())));
    if (rc == 0) return false;  // the reader stalled: the event loop takes it from here
  }
  lease_ = ReadLease();  // sent: eviction may have these bytes now
  return true;
}

}  // namespace ecstore::net
