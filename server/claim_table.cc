#include "server/claim_table.h"

#include "store/store.h"

namespace ecstore::net {

namespace {
// A claim outlives no hung holder by much: longer TTLs are cut to this.
constexpr uint32_t kMaxTtlMs = 60'000;
}  // namespace

Result<ClaimAnswer> ClaimTable::Claim(std::string_view ns, std::string_view key, bool present,
                                      std::chrono::milliseconds ttl, Clock::time_point now,
                                      uint64_t holder) {
  std::string id(ns);
  id += '\0';
  id += key;
  MutexLock l(&mu_);
  DropLapsed(now);
  auto it = claims_.find(id);
  if (present) {
    if (it != claims_.end()) Drop(it);  // its put landed: the claim has done its work
    return ClaimAnswer{ClaimOutcome::kPresent, 0};
  }
  if (it != claims_.end()) {
    ++held_;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(it->second.until - now);
    return ClaimAnswer{ClaimOutcome::kHeld, static_cast<uint32_t>(left.count() + 1)};
  }
  if (holder != 0 && per_holder_[holder] >= kMaxPerHolder)
    return Status::Busy("this connection holds " + std::to_string(kMaxPerHolder) +
                        " live claims: put or give up some (a claim lapses after its TTL) "
                        "before claiming more");
  it = claims_.emplace(std::move(id), Live{now + ttl, holder}).first;
  by_expiry_.emplace(it->second.until, &it->first);
  if (holder != 0) ++per_holder_[holder];
  ++granted_;
  return ClaimAnswer{ClaimOutcome::kGranted, 0};
}

void ClaimTable::Drop(Claims::iterator it) {
  by_expiry_.erase({it->second.until, &it->first});
  if (it->second.holder != 0) {
    auto h = per_holder_.find(it->second.holder);
    if (h != per_holder_.end() && --h->second == 0) per_holder_.erase(h);
  }
  claims_.erase(it);
}

void ClaimTable::DropLapsed(Clock::time_point now) {
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now)
    Drop(claims_.find(*by_expiry_.begin()->second));
}

size_t ClaimTable::live() const {
  MutexLock l(&mu_);
  return claims_.size();
}

uint64_t ClaimTable::granted() const {
  MutexLock l(&mu_);
  return granted_;
}

uint64_t ClaimTable::held() const {
  MutexLock l(&mu_);
  return held_;
}

Result<Answer> AnswerClaim(ClaimTable* claims, Store* store, BodyReader* r, uint64_t holder) {
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
  const auto a =
      claims->Claim(ns, key, *present, std::chrono::milliseconds(std::min(ttl_ms, kMaxTtlMs)),
                    ClaimTable::Clock::now(), holder);
  if (!a.ok()) return Answer{a.status(), Op::kOk, ""};
  BodyWriter w;
  w.U8(static_cast<uint8_t>(a->outcome));
  w.U32(a->ms_left);
  return Answer{Status::Ok(), Op::kOk, w.data()};
}

}  // namespace ecstore::net
