// Stream: a connected socket's bytes, in the clear or through a TLS session (net/tls.h).
// The control connection of a Client (FrameStream) and each connection of the Server read
// and write through one, so that neither knows which.
//
//   Stream s;
//   s.Adopt(std::move(fd));
//   s.SetTls(std::move(session));              // after the handshake, if TLS
//   EC_RETURN_IF_ERROR(s.Send(iov, 2, "server"));
//
// Thread rules: used by one thread at a time, as its socket is.
#pragma once

#include <memory>

#include "net/socket.h"
#include "net/tls.h"

namespace ecstore::net {

class Stream {
 public:
  bool valid() const { return fd_.valid(); }
  int fd() const { return fd_.get(); }
  void Adopt(UniqueFd fd) {
    tls_.reset();
    fd_ = std::move(fd);
  }
  // The socket without its TLS session (kept open while leases from it are held).
  UniqueFd Take() {
    tls_.reset();
    return std::move(fd_);
  }
  void reset() {
    tls_.reset();
    fd_.reset();
  }
  void SetTls(std::unique_ptr<TlsSession> session) { tls_ = std::move(session); }
  const TlsSession* tls() const { return tls_.get(); }

  Status Recv(void* buf, size_t n, const char* what, Deadline deadline = Deadline::max()) {
    return tls_ ? tls_->Recv(buf, n, what, deadline) : RecvAll(fd_.get(), buf, n, what, deadline);
  }
  Status Send(iovec* iov, int iovcnt, const char* what, Deadline deadline = Deadline::max()) {
    return tls_ ? tls_->Send(iov, iovcnt, what, deadline)
                : SendAll(fd_.get(), iov, iovcnt, what, deadline);
  }
  // Reads and drops n bytes (a refused request's payload), so the stream stays in step.
  Status Discard(uint64_t n, const char* what, Deadline deadline) {
    if (!tls_) return DiscardBytes(fd_.get(), n, what, deadline);
    char scratch[16 << 10];
    for (uint64_t chunk; n > 0; n -= chunk) {
      chunk = std::min<uint64_t>(n, sizeof(scratch));
      EC_RETURN_IF_ERROR(tls_->Recv(scratch, chunk, what, deadline));
    }
    return Status::Ok();
  }
  // Bytes already decrypted and waiting, which poll() on the socket would not show.
  bool Buffered() const { return tls_ && tls_->Buffered(); }

 private:
  UniqueFd fd_;                      // declared first: closed after the session is freed
  std::unique_ptr<TlsSession> tls_;  // null: in the clear
};

}  // namespace ecstore::net
