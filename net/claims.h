// CLAIM, the client's half: a short claim on a key that is not stored yet, so that of several
// engines that miss the same new key one computes it and the others wait for its put
// (server/claim_table.h keeps them on a server; cache/cache.h's Cache::Claim asks).
//
//   auto a = client->Claim("qwen", mm_hash, std::chrono::seconds(2));
//   if (a.ok() && a->outcome == ClaimOutcome::kGranted) ...  // compute and put
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "cache/cache.h"

namespace ecstore::net {

using ecstore::ClaimAnswer;  // cache/cache.h: Cache::Claim answers them
using ecstore::ClaimOutcome;
const char* ClaimOutcomeName(ClaimOutcome o);  // "granted" / "held" / "present"

// CLAIM's wire form: ns, key, ttl ms u32 -> OK(outcome u8, ms left u32).
std::string ClaimBody(std::string_view ns, std::string_view key, uint32_t ttl_ms);
Result<ClaimAnswer> ParseClaimReply(const std::string& body);

}  // namespace ecstore::net
