#include "server/request_arrival.h"

#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "net/protocol.h"

namespace ecstore::net {
namespace {
constexpr size_t kBodyWait = 64 << 10;  // larger bodies are read as they come, by deadline
constexpr size_t kTlsRecordHeader = 5;  // type, version, length
}  // namespace

bool RequestArrival::Arrived(int fd, bool greeted) {
  uint8_t peek[kHeaderBytes];
  const size_t head = framing_ == kFrames ? kHeaderBytes : kTlsRecordHeader;
  ssize_t n = recv(fd, peek, head, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // the client hung up: the read says so
  if (n < 0) {
    partial_since_ = {};
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
  if (framing_ == kUnchecked) return true;  // something has come: read it as it comes
  const auto got = static_cast<size_t>(n);
  if (got < head) return Want(fd, head, got);
  size_t want;
  if (framing_ == kTlsRecords) {
    want = kTlsRecordHeader + (static_cast<size_t>(peek[3]) << 8 | peek[4]);
  } else {
    auto h = DecodeHeader(peek);
    if (!h.ok() || (!greeted && h->op != Op::kHello)) return true;  // refused on its header
    const uint64_t cap = h->op == Op::kPut ? kPutPrefixMax : kBodyWait;
    want = kHeaderBytes + static_cast<size_t>(std::min<uint64_t>(h->body_len, cap));
  }
  return Want(fd, want, got);
}

// Whether `want` bytes are waiting (`have` of them seen already); if not, epoll is told to
// wake the socket once they are.
bool RequestArrival::Want(int fd, size_t want, size_t have) {
  int waiting = static_cast<int>(have);
  if (want > have && ioctl(fd, FIONREAD, &waiting) != 0) return true;
  const bool here = static_cast<size_t>(waiting) >= want;
  if (here)
    partial_since_ = {};
  else if (partial_since_ == std::chrono::steady_clock::time_point{})
    partial_since_ = std::chrono::steady_clock::now();
  const int lowat = here ? 1 : static_cast<int>(want);
  if (lowat != lowat_) {
    // Without the raised mark epoll would wake at once, again and again: read by deadline.
    if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)) != 0) return true;
    lowat_ = lowat;
  }
  return here;
}

}  // namespace ecstore::net
