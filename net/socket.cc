#include "net/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

namespace ecstore::net {

Result<HostPort> ParseHostPort(std::string_view text) {
  if (text.rfind("tcp://", 0) == 0 || IsTlsAddress(text)) text.remove_prefix(6);
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return Status::InvalidArgument("address '" + std::string(text) +
                                   "' must be HOST:PORT, as 127.0.0.1:7070 or [::1]:7070");
  HostPort hp;
  hp.host = std::string(text.substr(0, colon));
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);  // [IPv6]
  std::string_view p = text.substr(colon + 1);
  unsigned v = 0;
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (ec != std::errc() || ptr != p.data() + p.size() || v > 65535)
    return Status::InvalidArgument("bad port in '" + std::string(text) + "'");
  hp.port = static_cast<uint16_t>(v);
  return hp;
}

namespace {
struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const { return ss.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&ss); }
};

bool IsLoopbackAddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

// Every address the host resolves to, IPv4 and IPv6.
Result<std::vector<SockAddr>> ResolveAll(const HostPort& hp) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(hp.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    return Status::InvalidArgument("cannot resolve host '" + hp.host + "': " + gai_strerror(rc));
  std::vector<SockAddr> out;
  for (addrinfo* a = res; a; a = a->ai_next) {
    SockAddr s;
    std::memcpy(&s.ss, a->ai_addr, a->ai_addrlen);
    s.len = a->ai_addrlen;
    if (s.family() == AF_INET) reinterpret_cast<sockaddr_in*>(&s.ss)->sin_port = htons(hp.port);
    if (s.family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&s.ss)->sin6_port = htons(hp.port);
    out.push_back(s);
  }
  freeaddrinfo(res);
  return out;
}

// The first address: IPv4 first where the host has both (as the store always did).
Result<SockAddr> Resolve(const HostPort& hp) {
  auto all = ResolveAll(hp);
  if (!all.ok()) return all.status();
  for (const SockAddr& s : *all)
    if (s.family() == AF_INET) return s;
  return all->front();
}
}  // namespace

// Decided on what the name resolves to, never on its spelling: "127.x.example.com" may point
// anywhere. Loopback only when every address is 127.0.0.0/8 or ::1.
bool IsLoopback(const std::string& host) {
  auto all = ResolveAll({host, 0});
  if (!all.ok() || all->empty()) return false;
  for (const SockAddr& s : *all)
    if (!IsLoopbackAddr(s.get())) return false;
  return true;
}

Result<UniqueFd> Listen(const HostPort& at, uint16_t* bound_port, bool* loopback) {
  auto sa = Resolve(at);
  if (!sa.ok()) return sa.status();
  if (loopback) *loopback = IsLoopbackAddr(sa->get());
  UniqueFd fd(socket(sa->family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), sa->get(), sa->len) != 0)
    return Status::Unavailable("cannot listen on " + at.host + ":" + std::to_string(at.port) +
                               ": " + std::strerror(errno) + " (pick another port)");
  if (listen(fd.get(), 64) != 0) return Status::FromErrno(errno, "listen");
  SockAddr got;
  got.len = sizeof(got.ss);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&got.ss), &got.len);
  *bound_port = ntohs(got.family() == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got.ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&got.ss)->sin_port);
  return fd;
}

void SetTimeouts(int fd, std::chrono::milliseconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Result<UniqueFd> ConnectTcp(const HostPort& to, std::chrono::milliseconds timeout) {
  auto sa = Resolve(to);
  if (!sa.ok()) return sa.status();
  UniqueFd fd(socket(sa->family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket");
  std::string where = to.host + ":" + std::to_string(to.port);
  if (connect(fd.get(), sa->get(), sa->len) != 0) {
    if (errno != EINPROGRESS)
      return Status::Unavailable("cannot connect to " + where + ": " + std::strerror(errno) +
                                 " (is `ec-store serve` running there?)");
    pollfd p{fd.get(), POLLOUT, 0};
    int rc = poll(&p, 1, static_cast<int>(timeout.count()));
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc <= 0 || err != 0)
      return Status::Unavailable("cannot connect to " + where + ": " +
                                 (rc == 0 ? "timed out" : std::strerror(err ? err : errno)) +
                                 " (is `ec-store serve` running there?)");
  }
  int flags = fcntl(fd.get(), F_GETFL);
  fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  SetTimeouts(fd.get(), timeout);
  return fd;
}

static Result<sockaddr_un> UnixAddr(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path))
    return Status::InvalidArgument("socket path '" + path + "' is longer than " +
                                   std::to_string(sizeof(sa.sun_path) - 1) +
                                   " bytes; use a shorter store directory path");
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  return sa;
}

Result<UniqueFd> ListenUnix(const std::string& path, mode_t mode) {
  auto sa = UnixAddr(path);
  if (!sa.ok()) return sa.status();
  ::unlink(path.c_str());  // a stale socket of a previous run
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket");
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&*sa), sizeof(*sa)) != 0 ||
      ::chmod(path.c_str(), mode) != 0 || listen(fd.get(), 64) != 0)
    return Status::FromErrno(errno, "listen on " + path);
  return fd;
}

Result<UniqueFd> ConnectUnix(const std::string& path, std::chrono::milliseconds timeout) {
  auto sa = UnixAddr(path);
  if (!sa.ok()) return sa.status();
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket");
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&*sa), sizeof(*sa)) != 0)
    return Status::Unavailable("cannot connect to " + path + ": " + std::strerror(errno) +
                               " (is `ec-store serve` running on this host?)");
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

Status SendWithFd(int fd, iovec* iov, int iovcnt, int pass_fd, const char* what) {
  msghdr msg{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(iovcnt);
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  ssize_t sent;
  do {
    sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return Status::Unavailable(std::string(what) + ": " + std::strerror(errno));
  // The descriptor went with the first byte; send whatever is left plainly.
  size_t left = static_cast<size_t>(sent);
  while (iovcnt > 0 && left >= iov->iov_len) {
    left -= iov->iov_len;
    ++iov;
    --iovcnt;
  }
  if (iovcnt == 0) return Status::Ok();
  iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
  iov->iov_len -= left;
  return SendAll(fd, iov, iovcnt, what);
}

Status RecvAllWithFd(int fd, void* buf, size_t n, int* got_fd, const char* what) {
  *got_fd = -1;
  iovec iov{buf, n};
  msghdr msg{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got <= 0) return Status::Unavailable(std::string(what) + " closed the connection");
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      std::memcpy(got_fd, CMSG_DATA(c), sizeof(int));
  return RecvAll(fd, static_cast<uint8_t*>(buf) + got, n - static_cast<size_t>(got), what);
}

namespace {
// Waits until fd is ready for `events` or the deadline passes (false). No deadline: true.
bool WaitReady(int fd, short events, Deadline deadline) {
  if (deadline == Deadline::max()) return true;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the call itself report the error
  }
}
}  // namespace

Status DiscardBytes(int fd, uint64_t n, const char* what, Deadline deadline) {
  char scratch[64 << 10];
  while (n > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, sizeof(scratch)));
    EC_RETURN_IF_ERROR(RecvAll(fd, scratch, chunk, what, deadline));
    n -= chunk;
  }
  return Status::Ok();
}

std::string PeerName(int fd, const sockaddr_storage& sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<const sockaddr_in6*>(&sa);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in->sin6_port));
  }
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
    return "unix pid " + std::to_string(cred.pid);
  return "unix";
}

Status RecvAll(int fd, void* buf, size_t n, const char* what, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    if (!WaitReady(fd, POLLIN, deadline))
      return Status::Unavailable(std::string(what) + " did not send the whole frame in time");
    ssize_t got = recv(fd, p, n, 0);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) return Status::Unavailable(std::string(what) + " closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return Status::Unavailable(std::string(what) + " did not answer in time");
    return Status::Unavailable(std::string(what) + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status SendAll(int fd, iovec* iov, int iovcnt, const char* what, Deadline deadline) {
  while (iovcnt > 0) {
    if (!WaitReady(fd, POLLOUT, deadline))
      return Status::Unavailable(std::string(what) + " did not take the whole reply in time");
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return Status::Unavailable(std::string(what) + " stopped reading (send timed out)");
      return Status::Unavailable(std::string(what) + ": " + std::strerror(errno));
    }
    size_t left = static_cast<size_t>(sent);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Status::Ok();
}

}  // namespace ecstore::net
