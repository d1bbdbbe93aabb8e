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
// Each call is O(log n) in the live claims: lapsed claims leave in expiry order as they lapse.
// One holder (a connection) holds at most kMaxPerHolder live claims; past that it is refused
// (Busy), so one client cannot grow the table without bound.
//
// Thread rules: thread-safe (one mutex, held for a map operation; no I/O under it).
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/mutex.h"
#include "cache/cache.h"
#include "net/claims.h"
#include "net/protocol.h"

namespace ecstore {
class Store;
}

namespace ecstore::net {

class ClaimTable {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxPerHolder = 4096;
  // `present`: whether the store holds the key now (asked by the caller, outside the lock).
  // `holder`: who asks (a connection's id; 0: no cap). Busy where that holder already holds
  // kMaxPerHolder live claims.
  Result<ClaimAnswer> Claim(std::string_view ns, std::string_view key, bool present,
                            std::chrono::milliseconds ttl, Clock::time_point now = Clock::now(),
                            uint64_t holder = 0) EXCLUDES(mu_);
  uint64_t granted() const EXCLUDES(mu_);
  uint64_t held() const EXCLUDES(mu_);
  size_t live() const
      EXCLUDES(mu_);  // claims kept: granted and not yet lapsed (as of the last call)

 private:
  struct Live {
    Clock::time_point until;
    uint64_t holder = 0;
  };
  using Claims = std::unordered_map<std::string, Live>;  // ns \0 key
  void Drop(Claims::iterator it) REQUIRES(mu_);
  void DropLapsed(Clock::time_point now) REQUIRES(mu_);
  mutable Mutex mu_;
  Claims claims_ GUARDED_BY(mu_);
  // The same claims by expiry (a map's keys keep their address while they are in it).
  std::set<std::pair<Clock::time_point, const std::string*>> by_expiry_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, size_t> per_holder_ GUARDED_BY(mu_);
  uint64_t granted_ GUARDED_BY(mu_) = 0;
  uint64_t held_ GUARDED_BY(mu_) = 0;
};

// Answers a CLAIM of connection `holder` against `store` (whether the key is present) and
// `claims`.
Result<Answer> AnswerClaim(ClaimTable* claims, Store* store, BodyReader* r, uint64_t holder = 0);

}  // namespace ecstore::net
