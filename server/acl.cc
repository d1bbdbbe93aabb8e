#include "server/acl.h"

#include <fnmatch.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <sstream>

#include "base/safetensors.h"

namespace ecstore::net {

SecretDigest Sha256(std::string_view s) {
  SecretDigest out{};
  unsigned n = 0;
  EVP_Digest(s.data(), s.size(), out.data(), &n, EVP_sha256(), nullptr);
  return out;
}

namespace {

bool ParseHex32(std::string_view hex, std::array<uint8_t, 32>* out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    auto [p, ec] = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, (*out)[i], 16);
    if (ec != std::errc() || p != hex.data() + 2 * i + 2) return false;
  }
  return true;
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::stringstream in{std::string(s)};
  for (std::string part; std::getline(in, part, sep);)
    if (!part.empty()) out.push_back(part);
  return out;
}

Result<uint8_t> ParseRights(std::string_view text) {
  uint8_t rights = 0;
  for (const std::string& r : Split(text, ',')) {
    if (r == "read")
      rights |= kRead;
    else if (r == "write")
      rights |= kWrite;
    else if (r == "admin")
      rights |= kAdmin;
    else if (r == "events")
      rights |= kEvents;
    else if (r == "all")
      rights |= kAll;
    else
      return Status::InvalidArgument("right '" + r +
                                     "' is unknown: give read, write, admin, events or all");
  }
  if (rights == 0)
    return Status::InvalidArgument("rights= names none: give read, write, admin, events or all");
  return rights;
}

// One word of a line (KEY=VALUE) into p; the globs and rights of the line into *globs, *rights.
Status ParseWord(const std::string& word, Principal* p, std::vector<std::string>* globs,
                 uint8_t* rights) {
  size_t eq = word.find('=');
  if (eq == std::string::npos)
    return Status::InvalidArgument(
        "'" + word + "' is not KEY=VALUE (secret=, cert=, uid=, curve=, ns=, rights=)");
  std::string k = word.substr(0, eq), v = word.substr(eq + 1);
  if (k == "secret") {
    std::array<uint8_t, 32> h;
    if (v.rfind("sha256:", 0) != 0 || !ParseHex32(std::string_view(v).substr(7), &h))
      return Status::InvalidArgument(
          "secret= takes sha256: and 64 hex digits, the secret's "
          "hash (`printf %s SECRET | sha256sum`), never the secret");
    p->secrets.push_back(h);
  } else if (k == "cert") {
    p->certs.push_back(v);
  } else if (k == "curve") {
    if (v.size() != 40)
      return Status::InvalidArgument(
          "curve= takes a subscriber's CURVE public key: 40 Z85 characters (docs/events.md)");
    p->curves.push_back(v);
  } else if (k == "uid") {
    uid_t uid = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), uid);
    if (ec != std::errc() || ptr != v.data() + v.size())
      return Status::InvalidArgument("uid= takes a number, not '" + v + "'");
    p->uids.push_back(uid);
  } else if (k == "ns") {
    *globs = Split(v, ',');
  } else if (k == "rights") {
    auto r = ParseRights(v);
    if (!r.ok()) return r.status();
    *rights = *r;
  } else {
    return Status::InvalidArgument("'" + k +
                                   "' is unknown: give secret=, cert=, uid=, curve=, ns=, rights=");
  }
  return Status::Ok();
}

Status ParseLine(const std::string& line, std::vector<Principal>* out) {
  std::vector<std::string> words = Split(line, ' ');
  Principal p;
  p.name = words[0];
  std::vector<std::string> globs;
  uint8_t rights = 0;
  for (size_t i = 1; i < words.size(); ++i)
    EC_RETURN_IF_ERROR(ParseWord(words[i], &p, &globs, &rights));
  if (globs.empty() != (rights == 0))
    return Status::InvalidArgument("ns= and rights= go together: give both or neither");
  for (const std::string& g : globs) p.grants.push_back({g, rights});
  auto same =
      std::find_if(out->begin(), out->end(), [&](const Principal& o) { return o.name == p.name; });
  if (same == out->end()) {
    out->push_back(std::move(p));
    return Status::Ok();
  }
  same->secrets.insert(same->secrets.end(), p.secrets.begin(), p.secrets.end());
  same->certs.insert(same->certs.end(), p.certs.begin(), p.certs.end());
  same->uids.insert(same->uids.end(), p.uids.begin(), p.uids.end());
  same->curves.insert(same->curves.end(), p.curves.begin(), p.curves.end());
  same->grants.insert(same->grants.end(), p.grants.begin(), p.grants.end());
  return Status::Ok();
}

}  // namespace

const char* RightName(uint8_t right) {
  return right == kRead     ? "read"
         : right == kWrite  ? "write"
         : right == kAdmin  ? "admin"
         : right == kEvents ? "events"
                            : "all";
}

bool Principal::Allows(uint8_t right, std::string_view ns) const {
  const std::string n(ns);  // fnmatch needs it terminated
  return std::any_of(grants.begin(), grants.end(), [&](const Grant& g) {
    return (g.rights & right) && fnmatch(g.glob.c_str(), n.c_str(), 0) == 0;
  });
}

bool Principal::AllowsAny(uint8_t right) const {
  return std::any_of(grants.begin(), grants.end(),
                     [&](const Grant& g) { return g.rights & right; });
}

bool Principal::AllowsEvery(uint8_t right) const {
  return std::any_of(grants.begin(), grants.end(),
                     [&](const Grant& g) { return (g.rights & right) && g.glob == "*"; });
}

std::string Principal::Grants() const {
  std::string out;
  for (const Grant& g : grants) {
    for (uint8_t r : {kRead, kWrite, kAdmin, kEvents}) {
      if (!(g.rights & r)) continue;
      out += (out.empty() ? "" : "; ") + std::string(RightName(r)) + " on " + g.glob;
    }
  }
  return out.empty() ? "none" : out;
}

Result<std::shared_ptr<const Acl>> Acl::Load(const std::string& path) {
  auto text = safetensors::ReadFile(path);
  if (!text.ok())
    return Status::InvalidArgument(
        "ACL file " + path + " cannot be read: " + text.status().message() + " (check --acl-file)");
  return Parse(*text, path);
}

Result<std::shared_ptr<const Acl>> Acl::Parse(std::string_view text, const std::string& source) {
  auto acl = std::make_shared<Acl>();
  std::stringstream in{std::string(text)};
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    // A comment starts a word: a CURVE key (Z85) may hold '#' inside it.
    for (size_t i = 0; i < line.size(); ++i)
      if (line[i] == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
        line.resize(i);
        break;
      }
    std::replace(line.begin(), line.end(), '\t', ' ');
    if (line.find_first_not_of(' ') == std::string::npos) continue;
    Status st = ParseLine(line, &acl->principals_);
    if (!st.ok())
      return Status::InvalidArgument(source + ":" + std::to_string(n) + ": " + st.message());
  }
  for (const Principal& p : acl->principals_)
    if (p.secrets.empty() && p.certs.empty() && p.uids.empty() && p.curves.empty())
      return Status::InvalidArgument(source + ": principal '" + p.name +
                                     "' has no proof: give it secret=, cert= or uid=");
  return std::shared_ptr<const Acl>(std::move(acl));
}

std::shared_ptr<const Principal> Acl::Everything(std::string name) {
  auto p = std::make_shared<Principal>();
  p->name = std::move(name);
  p->grants.push_back({"*", kAll});
  return p;
}

const Principal* Acl::BySecret(std::string_view secret) const {
  return BySecretDigest(Sha256(secret));
}

const Principal* Acl::BySecretDigest(const SecretDigest& h) const {
  const Principal* found = nullptr;
  for (const Principal& p : principals_)  // every hash compared, in constant time each
    for (const auto& s : p.secrets)
      if (CRYPTO_memcmp(s.data(), h.data(), h.size()) == 0 && !found) found = &p;
  return found;
}

const Principal* Acl::ByCert(const std::string& cn, const std::vector<std::string>& dns) const {
  for (const Principal& p : principals_)
    for (const std::string& c : p.certs)
      if (c == cn || std::find(dns.begin(), dns.end(), c) != dns.end()) return &p;
  return nullptr;
}

const Principal* Acl::ByCurve(std::string_view key) const {
  for (const Principal& p : principals_)
    if (std::find(p.curves.begin(), p.curves.end(), key) != p.curves.end()) return &p;
  return nullptr;
}

const Principal* Acl::ByUid(uid_t uid) const {
  for (const Principal& p : principals_)
    if (std::find(p.uids.begin(), p.uids.end(), uid) != p.uids.end()) return &p;
  return nullptr;
}

const Principal* Acl::ByName(std::string_view name) const {
  for (const Principal& p : principals_)
    if (p.name == name) return &p;
  return nullptr;
}

namespace {
// A u16-length-prefixed string at the front of *body, as BodyWriter::Str wrote it.
bool TakeStr(std::string_view* body, std::string_view* out) {
  if (body->size() < 2) return false;
  const size_t n =
      static_cast<uint8_t>((*body)[0]) | static_cast<size_t>(static_cast<uint8_t>((*body)[1])) << 8;
  if (body->size() < 2 + n) return false;
  *out = body->substr(2, n);
  body->remove_prefix(2 + n);
  return true;
}

// n x (ns, key): LOOKUP and ERASE_MANY.
void PairsScope(std::string_view body, RequestScope* s) {
  uint32_t n;
  if (body.size() < 4) return void(s->malformed = true);
  std::memcpy(&n, body.data(), 4);
  body.remove_prefix(4);
  for (uint32_t i = 0; i < n && i < kMaxBatch; ++i) {
    std::string_view ns, key;
    if (!TakeStr(&body, &ns) || !TakeStr(&body, &key)) return void(s->malformed = true);
    if (std::find(s->namespaces.begin(), s->namespaces.end(), ns) == s->namespaces.end())
      s->namespaces.push_back(ns);
  }
}
}  // namespace

RequestScope ScopeOf(Op op, std::string_view body) {
  RequestScope s;
  const OpRow* row = FindOp(op);
  if (!row || !row->request) return s;  // no right is needed to be refused as malformed
  s.right = row->right == kNoRight ? 0 : row->right;
  switch (row->ns) {
    case NsAt::kNone:
      return s;
    case NsAt::kEvery:
      s.every_namespace = true;
      return s;
    case NsAt::kPairs:
      PairsScope(body, &s);
      return s;
    case NsAt::kFirst:
      break;
  }
  std::string_view ns;  // the body's first field
  if (!TakeStr(&body, &ns))
    s.malformed = true;
  else
    s.namespaces.push_back(ns);
  return s;
}

std::string SecretHash(std::string_view secret) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "sha256:";
  for (uint8_t b : Sha256(secret)) out += {kHex[b >> 4], kHex[b & 15]};
  return out;
}

}  // namespace ecstore::net
