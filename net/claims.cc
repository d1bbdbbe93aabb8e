#include "net/claims.h"

#include "net/protocol.h"

namespace ecstore::net {

const char* ClaimOutcomeName(ClaimOutcome o) {
  switch (o) {
    case ClaimOutcome::kGranted:
      return "granted";
    case ClaimOutcome::kHeld:
      return "held";
    case ClaimOutcome::kPresent:
      return "present";
  }
  return "granted";
}

std::string ClaimBody(std::string_view ns, std::string_view key, uint32_t ttl_ms) {
  BodyWriter w;
  w.Str(ns);
  w.Str(key);
  w.U32(ttl_ms);
  return w.data();
}

Result<ClaimAnswer> ParseClaimReply(const std::string& body) {
  BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  uint8_t o = 0;
  ClaimAnswer a;
  if (!r.U8(&o) || !r.U32(&a.ms_left) || o > 2) return Status::Unavailable("malformed CLAIM reply");
  a.outcome = static_cast<ClaimOutcome>(o);
  return a;
}

}  // namespace ecstore::net
