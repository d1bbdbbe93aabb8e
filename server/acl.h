// Acl: who may do what to which namespaces (Redis ACLs are the model). A principal is proved
// by the secret its HELLO carries (the file holds the secret's SHA-256, never the secret),
// by its verified TLS client certificate (CN or a DNS SAN), or over the unix socket by its
// uid; its grants are namespace globs (fnmatch: `*` crosses `/`) with rights:
//   read   GET and every leased get, LOOKUP, PIN, PREFETCH, CLAIM
//   write  PUT (every kind), ERASE, ERASE_MANY
//   admin  LIST (only the namespaces granted); STATS, VERIFY and COMPACT with a `*` grant
//          (they are the whole server's)
//   events subscribe to the entry events (with a `*` grant: the stream names every
//          namespace), proved by curve=<the subscriber's CURVE public key>
//
//   # NAME  proofs...                     ns=GLOB[,GLOB]    rights=read,write,admin|all
//   encoder secret=sha256:9f86d08...       ns=model-a*      rights=write
//   prefill cert=prefill.example.com       ns=model-a*      rights=read
//   ops     secret=sha256:2c26b46... uid=0 ns=*              rights=admin
//
// A name on several lines gathers their grants and proofs.
//
//   auto acl = Acl::Load("/etc/ec-store/acl");            // InvalidArgument: file:line, why
//   const Principal* p = acl->BySecret(hello_token);
//   if (!p->Allows(Right::kWrite, "model-a/x")) ...
//
// Thread rules: an Acl is immutable once loaded; share it as shared_ptr<const Acl> and swap
// in a new one to reload.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "net/op_table.h"
#include "net/protocol.h"

namespace ecstore::net {

const char* RightName(uint8_t right);  // "read", "write", "admin"

using SecretDigest = std::array<uint8_t, 32>;
SecretDigest Sha256(std::string_view s);

struct Grant {
  std::string glob;
  uint8_t rights = 0;
};

struct Principal {
  std::string name;
  std::vector<std::array<uint8_t, 32>> secrets;  // SHA-256 of each secret that proves it
  std::vector<std::string> certs;                // certificate names (CN or DNS SAN)
  std::vector<uid_t> uids;                       // unix socket peers' uids
  std::vector<std::string> curves;               // event subscribers' CURVE public keys (Z85)
  std::vector<Grant> grants;
  // Whether some grant gives `right` over `ns`.
  bool Allows(uint8_t right, std::string_view ns) const;
  // Whether `right` is granted over some namespace (requests that name none), or over
  // every one (a `*` grant: VERIFY, COMPACT).
  bool AllowsAny(uint8_t right) const;
  bool AllowsEvery(uint8_t right) const;
  std::string Grants() const;  // "read on model-a*; write on b" for refusals
};

class Acl {
 public:
  static Result<std::shared_ptr<const Acl>> Load(const std::string& path);
  static Result<std::shared_ptr<const Acl>> Parse(std::string_view text, const std::string& source);
  // The one principal every proof maps to where there is no ACL file (the token, a local
  // user, a certificate the CA signed): every right on every namespace.
  static std::shared_ptr<const Principal> Everything(std::string name);
  // Null where nothing matches.
  const Principal* BySecret(std::string_view secret) const;
  const Principal* BySecretDigest(const SecretDigest& digest) const;  // Sha256(secret)
  const Principal* ByCert(const std::string& cn, const std::vector<std::string>& dns) const;
  const Principal* ByUid(uid_t uid) const;
  const Principal* ByCurve(std::string_view z85_public_key) const;
  const Principal* ByName(std::string_view name) const;
  size_t size() const { return principals_.size(); }

 private:
  std::vector<Principal> principals_;
};

// What a request needs: the right, and the namespaces its body names (none: the right over
// some namespace, or with every_namespace, over all).
struct RequestScope {
  uint8_t right = 0;  // 0: no check (HELLO, RELEASE)
  std::vector<std::string_view> namespaces;
  bool every_namespace = false;
  bool malformed = false;  // the body could not be read: the handler will say why
};
// For PUT only the body's first bytes are needed (ns comes first); `body` may be a prefix.
RequestScope ScopeOf(Op op, std::string_view body);

// The SHA-256 of a secret, as the ACL file holds it ("sha256:" and 64 hex digits).
std::string SecretHash(std::string_view secret);

}  // namespace ecstore::net
