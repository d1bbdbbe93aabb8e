#include "server/acceptor.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "net/protocol.h"

namespace ecstore::net {

Status Acceptor::Start(int tcp_fd, int unix_fd, Adopt adopt, std::function<void()> tick) {
  tcp_ = tcp_fd;
  unix_ = unix_fd;
  adopt_ = std::move(adopt);
  tick_ = std::move(tick);
  reserve_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& e) {
    return Status::Unavailable(std::string("cannot start the acceptor: ") + e.what());
  }
  return Status::Ok();
}

void Acceptor::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Acceptor::Refuse(int fd, const std::string& why) {
  uint8_t hdr[kHeaderBytes];
  const std::string body = ErrorBody(Status::Busy(why));
  EncodeHeader({kVersion, Op::kError, 0, body.size()}, hdr);
  iovec iov[2] = {{hdr, kHeaderBytes}, {const_cast<char*>(body.data()), body.size()}};
  SendAll(fd, iov, 2, "client", std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
  ::shutdown(fd, SHUT_RDWR);
}

void Acceptor::Warn(const std::string& what) {
  auto now = std::chrono::steady_clock::now();
  if (now - last_warning_ < std::chrono::seconds(10)) return;
  last_warning_ = now;
  spdlog::warn("{}", what);
}

void Acceptor::Run() {
  auto next_tick = std::chrono::steady_clock::now();
  while (!stop_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_tick) {
      tick_();
      next_tick = now + std::chrono::milliseconds(100);
    }
    pollfd p[2] = {{tcp_, POLLIN, 0}, {unix_, POLLIN, 0}};
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - now).count() + 1;
    if (poll(p, unix_ >= 0 ? 2 : 1, static_cast<int>(wait)) <= 0) continue;
    if (p[0].revents & POLLIN) AcceptOne(tcp_, false);
    if (unix_ >= 0 && (p[1].revents & POLLIN)) AcceptOne(unix_, true);
  }
}

void Acceptor::AcceptOne(int listener, bool unix_socket) {
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof(peer);
  int raw = accept4(listener, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
  if (raw < 0) {
    if (errno != EMFILE && errno != ENFILE) return;
    Warn("out of file descriptors: refusing new clients (raise `ulimit -n`)");
    if (!reserve_.valid()) reserve_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!reserve_.valid()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // closing frees some
      return;
    }
    reserve_.reset();
    int c = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) {
      Refuse(c, "server is out of file descriptors; try again later");
      ::close(c);  // before the reserve is taken back
    }
    reserve_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    return;
  }
  UniqueFd fd(raw);
  std::string name = PeerName(raw, peer);
  const std::string why = adopt_(&fd, name, unix_socket);
  if (why.empty()) return;
  Warn("refusing new clients: " + why);
  Refuse(fd.get(), why);
}

}  // namespace ecstore::net
