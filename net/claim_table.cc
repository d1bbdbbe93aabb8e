#include "net/claim_table.h"

#include "store/store.h"

namespace ecstore::net {

namespace {
// Claims are few (keys being computed now); lapsed ones are dropped once this many are kept.
constexpr size_t kSweepAbove = 4096;
// A claim outlives no hung holder by much: longer TTLs are cut to this.
constexpr uint32_t kMaxTtlMs = 60'000;
}  // namespace

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

ClaimAnswer ClaimTable::Claim(std::string_view ns, std::string_view key, bool present,
                              std::chrono::milliseconds ttl, Clock::time_point now) {
  std::string id(ns);
  id += '\0';
  id += key;
  MutexLock l(&mu_);
  if (present) {
    until_.erase(id);  // its put landed: the claim has done its work
    return {ClaimOutcome::kPresent, 0};
  }
  auto it = until_.find(id);
  if (it != until_.end() && it->second > now) {
    ++held_;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(it->second - now);
    return {ClaimOutcome::kHeld, static_cast<uint32_t>(left.count() + 1)};
  }
  if (until_.size() >= kSweepAbove) DropLapsed(now);
  until_[id] = now + ttl;
  ++granted_;
  return {ClaimOutcome::kGranted, 0};
}

void ClaimTable::DropLapsed(Clock::time_point now) {
  for (auto it = until_.begin(); it != until_.end();)
    it = it->second <= now ? until_.erase(it) : std::next(it);
}

uint64_t ClaimTable::granted() const {
  MutexLock l(&mu_);
  return granted_;
}

uint64_t ClaimTable::held() const {
  MutexLock l(&mu_);
  return held_;
}

std::string ClaimBody(std::string_view ns, std::string_view key, uint32_t ttl_ms) {
  BodyWriter w;
  w.Str(ns);
  w.Str(key);
  w.U32(ttl_ms);
  return w.data();
}

Result<Answer> AnswerClaim(ClaimTable* claims, Store* store, BodyReader* r) {
  auto k = ParseKeyBody(r);
  uint32_t ttl_ms = 0;
  if (k.ok() && !r->U32(&ttl_ms)) return Status::InvalidArgument("malformed CLAIM");
  if (!k.ok()) return Answer{k.status(), Op::kOk, ""};
  if (ttl_ms == 0)
    return Answer{Status::InvalidArgument("a claim needs a TTL above 0 ms"), Op::kOk, ""};
  const std::string& ns = k->ns;
  const std::string& key = k->key;
  auto present = store->Contains(ns, key);
  if (!present.ok()) return Answer{present.status(), Op::kOk, ""};
  const ClaimAnswer a =
      claims->Claim(ns, key, *present, std::chrono::milliseconds(std::min(ttl_ms, kMaxTtlMs)));
  BodyWriter w;
  w.U8(static_cast<uint8_t>(a.outcome));
  w.U32(a.ms_left);
  return Answer{Status::Ok(), Op::kOk, w.data()};
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
