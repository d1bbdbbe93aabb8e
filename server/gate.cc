#include "server/gate.h"

#include <openssl/crypto.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "base/mutex.h"

namespace ecstore::net {
namespace {

// The first byte a TLS client sends: a handshake record.
constexpr uint8_t kTlsHandshake = 0x16;
// Refusals logged one line each per principal, right and namespace, up to this many.
constexpr size_t kMaxLogged = 4096;

const char* const kNoPrincipal =
    "no principal is proved by this connection: give the secret of one (EC_STORE_TOKEN or "
    "--token-file; token= in Python), "
    "a client certificate the ACL names (cert=), or connect over the unix socket as a uid it "
    "names (uid=)";

}  // namespace

Result<std::unique_ptr<Gate>> Gate::Make(GateOptions o) {
  std::unique_ptr<Gate> g(new Gate(std::move(o)));
  MutexLock l(&g->mu_);  // no other thread sees g yet; the analysis wants it held
  g->token_ = g->opt_.token;
  if (g->opt_.tls) {
    auto ctx = TlsContext::ForServer(*g->opt_.tls);
    if (!ctx.ok()) return ctx.status();
    g->tls_ctx_ = std::move(ctx).value();
    g->tls_on_ = true;
  }
  if (!g->opt_.acl_file.empty()) {
    auto acl = Acl::Load(g->opt_.acl_file);
    if (!acl.ok()) return acl.status();
    g->acl_ = std::move(acl).value();
  }
  return g;
}

bool Gate::has_acl() const {
  MutexLock l(&mu_);
  return acl_ != nullptr;
}

bool Gate::remote_clients_provable() const {
  MutexLock l(&mu_);
  const bool certs =
      tls_on_ && !opt_.tls->ca.empty() && opt_.tls->client_auth == ClientAuth::kRequired;
  return !token_.empty() || acl_ || certs;
}

std::string Gate::Describe() const {
  MutexLock l(&mu_);
  std::string out;
  if (tls_on_) {
    out += "TLS (certificate " + tls_ctx_->subject() + ", valid until " + tls_ctx_->not_after();
    if (!opt_.tls->ca.empty())
      out += std::string(", client certificates ") +
             (opt_.tls->client_auth == ClientAuth::kRequired   ? "required"
              : opt_.tls->client_auth == ClientAuth::kOptional ? "optional"
                                                               : "not asked for");
    out += std::string(", kTLS ") +
           (KernelHasTls() ? "where the cipher allows" : "off: this kernel has no tls module") +
           ")";
  }
  if (acl_) out += (out.empty() ? "" : ", ") + std::to_string(acl_->size()) + " ACL principals";
  if (!token_.empty()) out += (out.empty() ? "" : ", ") + std::string("token required");
  return out.empty() ? "local users only" : out;
}

Result<HandshakeStep> Gate::Secure(Stream* io, std::unique_ptr<TlsSession>* pending,
                                   const std::string& peer) {
  const int fd = io->fd();
  if (!*pending) {
    uint8_t first = 0;
    const ssize_t n = recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return HandshakeStep::kWantRead;
    if (n != 1) return Status::Unavailable("the client closed the connection before TLS");
    if (first != kTlsHandshake) return RefusePlain(fd, peer);
    auto begun = TlsSession::Begin(tls_context(), fd);
    if (!begun.ok()) return begun.status();
    *pending = std::move(begun).value();
  }
  auto step = (*pending)->Step();
  if (!step.ok()) {
    if (opt_.metrics) opt_.metrics->RecordRefused(Refusal::kTls);
    spdlog::warn("TLS handshake with {} failed: {}", peer, step.status().message());
    return step.status();
  }
  if (*step != HandshakeStep::kDone) return step;
  std::unique_ptr<TlsSession> session = std::move(*pending);
  ++sessions_;
  if (session->ktls_send()) ++ktls_send_;
  if (session->ktls_recv()) ++ktls_recv_;
  spdlog::debug("TLS with {}: {} {}, kTLS send {}, receive {}", peer, session->version(),
                session->cipher(), session->ktls_send() ? "on" : "off",
                session->ktls_recv() ? "on" : "off");
  io->SetTls(std::move(session));
  return HandshakeStep::kDone;
}

// A plain client on the TLS port: told in the clear (one small frame into an empty socket
// buffer: it does not block), and refused.
Status Gate::RefusePlain(int fd, const std::string& peer) {
  Status st = Status::InvalidArgument(
      "this server requires TLS on this port: connect with tls://HOST:PORT and the CA that "
      "signed its certificate (--tls-ca; tls= in Python)");
  uint8_t hdr[kHeaderBytes];
  const std::string body = ErrorBody(st);
  EncodeHeader({kVersion, Op::kError, 0, body.size()}, hdr);
  iovec iov[2] = {{hdr, kHeaderBytes}, {const_cast<char*>(body.data()), body.size()}};
  SendAll(fd, iov, 2, "client", std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
  if (opt_.metrics) opt_.metrics->RecordRefused(Refusal::kTls);
  spdlog::warn("refused a plain-TCP client from {} on the TLS port", peer);
  return st;
}

Result<Identity> Gate::Identify(const Stream& io, bool unix_socket, std::string_view secret) {
  Identity who;
  who.proof.unix_socket = unix_socket;
  who.proof.fd = io.fd();
  if (!secret.empty()) who.proof.secret = Sha256(secret);
  if (io.tls() && io.tls()->peer()) who.proof.cert = *io.tls()->peer();
  EC_RETURN_IF_ERROR(Resolve(&who, true));
  return who;
}

Status Gate::Resolve(Identity* who, bool count_refusal) {
  who->generation = generation_.load();  // before the reads: a change meanwhile resolves again
  std::string token;
  std::shared_ptr<const Acl> acl;
  {
    MutexLock l(&mu_);
    token = token_;
    acl = acl_;
  }
  who->acl = acl;
  who->own.reset();
  who->principal = nullptr;
  const Proof& proof = who->proof;
  auto found = [&](const Principal* p) {
    who->name = p->name;
    who->principal = p;
    return Status::Ok();
  };
  auto own = [&](std::string name) {
    who->own = Acl::Everything(name);
    who->name = std::move(name);
    who->principal = who->own.get();
    return Status::Ok();
  };
  auto refused = [&](Refusal why) {
    if (count_refusal && opt_.metrics) opt_.metrics->RecordRefused(why);
  };
  // A secret where the server asks for none (no token, no ACL) proves nothing and costs
  // nothing: such a client is let in as any other local user would be.
  if (proof.secret && (!token.empty() || acl)) {
    const SecretDigest want = Sha256(token);
    if (!token.empty() && CRYPTO_memcmp(want.data(), proof.secret->data(), want.size()) == 0)
      return own("token");
    if (acl)
      if (const Principal* p = acl->BySecretDigest(*proof.secret)) return found(p);
    if (count_refusal && opt_.metrics) opt_.metrics->RecordRefusedToken();
    return Status::InvalidArgument(
        "wrong or missing token: this server requires the shared secret (EC_STORE_TOKEN or "
        "--token-file; token= in Python)");
  }
  if (proof.cert) {
    if (acl) {
      if (const Principal* p = acl->ByCert(proof.cert->cn, proof.cert->dns)) return found(p);
    } else if (token.empty()) {
      return own("cert:" + proof.cert->cn);  // client certificates are the proof
    }
  }
  if (proof.unix_socket && acl) {
    auto uid = UnixPeerUid(proof.fd);
    if (uid.ok())
      if (const Principal* p = acl->ByUid(*uid)) return found(p);
  }
  if (token.empty() && !acl) {
    Status may = LocalPeerMayConnect(proof.fd, proof.unix_socket, {opt_.group_access});
    if (!may.ok()) {
      if (count_refusal && opt_.metrics) opt_.metrics->RecordRefusedToken();
      return may;
    }
    return own("local");
  }
  refused(Refusal::kPermission);
  if (token.empty() && acl)
    return Status::PermissionDenied(std::string(kNoPrincipal) +
                                    (proof.cert
                                         ? " (this connection's certificate, CN '" +
                                               proof.cert->cn + "', is named by no cert= row)"
                                         : ""));
  return Status::InvalidArgument(
      "wrong or missing token: this server requires the shared secret (EC_STORE_TOKEN or "
      "--token-file; token= in Python)");
}

// The principal as the ACL and token now have it, from the connection's own proof: an edit
// applies to the next request, and a proof that maps to nothing any more maps to null.
const Principal* Gate::Current(Identity* who) {
  if (who->generation == generation_.load()) return who->principal;
  const std::string was = who->name;
  if (Status st = Resolve(who, false); !st.ok()) {
    who->principal = nullptr;
    who->name = was;
    spdlog::warn(
        "a connection of principal '{}' is refused from its next request: after the ACL or "
        "token changed, the proof it presented proves no principal ({})",
        was, st.message());
  } else if (who->name != was) {
    spdlog::info("a connection of principal '{}' is now principal '{}': its proof moved", was,
                 who->name);
  }
  return who->principal;
}

bool Gate::MaySubscribe(std::string_view curve_key) const {
  std::shared_ptr<const Acl> acl;
  {
    MutexLock l(&mu_);
    acl = acl_;
  }
  const Principal* p = acl ? acl->ByCurve(curve_key) : nullptr;
  return p && (p->AllowsEvery(kEvents) || p->AllowsEvery(kAdmin));
}

bool Gate::Revoked(Identity* who) { return Current(who) == nullptr; }

bool Gate::MapsPool(Identity* who) {
  const Principal* p = Current(who);
  return p && p->AllowsEvery(kRead);
}

Status Gate::Refuse(Identity* who, uint8_t right, std::string_view ns, const char* what_instead) {
  const Principal* p = who->principal;
  std::string what = what_instead ? what_instead : "namespace '" + std::string(ns) + "'";
  if (opt_.metrics) opt_.metrics->RecordRefused(Refusal::kPermission);
  Status st = Status::PermissionDenied(
      "principal '" + who->name + "' may not " + RightName(right) + " " + what +
      (p ? " (it may: " + p->Grants() + ")" : " (its proof no longer proves a principal)") +
      "; ask the server's operator for the grant (--acl-file)");
  MutexLock l(&logged_mu_);
  if (logged_.size() < kMaxLogged &&
      logged_.insert(who->name + '\0' + RightName(right) + '\0' + std::string(ns)).second)
    spdlog::warn("refused: {}", st.message());
  return st;
}

Status Gate::CheckNamespace(Identity* who, uint8_t right, std::string_view ns) {
  const Principal* p = Current(who);
  if (p && p->Allows(right, ns)) return Status::Ok();
  return Refuse(who, right, ns);
}

Status Gate::Check(Identity* who, Op op, std::string_view body) {
  const OpRow* row = FindOp(op);
  if (!row || !row->request)  // never a default: what the table does not know is refused
    return Status::PermissionDenied("opcode " + std::to_string(static_cast<int>(op)) +
                                    " is not a request this server knows");
  if (row->right == kNoRight) return Status::Ok();
  const RequestScope s = ScopeOf(op, body);
  if (s.malformed) return Status::Ok();  // its handler says why, and closes
  const Principal* p = Current(who);
  if (s.every_namespace)
    return p && p->AllowsEvery(s.right)
               ? Status::Ok()
               : Refuse(who, s.right, "*",
                        "the whole server (stats, verify and compact need ns=*)");
  if (s.namespaces.empty())
    return p && p->AllowsAny(s.right) ? Status::Ok() : Refuse(who, s.right, "", "any namespace");
  for (std::string_view ns : s.namespaces) EC_RETURN_IF_ERROR(CheckNamespace(who, s.right, ns));
  return Status::Ok();
}

bool Gate::MayList(Identity* who, std::string_view ns) {
  const Principal* p = Current(who);
  return p && p->Allows(kAdmin, ns);
}

void Gate::SetToken(std::string token) {
  {
    MutexLock l(&mu_);
    if (token_ == token) return;
    token_ = std::move(token);
  }
  ++generation_;  // every connection is mapped again from its proof
}

Status Gate::ReloadAcl() {
  if (opt_.acl_file.empty()) return Status::Ok();
  auto acl = Acl::Load(opt_.acl_file);
  if (!acl.ok()) return acl.status();
  {
    MutexLock l(&mu_);
    acl_ = std::move(acl).value();
  }
  ++generation_;
  MutexLock l(&logged_mu_);
  logged_.clear();
  return Status::Ok();
}

Status Gate::ReloadTls() {
  if (!tls_on_) return Status::Ok();
  auto ctx = TlsContext::ForServer(*opt_.tls);
  if (!ctx.ok()) return ctx.status();
  MutexLock l(&mu_);
  tls_ctx_ = std::move(ctx).value();
  return Status::Ok();
}

namespace {
// What a file looks like now: its modification time and inode folded into one stamp, so that
// a file replaced by `mv` (a new inode, maybe an older time) counts as changed; 0: unreadable.
int64_t FileStamp(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  const int64_t ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return ns ^ (static_cast<int64_t>(st.st_ino) << 1) ^ 1;
}
}  // namespace

void Gate::ReloadIfChanged() {
  const auto now = std::chrono::steady_clock::now();
  if (now - looked_at_ < std::chrono::seconds(1)) return;
  looked_at_ = now;
  if (tls_on_) {
    const int64_t cert = FileStamp(opt_.tls->cert), key = FileStamp(opt_.tls->key);
    const int64_t m = cert && key ? cert ^ (key << 1) : 0;
    if (pair_mtime_ == 0) pair_mtime_ = m;  // the pair Make loaded
    if (m != 0 && m != pair_mtime_ && m != failed_mtime_) {
      if (Status st = ReloadTls(); !st.ok()) {
        failed_mtime_ = m;  // said once; a later change is tried again
        spdlog::error("the TLS certificate files changed but do not load, the old pair stays: {}",
                      st.message());
      } else {
        pair_mtime_ = m;
        spdlog::info("the TLS certificate files changed: new connections get {} (valid until {})",
                     tls_context()->subject(), tls_context()->not_after());
      }
    }
  }
  if (opt_.acl_file.empty()) return;
  const int64_t m = FileStamp(opt_.acl_file);
  if (acl_mtime_ == 0) acl_mtime_ = m;  // the ACL Make loaded
  if (m == 0 || m == acl_mtime_ || m == acl_failed_mtime_) return;
  if (Status st = ReloadAcl(); !st.ok()) {
    acl_failed_mtime_ = m;
    spdlog::error("the ACL file changed but does not load, the old ACL stays: {}", st.message());
    return;
  }
  acl_mtime_ = m;
  spdlog::info("the ACL file {} changed: reloaded, every connection mapped again from its proof",
               opt_.acl_file);
}

std::string Gate::TlsJson(const TlsSession* session) const {
  if (!tls_on_) return "";
  std::string out = "{\"sessions\":" + std::to_string(sessions_.load()) +
                    ",\"ktls_send\":" + std::to_string(ktls_send_.load()) +
                    ",\"ktls_recv\":" + std::to_string(ktls_recv_.load()) +
                    ",\"kernel_tls\":" + (KernelHasTls() ? "true" : "false");
  if (session)
    out += std::string(",\"this_connection\":{\"version\":\"") + session->version() +
           "\",\"cipher\":\"" + session->cipher() +
           "\",\"ktls_send\":" + (session->ktls_send() ? "true" : "false") +
           ",\"ktls_recv\":" + (session->ktls_recv() ? "true" : "false") + "}";
  return out + "}";
}

std::shared_ptr<TlsContext> Gate::tls_context() const {
  MutexLock l(&mu_);
  return tls_ctx_;
}

}  // namespace ecstore::net
