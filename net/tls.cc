#include "net/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

namespace ecstore::net {
namespace {

// OpenSSL's queued reasons, oldest first, or `fallback`.
std::string SslErrors(const char* fallback) {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    const char* reason = ERR_reason_error_string(e);
    if (!out.empty()) out += "; ";
    out += reason ? reason : buf;
  }
  return out.empty() ? fallback : out;
}

bool Readable(const std::string& path, std::string* why) {
  std::ifstream f(path);
  if (f) return true;
  *why = std::string("cannot be read: ") + std::strerror(errno);
  return false;
}

Status FileError(const char* what, const std::string& path, const std::string& why,
                 const char* fix) {
  return Status::InvalidArgument(std::string("TLS ") + what + " " + path + " " + why + " (" + fix +
                                 ")");
}

std::string TimeText(const ASN1_TIME* t) {
  BIO* b = BIO_new(BIO_s_mem());
  ASN1_TIME_print(b, t);
  char* p = nullptr;
  long n = BIO_get_mem_data(b, &p);
  std::string s(p, static_cast<size_t>(n));
  BIO_free(b);
  return s;
}

std::string SubjectCn(X509* x) {
  char buf[256] = "";
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf, sizeof(buf)) < 0)
    return "";
  return buf;
}

// Waits for the socket as SSL asked (want read or write); false at the deadline.
bool WaitFor(int fd, int ssl_error, Deadline deadline) {
  short ev = ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
  auto left = deadline == Deadline::max() ? std::chrono::milliseconds(-1)
                                          : std::chrono::duration_cast<std::chrono::milliseconds>(
                                                deadline - std::chrono::steady_clock::now());
  if (deadline != Deadline::max() && left.count() <= 0) return false;
  pollfd p{fd, ev, 0};
  int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
  return rc != 0;
}

bool IsIpAddress(const std::string& name) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, name.c_str(), &a4) == 1 || inet_pton(AF_INET6, name.c_str(), &a6) == 1;
}

}  // namespace

Result<ClientAuth> ParseClientAuth(std::string_view text) {
  if (text == "required" || text == "yes") return ClientAuth::kRequired;
  if (text == "optional") return ClientAuth::kOptional;
  if (text == "no") return ClientAuth::kNo;
  return Status::InvalidArgument("--tls-auth-clients is '" + std::string(text) +
                                 "': give required, optional or no");
}

bool PeerIdentity::Names(const std::string& name) const {
  return name == cn || std::find(dns.begin(), dns.end(), name) != dns.end();
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

// TLS 1.2 at least, and kTLS where the kernel and the cipher allow it.
Result<std::shared_ptr<TlsContext>> TlsContext::Make(bool server, const TlsOptions& o) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) return Status::IOError("SSL_CTX_new: " + SslErrors("out of memory"));
  std::shared_ptr<TlsContext> c(new TlsContext(ctx, o));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
#ifdef SSL_OP_ENABLE_KTLS
  SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS);
#endif
  return c;
}

Result<std::shared_ptr<TlsContext>> TlsContext::ForServer(const TlsOptions& o) {
  std::string why;
  if (o.cert.empty() || o.key.empty())
    return Status::InvalidArgument(
        "TLS needs both a certificate and a key (--tls-cert, --tls-key)");
  if (!Readable(o.cert, &why)) return FileError("certificate", o.cert, why, "check --tls-cert");
  if (!Readable(o.key, &why)) return FileError("key", o.key, why, "check --tls-key");
  auto made = Make(true, o);
  if (!made.ok()) return made.status();
  std::shared_ptr<TlsContext> c = std::move(made).value();
  SSL_CTX* ctx = c->ctx_;
  if (SSL_CTX_use_certificate_chain_file(ctx, o.cert.c_str()) != 1)
    return FileError("certificate", o.cert, "is not a PEM certificate: " + SslErrors("unreadable"),
                     "give the PEM file openssl wrote");
  if (SSL_CTX_use_PrivateKey_file(ctx, o.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    const std::string why = SslErrors("unreadable");
    return FileError("key", o.key,
                     why.find("mismatch") != std::string::npos
                         ? "does not match certificate " + o.cert
                         : "is not a PEM private key: " + why,
                     "give the PEM key the certificate was issued for");
  }
  if (SSL_CTX_check_private_key(ctx) != 1)
    return FileError("key", o.key, "does not match certificate " + o.cert,
                     "give the key the certificate was issued for");
  if (!o.ca.empty()) {
    if (!Readable(o.ca, &why)) return FileError("CA", o.ca, why, "check --tls-ca");
    if (SSL_CTX_load_verify_locations(ctx, o.ca.c_str(), nullptr) != 1)
      return FileError("CA", o.ca, "holds no PEM certificate: " + SslErrors("unreadable"),
                       "give the CA's PEM certificate");
    if (o.client_auth != ClientAuth::kNo) {
      SSL_CTX_set_client_CA_list(ctx, SSL_load_client_CA_file(o.ca.c_str()));
      SSL_CTX_set_verify(
          ctx,
          SSL_VERIFY_PEER |
              (o.client_auth == ClientAuth::kRequired ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
          nullptr);
    }
  }
  X509* x = SSL_CTX_get0_certificate(ctx);
  c->subject_ = SubjectCn(x);
  c->not_after_ = TimeText(X509_get0_notAfter(x));
  if (struct tm tm{}; ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1)
    c->not_after_unix_ = static_cast<int64_t>(timegm(&tm));
  return c;
}

Result<std::shared_ptr<TlsContext>> TlsContext::ForClient(const TlsOptions& o) {
  std::string why;
  auto made = Make(false, o);
  if (!made.ok()) return made.status();
  std::shared_ptr<TlsContext> c = std::move(made).value();
  SSL_CTX* ctx = c->ctx_;
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (o.ca.empty()) {
    SSL_CTX_set_default_verify_paths(ctx);
  } else {
    if (!Readable(o.ca, &why)) return FileError("CA", o.ca, why, "check the tls ca option");
    if (SSL_CTX_load_verify_locations(ctx, o.ca.c_str(), nullptr) != 1)
      return FileError("CA", o.ca, "holds no PEM certificate: " + SslErrors("unreadable"),
                       "give the CA's PEM certificate");
  }
  if (o.cert.empty() != o.key.empty())
    return Status::InvalidArgument(
        "a TLS client certificate needs its key and the key its "
        "certificate: give both (cert and key) or neither");
  if (!o.cert.empty()) {
    if (!Readable(o.cert, &why)) return FileError("certificate", o.cert, why, "check the option");
    if (!Readable(o.key, &why)) return FileError("key", o.key, why, "check the option");
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, o.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1)
      return FileError("client certificate", o.cert,
                       "and key " + o.key + " are not a PEM pair: " + SslErrors("unreadable"),
                       "give the key the certificate was issued for");
    c->subject_ = SubjectCn(SSL_CTX_get0_certificate(ctx));
  }
  return c;
}

TlsSession::~TlsSession() {
  if (ssl_) SSL_free(ssl_);  // no close_notify: the socket may already be shut down
}

Result<std::unique_ptr<TlsSession>> TlsSession::Accept(std::shared_ptr<TlsContext> ctx, int fd,
                                                       Deadline deadline) {
  auto s = Begin(std::move(ctx), fd);
  if (s.ok()) EC_RETURN_IF_ERROR((*s)->Handshake(true, deadline));
  return s;
}

Result<std::unique_ptr<TlsSession>> TlsSession::Connect(std::shared_ptr<TlsContext> ctx, int fd,
                                                        const std::string& host,
                                                        Deadline deadline) {
  SSL* ssl = SSL_new(ctx->get());
  if (!ssl) return Status::IOError("SSL_new: " + SslErrors("out of memory"));
  const std::string& uri = ctx->options().server_uri;
  std::string names = ctx->options().server_name.empty() ? host : ctx->options().server_name;
  std::unique_ptr<TlsSession> s(new TlsSession(std::move(ctx), ssl, fd));
  SSL_set_fd(ssl, fd);
  if (!uri.empty()) {
    EC_RETURN_IF_ERROR(s->Handshake(false, deadline));
    if (CarriesUri(SSL_get0_peer_certificate(ssl), uri)) return s;
    return Status::PermissionDenied(
        "TLS: the server's certificate was refused: it does not carry the URI " + uri +
        " (a cluster member proves its node id by that subjectAltName, never by an address: "
        "issue the node's certificate with subjectAltName=URI:" +
        uri + ")");
  }
  // Any one of the names (comma-separated: DNS names or IP addresses) may be the one the
  // certificate carries. OpenSSL's own check would ask for a host and an IP both where both
  // are given, so the names are checked here, once the chain is verified and before any
  // byte of ours is sent.
  std::vector<std::string> list;
  std::stringstream in(names);
  for (std::string name; std::getline(in, name, ',');)
    if (!name.empty()) list.push_back(name);
  for (const std::string& name : list)
    if (!IsIpAddress(name)) {
      SSL_set_tlsext_host_name(ssl, name.c_str());  // SNI: the first DNS name
      break;
    }
  EC_RETURN_IF_ERROR(s->Handshake(false, deadline));
  X509* cert = SSL_get0_peer_certificate(ssl);
  for (const std::string& name : list)
    if (cert &&
        (IsIpAddress(name) ? X509_check_ip_asc(cert, name.c_str(), 0)
                           : X509_check_host(cert, name.c_str(), name.size(), 0, nullptr)) == 1)
      return s;
  return Status::PermissionDenied(
      "TLS: the server's certificate was refused: hostname mismatch: it names none of " + names +
      " (connect by a name it carries, or set the server name)");
}

bool CarriesUri(X509* cert, const std::string& uri) {
  if (!cert) return false;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  bool found = false;
  for (int i = 0; names && !found && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(names, i);
    if (g->type != GEN_URI) continue;
    const auto* d =
        reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.uniformResourceIdentifier));
    found = std::string_view(
                d, static_cast<size_t>(ASN1_STRING_length(g->d.uniformResourceIdentifier))) == uri;
  }
  GENERAL_NAMES_free(names);
  return found;
}

Result<bool> CertificateCarriesUri(const std::string& file, const std::string& uri) {
  FILE* f = std::fopen(file.c_str(), "r");
  if (!f) return Status::IOError("cannot read certificate " + file + ": " + std::strerror(errno));
  X509* x = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  if (!x) return Status::IOError("certificate " + file + " holds no PEM certificate");
  const bool found = CarriesUri(x, uri);
  X509_free(x);
  return found;
}

// Non-blocking for the handshake alone, so the deadline bounds it; blocking afterwards, as
// the plain socket is (its SO_RCVTIMEO/SO_SNDTIMEO bound each call).
Status TlsSession::Handshake(bool server, Deadline deadline) {
  const int flags = fcntl(fd_, F_GETFL);
  fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  ScopedNoSigpipe no_sigpipe;
  Result<HandshakeStep> step = HandshakeStep::kWantRead;
  for (;;) {
    step = Try(server);
    if (!step.ok() || *step == HandshakeStep::kDone) break;
    const int e = *step == HandshakeStep::kWantRead ? SSL_ERROR_WANT_READ : SSL_ERROR_WANT_WRITE;
    if (!WaitFor(fd_, e, deadline)) {
      step = Status::Unavailable(std::string("TLS handshake: the ") +
                                 (server ? "client" : "server") + " did not finish it in time");
      break;
    }
  }
  fcntl(fd_, F_SETFL, flags);
  return step.status();
}

Result<std::unique_ptr<TlsSession>> TlsSession::Begin(std::shared_ptr<TlsContext> ctx, int fd) {
  SSL* ssl = SSL_new(ctx->get());
  if (!ssl) return Status::IOError("SSL_new: " + SslErrors("out of memory"));
  std::unique_ptr<TlsSession> s(new TlsSession(std::move(ctx), ssl, fd));
  SSL_set_fd(ssl, fd);
  return s;
}

namespace {
Result<HandshakeStep> NonBlockingIo(SSL* ssl, int rc, const char* what) {
  switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ:
      return HandshakeStep::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return HandshakeStep::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return Status::Unavailable("closed");
    default:
      return Status::Unavailable(std::string("TLS ") + what + ": " + SslErrors("closed"));
  }
}
}  // namespace

Result<HandshakeStep> TlsSession::ReadSome(void* buf, size_t n, size_t* done) {
  *done = 0;
  ERR_clear_error();
  ScopedNoSigpipe no_sigpipe;
  const int rc = SSL_read_ex(ssl_, buf, n, done);
  return rc == 1 ? Result<HandshakeStep>(HandshakeStep::kDone) : NonBlockingIo(ssl_, rc, "read");
}

Result<HandshakeStep> TlsSession::WriteSome(const void* buf, size_t n, size_t* done) {
  *done = 0;
  ERR_clear_error();
  ScopedNoSigpipe no_sigpipe;
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  const int rc = SSL_write_ex(ssl_, buf, n, done);
  return rc == 1 ? Result<HandshakeStep>(HandshakeStep::kDone) : NonBlockingIo(ssl_, rc, "write");
}

Result<HandshakeStep> TlsSession::Step() {
  const int flags = fcntl(fd_, F_GETFL);
  fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  ScopedNoSigpipe no_sigpipe;
  auto step = Try(true);
  fcntl(fd_, F_SETFL, flags);
  return step;
}

// One try at the handshake on a non-blocking socket: done (the session set up), what it
// waits for, or why it failed.
Result<HandshakeStep> TlsSession::Try(bool server) {
  ERR_clear_error();
  const int rc = server ? SSL_accept(ssl_) : SSL_connect(ssl_);
  if (rc == 1) {
    Established();
    return HandshakeStep::kDone;
  }
  const int e = SSL_get_error(ssl_, rc);
  if (e == SSL_ERROR_WANT_READ) return HandshakeStep::kWantRead;
  if (e == SSL_ERROR_WANT_WRITE) return HandshakeStep::kWantWrite;
  const char* who = server ? "client" : "server";
  long v = SSL_get_verify_result(ssl_);
  std::string reason = SslErrors(e == SSL_ERROR_SYSCALL ? "the connection was closed" : "failed");
  if (v != X509_V_OK)
    return Status::PermissionDenied(
        std::string("TLS: the ") + who +
        "'s certificate was refused: " + X509_verify_cert_error_string(v) +
        (server ? "" : " (it must be signed by the CA you trust and be within its dates)"));
  if (server) return Status::PermissionDenied("TLS handshake with the client failed: " + reason);
  return Status::Unavailable("TLS handshake with the server failed: " + reason +
                             " (is it serving TLS? does it require a client certificate? "
                             "give cert and key)");
}

// The handshake is done: whether the kernel took the record layer over, and who the peer's
// verified certificate names.
void TlsSession::Established() {
#if defined(BIO_get_ktls_send)
  ktls_send_ = BIO_get_ktls_send(SSL_get_wbio(ssl_));
  ktls_recv_ = BIO_get_ktls_recv(SSL_get_rbio(ssl_));
#endif
  X509* x = SSL_get1_peer_certificate(ssl_);
  if (x && SSL_get_verify_result(ssl_) == X509_V_OK) {
    has_peer_ = true;
    peer_.cn = SubjectCn(x);
    auto* names =
        static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
    for (int i = 0; names && i < sk_GENERAL_NAME_num(names); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(names, i);
      if (g->type != GEN_DNS) continue;
      peer_.dns.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.dNSName)),
                             static_cast<size_t>(ASN1_STRING_length(g->d.dNSName)));
    }
    GENERAL_NAMES_free(names);
  }
  X509_free(x);
}

bool TlsSession::Buffered() const { return SSL_pending(ssl_) > 0; }
const char* TlsSession::version() const { return SSL_get_version(ssl_); }
const char* TlsSession::cipher() const { return SSL_get_cipher_name(ssl_); }

Status TlsSession::Recv(void* buf, size_t n, const char* what, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  ScopedNoSigpipe no_sigpipe;  // a read may answer the peer (an alert, a key update)
  while (n > 0) {
    if (SSL_pending(ssl_) == 0 && deadline != Deadline::max() &&
        !WaitFor(fd_, SSL_ERROR_WANT_READ, deadline))
      return Status::Unavailable(std::string(what) + " did not send the whole frame in time");
    size_t got = 0;
    ERR_clear_error();
    if (SSL_read_ex(ssl_, p, n, &got) == 1) {
      p += got;
      n -= got;
      continue;
    }
    int e = SSL_get_error(ssl_, 0);
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0))
      return Status::Unavailable(std::string(what) + " closed the connection");
    if (e == SSL_ERROR_WANT_READ || errno == EAGAIN)
      return Status::Unavailable(std::string(what) + " did not answer in time");
    return ReadFailure(what, SslErrors(std::strerror(errno)));
  }
  return Status::Ok();
}

// Under TLS 1.3 a server refuses a client's certificate after the client's handshake is
// done: the refusal arrives as an alert on the first read.
Status TlsSession::ReadFailure(const char* what, const std::string& why) {
  if (why.find("certificate required") != std::string::npos)
    return Status::PermissionDenied(std::string(what) +
                                    " requires a client certificate signed by its CA: give "
                                    "cert and key (--tls-cert, --tls-key)");
  if (why.find("certificate") != std::string::npos || why.find("unknown ca") != std::string::npos)
    return Status::PermissionDenied(std::string(what) + " refused this client's certificate (" +
                                    why + "): give one its CA signed, still valid");
  return Status::Unavailable(std::string(what) + ": TLS: " + why);
}

Status TlsSession::Write(const void* p, size_t n, const char* what, Deadline deadline) {
  if (n == 0) return Status::Ok();
  if (deadline != Deadline::max() && !WaitFor(fd_, SSL_ERROR_WANT_WRITE, deadline))
    return Status::Unavailable(std::string(what) + " did not take the whole reply in time");
  size_t put = 0;
  ScopedNoSigpipe no_sigpipe;
  ERR_clear_error();
  if (SSL_write_ex(ssl_, p, n, &put) == 1 && put == n) return Status::Ok();
  return Status::Unavailable(std::string(what) +
                             " stopped reading: TLS: " + SslErrors(std::strerror(errno)));
}

Status TlsSession::Send(iovec* iov, int iovcnt, const char* what, Deadline deadline) {
  if (ktls_send_) return SendAll(fd_, iov, iovcnt, what, deadline);  // the kernel encrypts
  // Pieces under a record's size are gathered, so a frame's header and body make one record.
  constexpr size_t kGather = 16 << 10;
  std::string small;
  for (int i = 0; i < iovcnt; ++i) {
    const auto* p = static_cast<const char*>(iov[i].iov_base);
    if (iov[i].iov_len < kGather && small.size() + iov[i].iov_len <= kGather) {
      small.append(p, iov[i].iov_len);
      continue;
    }
    EC_RETURN_IF_ERROR(Write(small.data(), small.size(), what, deadline));
    small.clear();
    EC_RETURN_IF_ERROR(Write(p, iov[i].iov_len, what, deadline));
  }
  return Write(small.data(), small.size(), what, deadline);
}

ScopedNoSigpipe::ScopedNoSigpipe() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old_);
}

ScopedNoSigpipe::~ScopedNoSigpipe() {
  sigset_t pipe, pending;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  sigpending(&pending);
  if (!was_pending_ && sigismember(&pending, SIGPIPE)) {
    const timespec zero{0, 0};
    sigtimedwait(&pipe, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

bool KernelHasTls() {
  std::ifstream f("/proc/sys/net/ipv4/tcp_available_ulp");
  std::string ulps;
  std::getline(f, ulps);
  return (" " + ulps + " ").find(" tls ") != std::string::npos;
}

}  // namespace ecstore::net
