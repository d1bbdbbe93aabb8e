#include "net/claim_table.h"

#include <gtest/gtest.h>

namespace ecstore::net {
namespace {

using std::chrono::milliseconds;

TEST(ClaimTable, TheFirstAskerIsGrantedLaterOnesHearItIsHeldUntilThePut) {
  ClaimTable t;
  const auto now = ClaimTable::Clock::now();
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(2000), now).outcome, ClaimOutcome::kGranted);
  for (int i = 0; i < 7; ++i) {
    auto a = t.Claim("ns", "k", false, milliseconds(2000), now + milliseconds(100));
    EXPECT_EQ(a.outcome, ClaimOutcome::kHeld);
    EXPECT_GE(a.ms_left, 1900u);
    EXPECT_LE(a.ms_left, 1901u);
  }
  EXPECT_EQ(t.Claim("ns", "k", true, milliseconds(2000), now).outcome, ClaimOutcome::kPresent);
  EXPECT_EQ(t.granted(), 1u);
  EXPECT_EQ(t.held(), 7u);
  // Other keys, and the same key in another namespace, are claims of their own.
  EXPECT_EQ(t.Claim("ns", "k2", false, milliseconds(2000), now).outcome, ClaimOutcome::kGranted);
  EXPECT_EQ(t.Claim("ns2", "k2", false, milliseconds(2000), now).outcome, ClaimOutcome::kGranted);
}

TEST(ClaimTable, AClaimWhoseHolderNeverPutsLapsesAndTheNextAskerIsGrantedIt) {
  ClaimTable t;
  const auto now = ClaimTable::Clock::now();
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(500), now).outcome, ClaimOutcome::kGranted);
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(500), now + milliseconds(499)).outcome,
            ClaimOutcome::kHeld);
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(500), now + milliseconds(500)).outcome,
            ClaimOutcome::kGranted);
  EXPECT_EQ(t.granted(), 2u);
}

TEST(ClaimTable, AnEntryPutAndErasedAgainIsClaimedAfresh) {
  ClaimTable t;
  const auto now = ClaimTable::Clock::now();
  t.Claim("ns", "k", false, milliseconds(5000), now);
  EXPECT_EQ(t.Claim("ns", "k", true, milliseconds(5000), now).outcome, ClaimOutcome::kPresent);
  // The put's claim is gone with it: an absent key later is a new computation.
  EXPECT_EQ(t.Claim("ns", "k", false, milliseconds(5000), now).outcome, ClaimOutcome::kGranted);
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
