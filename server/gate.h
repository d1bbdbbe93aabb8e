// Gate: who may use the server, and for what. It holds what proves a client -- the shared
// token, the ACL (server/acl.h), the TLS certificate and the CA of client certificates --
// and answers three questions: may this TCP connection go on (the TLS handshake, a plain
// client on a TLS port told why), who is this greeted connection (its principal, from its
// HELLO secret, its client certificate, or its uid over the unix socket), and may it make
// this request (the right over each namespace the request names).
//
//   auto gate = Gate::Make({.token = t, .tls = tls_options, .acl_file = "/etc/ec-store/acl"});
//   EC_RETURN_IF_ERROR(gate->Secure(&stream, deadline));          // TCP, TLS on
//   auto who = gate->Identify(stream, /*unix_socket=*/false, hello_secret);
//   if (Status st = gate->Check(&*who, op, body); !st.ok()) reply(st);   // PermissionDenied
//
// Reloads (SIGHUP) swap a whole new ACL or certificate pair in, or keep the old one and say
// why: new connections get the new pair, open ones keep theirs; a new ACL applies to the
// next request of every connection.
// Thread rules: thread-safe; an Identity belongs to its connection's thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "base/mutex.h"
#include "net/protocol.h"
#include "net/stream.h"
#include "net/tls.h"
#include "server/acl.h"
#include "server/peer_access.h"
#include "server/server_metrics.h"

namespace ecstore::net {

struct GateOptions {
  std::string token;                 // an all-namespace principal named "token"
  bool group_access = false;         // no token, no ACL: the server's group may connect too
  std::optional<TlsOptions> tls;     // TLS on the TCP port
  std::string acl_file;              // principals and their grants; empty: none
  ServerMetrics* metrics = nullptr;  // told of each refusal
};

// What a connection presented at HELLO, kept for its life: at an ACL or token change it is
// mapped to a principal again from the proof itself, never from a name.
struct Proof {
  std::optional<SecretDigest> secret;  // the SHA-256 of its HELLO secret, if it sent one
  std::optional<PeerIdentity> cert;    // its verified client certificate, if any
  bool unix_socket = false;
  int fd = -1;  // its socket (the peer's uid and address), valid while the connection lives
};

// A greeted connection's principal, mapped again from its proof when the ACL or the token
// has changed.
struct Identity {
  std::string name;
  Proof proof;
  std::shared_ptr<const Principal> own;  // a principal outside the ACL (token, local, cert)
  std::shared_ptr<const Acl> acl;        // the ACL it was found in, else null
  const Principal* principal = nullptr;  // in `acl`, or own.get(); null: its proof is revoked
  uint64_t generation = 0;               // the ACL's and token's when resolved
};

class Gate {
 public:
  // InvalidArgument where the certificate, key, CA or ACL file is unusable (the reason).
  static Result<std::unique_ptr<Gate>> Make(GateOptions o);
  bool tls() const { return tls_on_; }
  bool has_acl() const;
  // Whether a client that is not on this host can prove who it is (a token, an ACL, or
  // client certificates required): what a non-loopback address needs.
  bool remote_clients_provable() const;
  std::string Describe() const;  // for the start-up log line

  // TCP with TLS on: one step of the handshake, never blocking (*pending holds the session
  // between steps; the event loop calls again when the socket is ready, and the HELLO
  // deadline bounds the whole). kDone once *io speaks TLS. A client speaking the plain
  // protocol is answered in the clear with an ERROR saying to use tls://, and refused.
  Result<HandshakeStep> Secure(Stream* io, std::unique_ptr<TlsSession>* pending,
                               const std::string& peer);
  // The principal of a connection that said HELLO with `secret` (may be empty).
  // InvalidArgument for a wrong secret, PermissionDenied where nothing proves a principal.
  Result<Identity> Identify(const Stream& io, bool unix_socket, std::string_view secret);
  // Whether the proof the connection presented no longer maps to any principal (an ACL or
  // token change took it away): it is refused and closed at its next request.
  bool Revoked(Identity* who);
  // Ok, or PermissionDenied naming the right, the namespace and the principal's grants
  // (counted; logged once per principal and namespace). A malformed body passes: its
  // handler says why.
  Status Check(Identity* who, Op op, std::string_view body);
  Status CheckNamespace(Identity* who, uint8_t right, std::string_view ns);
  // Whether the principal may see entries of `ns` in a LIST.
  bool MayList(Identity* who, std::string_view ns);
  // Whether the event subscriber with this CURVE public key (Z85) may subscribe: a principal
  // with `events`, or `admin`, on ns=*. No ACL, no key it names: no.
  bool MaySubscribe(std::string_view curve_key) const;
  // Whether it may read the pool in place (ReadsPoolInPlace): its read grant covers every
  // namespace the pool can hold, since a mapping or an rkey shows the whole pool.
  bool MapsPool(Identity* who);

  void SetToken(std::string token);
  Status ReloadAcl();  // from acl_file; on failure the old ACL stays
  Status ReloadTls();  // the certificate and key as a pair; on failure the old pair stays
  // The TLS context new connections get (null: TLS off).
  std::shared_ptr<TlsContext> tls_context() const;
  // Reloads the pair, and the ACL, where their files changed since they were loaded (looked
  // at no more than once a second; a file replaced by `mv` counts): a rotation needs no
  // SIGHUP. Files that do not load are logged once.
  void ReloadIfChanged();
  // For STATS: TLS sessions made, how many had kTLS per direction, and `session`'s own
  // version, cipher and kTLS (empty where TLS is off).
  std::string TlsJson(const TlsSession* session) const;

 private:
  explicit Gate(GateOptions o) : opt_(std::move(o)) {}
  const Principal* Current(Identity* who);
  // Maps who->proof to a principal under the token and ACL in force now.
  Status Resolve(Identity* who, bool count_refusal);
  Status RefusePlain(int fd, const std::string& peer);
  Status Refuse(Identity* who, uint8_t right, std::string_view ns,
                const char* what_instead = nullptr);
  GateOptions opt_;
  bool tls_on_ = false;
  mutable Mutex mu_;
  std::string token_ GUARDED_BY(mu_);
  std::shared_ptr<const Acl> acl_ GUARDED_BY(mu_);
  std::shared_ptr<TlsContext> tls_ctx_ GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{1};  // moves at every ACL or token change
  std::atomic<uint64_t> sessions_{0}, ktls_send_{0}, ktls_recv_{0};
  std::chrono::steady_clock::time_point looked_at_{};  // acceptor thread only
  // Acceptor thread only: what the loaded TLS pair's and ACL's files looked like, and what
  // was logged as not loading.
  int64_t pair_mtime_ = 0, failed_mtime_ = 0;
  int64_t acl_mtime_ = 0, acl_failed_mtime_ = 0;
  Mutex logged_mu_;
  std::set<std::string> logged_ GUARDED_BY(logged_mu_);  // principal, right, namespace
};

}  // namespace ecstore::net
