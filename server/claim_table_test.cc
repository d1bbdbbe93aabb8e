#include "server/claim_table.h"

#include <gtest/gtest.h>

namespace ecstore::net {
namespace {

using std::chrono::milliseconds;

TEST(ClaimTable, TheFirstAskerIsGrantedLaterOnesHearItIsHeldUntilThePut) {
  ClaimTable t;
  const auto now = ClaimTable::Clock::now();
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(2000), now)->outcome, ClaimOutcome::kGranted);
  for (int i = 0; i < 7; ++i) {
    auto a = t.Claim("ns", "k", false, milliseconds(2000), now + milliseconds(100));
    EXPECT_EQ(a->outcome, ClaimOutcome::kHeld);
    EXPECT_GE(a->ms_left, 1900u);
    EXPECT_LE(a->ms_left, 1901u);
  }
  EXPECT_EQ(t.Claim("ns", "k", true, milliseconds(2000), now)->outcome, ClaimOutcome::kPresent);
  EXPECT_EQ(t.granted(), 1u);
  EXPECT_EQ(t.held(), 7u);
  // Other keys, and the same key in another namespace, are claims of their own.
  EXPECT_EQ(t.Claim("ns", "k2", false, milliseconds(2000), now)->outcome, ClaimOutcome::kGranted);
  EXPECT_EQ(t.Claim("ns2", "k2", false, milliseconds(2000), now)->outcome, ClaimOutcome::kGranted);
}

TEST(ClaimTable, AClaimWhoseHolderNeverPutsLapsesAndTheNextAskerIsGrantedIt) {
  ClaimTable t;
  const auto now = ClaimTable::Clock::now();
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(500), now)->outcome, ClaimOutcome::kGranted);
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(500), now + milliseconds(499))->outcome,
            ClaimOutcome::kHeld);
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(500), now + milliseconds(500))->outcome,
            ClaimOutcome::kGranted);
  EXPECT_EQ(t.granted(), 2u);
}

TEST(ClaimTable, AnEntryPutAndErasedAgainIsClaimedAfresh) {
  ClaimTable t;
  const auto now = ClaimTable::Clock::now();
  t.Claim("ns", "k", false, milliseconds(5000), now);
  EXPECT_EQ(t.Claim("ns", "k", true, milliseconds(5000), now)->outcome, ClaimOutcome::kPresent);
  // The put's claim is gone with it: an absent key later is a new computation.
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(5000), now)->outcome, ClaimOutcome::kGranted);
}

// Lapsed claims leave as they lapse, in expiry order, whatever their number: the table holds
// the live ones only, so 60,000 claims cost what 60,000 map operations do.
TEST(ClaimTable, LapsedClaimsLeaveInExpiryOrderAndManyStayCheap) {
  ClaimTable t;
  const auto now = ClaimTable::Clock::now();
  constexpr int kClaims = 60'000;
  for (int i = 0; i < kClaims; ++i) {
    // Every claim lives 1 s; one is asked each 0.1 ms, so about 10,000 are live at a time.
    auto at = now + std::chrono::microseconds(100 * i);
    auto a = t.Claim("ns", "k" + std::to_string(i), false, milliseconds(1000), at);
    ASSERT_TRUE(a.ok());
    ASSERT_EQ(a->outcome, ClaimOutcome::kGranted);
  }
  EXPECT_LE(t.live(), 10'001u);
  EXPECT_GE(t.live(), 9'999u);
  // The newest are held, the oldest have lapsed and are granted afresh.
  const auto end = now + std::chrono::microseconds(100 * kClaims);
  EXPECT_EQ(t.Claim("ns", "k59999", false, milliseconds(1000), end)->outcome, ClaimOutcome::kHeld);
  EXPECT_EQ(t.Claim("ns", "k0", false, milliseconds(1000), end)->outcome, ClaimOutcome::kGranted);
  // Once all have lapsed, none is kept.
  t.Claim("ns", "x", true, milliseconds(1000), end + milliseconds(2000));
  EXPECT_EQ(t.live(), 0u);
  EXPECT_EQ(t.granted(), static_cast<uint64_t>(kClaims) + 1);
}

TEST(ClaimTable, OneHolderIsCappedAndToldWhyOthersAreNot) {
  ClaimTable t;
  const auto now = ClaimTable::Clock::now();
  for (size_t i = 0; i < ClaimTable::kMaxPerHolder; ++i)
    ASSERT_TRUE(t.Claim("ns", "k" + std::to_string(i), false, milliseconds(1000), now, 7).ok());
  auto refused = t.Claim("ns", "one-more", false, milliseconds(1000), now, 7);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsBusy()) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("live claims"), std::string::npos);
  // Others claim on; a claim held by another is still answered as held.
  EXPECT_EQ(t.Claim("ns", "one-more", false, milliseconds(1000), now, 8)->outcome,
            ClaimOutcome::kGranted);
  EXPECT_EQ(t.Claim("ns", "k0", false, milliseconds(1000), now, 7)->outcome, ClaimOutcome::kHeld);
  // A put frees its claim's place; lapsed claims free theirs.
  EXPECT_EQ(t.Claim("ns", "k0", true, milliseconds(1000), now, 7)->outcome, ClaimOutcome::kPresent);
  EXPECT_TRUE(t.Claim("ns", "another", false, milliseconds(1000), now, 7).ok());
  EXPECT_FALSE(t.Claim("ns", "and-another", false, milliseconds(1000), now, 7).ok());
  EXPECT_TRUE(t.Claim("ns", "later", false, milliseconds(1000), now + milliseconds(1000), 7).ok());
}

TEST(ClaimTable, AClaimRequestIsCheckedAndAnsweredOnTheWire) {
  BodyWriter bad;
  bad.Str("ns");
  bad.Str("k");  // no TTL: malformed, the connection closes
  BodyReader r(reinterpret_cast<const uint8_t*>(bad.data().data()), bad.data().size());
  ClaimTable t;
  EXPECT_FALSE(AnswerClaim(&t, nullptr, &r).ok());
  const std::string zero = ClaimBody("ns", "k", 0);
  BodyReader z(reinterpret_cast<const uint8_t*>(zero.data()), zero.size());
  auto a = AnswerClaim(&t, nullptr, &z);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->error.IsInvalidArgument()) << a->error.ToString();
  BodyWriter reply;
  reply.U8(1);
  reply.U32(250);
  auto parsed = ParseClaimReply(reply.data());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->outcome, ClaimOutcome::kHeld);
  EXPECT_EQ(parsed->ms_left, 250u);
  EXPECT_FALSE(ParseClaimReply("x").ok());
}

}  // namespace
}  // namespace ecstore::net
