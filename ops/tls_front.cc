#include "ops/tls_front.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <list>
#include <vector>

#include "net/tls.h"

namespace ecstore::ops {
namespace {

using Clock = std::chrono::steady_clock;
using net::HandshakeStep;
// Held per direction and connection: an answer of /metrics passes in a few rounds.
constexpr size_t kBuffer = 256 << 10;

short EventsFor(HandshakeStep wants) {
  return wants == HandshakeStep::kWantWrite ? POLLOUT : POLLIN;
}

// As much of *s as the socket takes now; false where the peer is gone.
bool Flush(int fd, std::string* s) {
  while (!s->empty()) {
    const ssize_t n = send(fd, s->data(), s->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    s->erase(0, static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

class TlsFront::Relay {
  // A member of the relay, not of the file's anonymous namespace: a class with linkage may
  // not hold a field of an unnamed namespace's type (a unity build puts both in one file).
  // One client connection: its handshake, then the bytes both ways.
  struct Link {
    UniqueFd client, backend;
    std::unique_ptr<net::TlsSession> tls;
    bool established = false, backend_done = false;
    HandshakeStep read_wants = HandshakeStep::kWantRead, write_wants = HandshakeStep::kWantRead;
    std::string up, down;  // for the backend; for the client
    Clock::time_point deadline;

    short ClientEvents() const {
      if (!established) return EventsFor(read_wants);
      short ev = up.size() < kBuffer ? EventsFor(read_wants) : 0;
      return static_cast<short>(ev | (down.empty() ? 0 : EventsFor(write_wants)));
    }
    short BackendEvents() const {
      if (!established) return 0;
      return static_cast<short>((down.size() < kBuffer && !backend_done ? POLLIN : 0) |
                                (up.empty() ? 0 : POLLOUT));
    }
    // Decrypted bytes from the client on to the backend.
    bool FromClient() {
      char buf[16384];
      while (up.size() < kBuffer) {
        size_t got = 0;
        auto r = tls->ReadSome(buf, sizeof(buf), &got);
        if (!r.ok()) return false;  // closed by the client, or failed
        if (*r != HandshakeStep::kDone) {
          read_wants = *r;
          break;
        }
        up.append(buf, got);
      }
      return Flush(backend.get(), &up);
    }
    // The backend's answer on to the client; false once it is all sent and the backend closed.
    bool FromBackend() {
      char buf[65536];
      while (down.size() < kBuffer && !backend_done) {
        const ssize_t n = recv(backend.get(), buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0) backend_done = true;
        if (n <= 0) {
          if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
          break;
        }
        down.append(buf, static_cast<size_t>(n));
      }
      while (!down.empty()) {
        size_t wrote = 0;
        auto r = tls->WriteSome(down.data(), down.size(), &wrote);
        if (!r.ok()) return false;
        if (*r != HandshakeStep::kDone) {
          write_wants = *r;
          break;
        }
        down.erase(0, wrote);
      }
      return !(backend_done && down.empty());
    }
  };

 public:
  Relay(UniqueFd listening, uint16_t port, TlsFrontOptions o, std::shared_ptr<net::TlsContext> ctx,
        UniqueFd wake)
      : listen_(std::move(listening)),
        port_(port),
        opt_(std::move(o)),
        ctx_(std::move(ctx)),
        wake_(std::move(wake)) {}

  void Run() {
    std::vector<pollfd> fds;
    while (!stop_.load()) {
      fds.clear();
      fds.push_back({listen_.get(), POLLIN, 0});
      fds.push_back({wake_.get(), POLLIN, 0});
      bool buffered = false;
      for (const auto& l : links_) {
        fds.push_back({l.client.get(), l.ClientEvents(), 0});
        fds.push_back({l.backend.valid() ? l.backend.get() : -1, l.BackendEvents(), 0});
        buffered |= l.established && l.up.size() < kBuffer && l.tls->Buffered();
      }
      poll(fds.data(), fds.size(), buffered ? 0 : 100);
      const auto now = Clock::now();
      size_t i = 2;
      for (auto it = links_.begin(); it != links_.end(); i += 2) {
        const bool moved = fds[i].revents || fds[i + 1].revents || it->tls->Buffered();
        const bool keep = moved ? Serve(*it, now) : now < it->deadline;
        it = keep ? std::next(it) : links_.erase(it);
      }
      if (fds[0].revents & POLLIN) Accept(now);
    }
    links_.clear();
  }

  void Stop() {
    stop_.store(true);
    const uint64_t one = 1;
    if (write(wake_.get(), &one, sizeof(one)) < 0) spdlog::debug("waking the TLS front failed");
  }

 private:
  void Accept(Clock::time_point now) {
    for (;;) {
      UniqueFd fd(accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd.valid()) return;
      if (links_.size() >= opt_.max_connections) continue;  // closed at once
      auto tls = net::TlsSession::Begin(ctx_, fd.get());
      if (!tls.ok()) continue;
      Link& l = links_.emplace_back();
      l.client = std::move(fd);
      l.tls = std::move(tls).value();
      l.deadline = now + opt_.handshake_deadline;
    }
  }

  // False: the connection ends (refused, failed, closed, or past its deadline).
  bool Serve(Link& l, Clock::time_point now) {
    if (!l.established) {
      if (now >= l.deadline) return false;
      auto step = l.tls->Step();
      if (!step.ok()) {
        spdlog::debug("operator port: TLS handshake failed: {}", step.status().message());
        return false;
      }
      if (*step != HandshakeStep::kDone) {
        l.read_wants = *step;
        return true;
      }
      auto b = net::ConnectTcp({"127.0.0.1", port_}, std::chrono::milliseconds(1000));
      if (!b.ok()) return false;
      l.backend = std::move(b).value();
      fcntl(l.backend.get(), F_SETFL, fcntl(l.backend.get(), F_GETFL) | O_NONBLOCK);
      l.established = true;
    }
    l.deadline = now + opt_.idle;
    return l.FromClient() && l.FromBackend();
  }

  UniqueFd listen_;
  const uint16_t port_;
  const TlsFrontOptions opt_;
  std::shared_ptr<net::TlsContext> ctx_;
  UniqueFd wake_;
  std::atomic<bool> stop_{false};
  std::list<Link> links_;  // the front's thread only
};

Result<std::unique_ptr<TlsFront>> TlsFront::Start(UniqueFd listening, uint16_t backend_port,
                                                  TlsFrontOptions o) {
  net::TlsOptions t;
  t.cert = o.cert;
  t.key = o.key;
  auto ctx = net::TlsContext::ForServer(t);
  if (!ctx.ok()) return ctx.status();
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Status::IOError(std::string("eventfd: ") + std::strerror(errno));
  fcntl(listening.get(), F_SETFL, fcntl(listening.get(), F_GETFL) | O_NONBLOCK);
  std::unique_ptr<TlsFront> f(new TlsFront());
  f->relay_ = std::make_unique<Relay>(std::move(listening), backend_port, std::move(o),
                                      std::move(ctx).value(), std::move(wake));
  f->thread_ = std::thread([r = f->relay_.get()] { r->Run(); });
  return f;
}

TlsFront::~TlsFront() { Stop(); }

void TlsFront::Stop() {
  if (!relay_) return;
  relay_->Stop();
  if (thread_.joinable()) thread_.join();
  relay_.reset();
}

}  // namespace ecstore::ops
