// TLS for the TCP data port (OpenSSL 3): a context per side, and a session per connection.
// The server's context holds its certificate and key and, with a CA, asks for client
// certificates; a client's holds the CA it trusts and, for mutual TLS, its own pair.
// Sessions move a connection's bytes; where the kernel and OpenSSL allow (kTLS) the
// kernel encrypts the sending side, so a get still leaves the pool in one sendmsg.
//
//   auto ctx = TlsContext::ForServer({.cert = "s.crt", .key = "s.key", .ca = "ca.crt"});
//   auto s = TlsSession::Accept(*ctx, fd, deadline);   // server
//   auto c = TlsSession::Connect(*cctx, fd, "node-1", deadline);   // client, name verified
//   EC_RETURN_IF_ERROR(c->Send(iov, 2, "server", deadline));
//
// Thread rules: a TlsContext is immutable once made and may be shared by any threads (the
// server swaps in a new one to rotate its certificate); a TlsSession is used by one thread
// at a time, as its socket is.
#pragma once

#include <signal.h>
#include <sys/uio.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "net/socket.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct x509_st X509;

namespace ecstore::net {

// Whether a server asks for client certificates: required (a client without one, or with
// one the CA did not sign, is refused), optional (verified when sent), no (not asked for).
enum class ClientAuth { kRequired, kOptional, kNo };
Result<ClientAuth> ParseClientAuth(std::string_view text);

struct TlsOptions {
  // Server: its certificate chain and key (PEM); with `ca`, client certificates are asked
  // for and verified against it (ClientAuth). Client: `ca` is the CA it trusts (empty: the
  // system's), `cert` and `key` its own pair for a server that asks for one.
  std::string cert;
  std::string key;
  std::string ca;
  ClientAuth client_auth = ClientAuth::kRequired;  // server, with a ca
  // Client: the name the server's certificate must carry (DNS SAN or CN, or an IP SAN);
  // empty: the host connected to. Never skipped: there is no option to.
  std::string server_name;
  // Client: where set, the server's certificate must carry this URI SAN, and no host name,
  // address or CN proves it instead (a cluster member's identity: server_name is ignored).
  std::string server_uri;
};

// Whether `cert` carries `uri` as a subjectAltName URI, compared byte for byte.
bool CarriesUri(X509* cert, const std::string& uri);
// Whether the PEM certificate in `file` does; IOError where the file does not read as one.
Result<bool> CertificateCarriesUri(const std::string& file, const std::string& uri);

class TlsContext {
 public:
  // Fails with InvalidArgument naming the file and what is wrong with it (unreadable, not
  // PEM, a key that does not match the certificate).
  static Result<std::shared_ptr<TlsContext>> ForServer(const TlsOptions& o);
  static Result<std::shared_ptr<TlsContext>> ForClient(const TlsOptions& o);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  SSL_CTX* get() const { return ctx_; }
  const TlsOptions& options() const { return opt_; }
  // The certificate's subject CN and its not-after time (for logs and stats).
  const std::string& subject() const { return subject_; }
  const std::string& not_after() const { return not_after_; }
  int64_t not_after_unix() const { return not_after_unix_; }  // seconds; 0: unknown

 private:
  TlsContext(SSL_CTX* ctx, TlsOptions o) : ctx_(ctx), opt_(std::move(o)) {}
  static Result<std::shared_ptr<TlsContext>> Make(bool server, const TlsOptions& o);
  SSL_CTX* ctx_;
  const TlsOptions opt_;
  std::string subject_, not_after_;
  int64_t not_after_unix_ = 0;
};

// Who the peer's verified certificate names: its subject CN and its DNS SANs.
struct PeerIdentity {
  std::string cn;
  std::vector<std::string> dns;
  bool Names(const std::string& name) const;
};

// Where a handshake driven step by step (an event loop's) stands.
enum class HandshakeStep { kDone, kWantRead, kWantWrite };

class TlsSession {
 public:
  // The handshake on a connected blocking socket, bounded by `deadline`. Failures are
  // Unavailable (the peer) or PermissionDenied (a certificate refused), with OpenSSL's
  // reason and what to do.
  static Result<std::unique_ptr<TlsSession>> Accept(std::shared_ptr<TlsContext> ctx, int fd,
                                                    Deadline deadline);
  static Result<std::unique_ptr<TlsSession>> Connect(std::shared_ptr<TlsContext> ctx, int fd,
                                                     const std::string& host, Deadline deadline);
  // Server, driven by an event loop: a session on `fd` whose handshake Step advances, each
  // call never blocking; kWantRead/kWantWrite: call again once the socket is ready for it.
  // The caller bounds the whole by its own deadline. Failures as Accept's.
  static Result<std::unique_ptr<TlsSession>> Begin(std::shared_ptr<TlsContext> ctx, int fd);
  Result<HandshakeStep> Step();
  // On a non-blocking socket, once established: as much as is ready, into *done bytes
  // (kDone with *done > 0), or what the session waits for (kWantRead/kWantWrite, *done 0).
  // ReadSome's end of stream is Unavailable("closed"). WriteSome may take part of `n`; a
  // retry after kWant* passes the same bytes again, possibly with more after them.
  Result<HandshakeStep> ReadSome(void* buf, size_t n, size_t* done);
  Result<HandshakeStep> WriteSome(const void* buf, size_t n, size_t* done);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  Status Recv(void* buf, size_t n, const char* what, Deadline deadline);
  // Small pieces are gathered into one record; with kTLS sending, one sendmsg of the iovecs.
  Status Send(iovec* iov, int iovcnt, const char* what, Deadline deadline);
  // Bytes already decrypted and waiting: poll() on the socket would not see them.
  bool Buffered() const;
  bool ktls_send() const { return ktls_send_; }
  bool ktls_recv() const { return ktls_recv_; }
  const char* version() const;
  const char* cipher() const;
  // The peer's verified certificate, if it sent one.
  const PeerIdentity* peer() const { return has_peer_ ? &peer_ : nullptr; }

 private:
  TlsSession(std::shared_ptr<TlsContext> ctx, SSL* ssl, int fd)
      : ctx_(std::move(ctx)), ssl_(ssl), fd_(fd) {}
  Status Handshake(bool server, Deadline deadline);
  Result<HandshakeStep> Try(bool server);
  void Established();
  Status Write(const void* p, size_t n, const char* what, Deadline deadline);
  static Status ReadFailure(const char* what, const std::string& why);
  std::shared_ptr<TlsContext> ctx_;  // kept while the session lives
  SSL* ssl_;
  int fd_;
  bool ktls_send_ = false, ktls_recv_ = false;
  bool has_peer_ = false;
  PeerIdentity peer_;
};

// OpenSSL writes to its socket with write(2), not send(MSG_NOSIGNAL): a peer that has gone
// would raise SIGPIPE and end the process. While one of these lives, SIGPIPE is blocked in
// this thread, and one that came is taken before the mask is restored (as libcurl does).
class ScopedNoSigpipe {
 public:
  ScopedNoSigpipe();
  ~ScopedNoSigpipe();
  ScopedNoSigpipe(const ScopedNoSigpipe&) = delete;
  ScopedNoSigpipe& operator=(const ScopedNoSigpipe&) = delete;

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

// Whether this kernel offers TLS to sockets at all (the `tls` upper-layer protocol), for
// saying why kTLS is off.
bool KernelHasTls();

}  // namespace ecstore::net
