// ClaimTable: short claims on keys that are not stored yet, so that of several engines that
// miss the same new key at once one computes it and the others wait for its put. The first
// asker of an absent key is granted the claim for `ttl`; later askers hear it is held (and
// for how much longer) until the entry is put -- then they hear it is present -- or the
// claim lapses (its holder died or gave up), when the next asker is granted it. A claim is
// a hint between cooperating engines, never a lock on the store: a put needs no claim.
//
//   ClaimTable claims;
//   auto a = claims.Claim("qwen", mm_hash, /*present=*/false, std::chrono::seconds(2));
//   if (a.outcome == ClaimOutcome::kGranted) ...  // compute and put; others wait for it
//
// Thread rules: thread-safe (one mutex, held for a map operation; no I/O under it).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/mutex.h"
#include "net/protocol.h"
#include "store/cache.h"

namespace ecstore {
class Store;
}

namespace ecstore::net {

using ecstore::ClaimAnswer;  // store/cache.h: Cache::Claim answers them
using ecstore::ClaimOutcome;
const char* ClaimOutcomeName(ClaimOutcome o);  // "granted" / "held" / "present"

class ClaimTable {
 public:
  using Clock = std::chrono::steady_clock;
  // `present`: whether the store holds the key now (asked by the caller, outside the lock).
  ClaimAnswer Claim(std::string_view ns, std::string_view key, bool present,
                    std::chrono::milliseconds ttl, Clock::time_point now = Clock::now())
      EXCLUDES(mu_);
  uint64_t granted() const EXCLUDES(mu_);
  uint64_t held() const EXCLUDES(mu_);

 private:
  void DropLapsed(Clock::time_point now) REQUIRES(mu_);
  mutable Mutex mu_;
  std::unordered_map<std::string, Clock::time_point> until_ GUARDED_BY(mu_);  // ns \0 key
  uint64_t granted_ GUARDED_BY(mu_) = 0;
  uint64_t held_ GUARDED_BY(mu_) = 0;
};

// CLAIM's wire form: ns, key, ttl ms u32 -> OK(outcome u8, ms left u32).
std::string ClaimBody(std::string_view ns, std::string_view key, uint32_t ttl_ms);
// Answers a CLAIM against `store` (whether the key is present) and `claims`.
Result<Answer> AnswerClaim(ClaimTable* claims, Store* store, BodyReader* r);
Result<ClaimAnswer> ParseClaimReply(const std::string& body);

}  // namespace ecstore::net
