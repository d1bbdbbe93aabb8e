#include "store/frequency_sketch.h"

#include <gtest/gtest.h>

namespace ecstore {
namespace {

TEST(FrequencySketch, CountsRequestsPerKeyAndTheirMass) {
  FrequencySketch s;
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(s.Add(7, 1000));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(s.Add(8, 1000));
  EXPECT_EQ(s.Count(7), 5);
  EXPECT_EQ(s.Count(8), 3);
  EXPECT_EQ(s.Count(9), 0);  // never requested
  EXPECT_EQ(s.Mass(), 8);
}

// Every `period` requests the counts and the mass halve together, so a count / mass rate
// keeps its scale; a key requested once keeps a fraction through a halving.
TEST(FrequencySketch, CountsHalveEveryPeriodAndKeepTheirFraction) {
  FrequencySketch s;
  for (int i = 0; i < 8; ++i) s.Add(1, 16);
  s.Add(2, 16);
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(s.Add(100 + i, 16));
  EXPECT_TRUE(s.Add(200, 16));  // the 16th request
  EXPECT_EQ(s.Count(1), 4);
  EXPECT_EQ(s.Count(2), 0.5);
  EXPECT_EQ(s.Mass(), 8);
  EXPECT_EQ(s.Count(1) / s.Mass(), 0.5);  // 8 of 16 requests before, 4 of 8 now
}

// Conservative update: a key that shares a counter with a popular one is not inflated in the
// rows where it does not (with 20 000 keys in 64 Ki columns few collide in all four rows).
TEST(FrequencySketch, ManyKeysKeepTheirOwnCounts) {
  FrequencySketch s;
  for (uint64_t k = 0; k < 20000; ++k) s.Add(k * 0x10001 + 3, 1 << 30);
  for (int i = 0; i < 100; ++i) s.Add(42, 1 << 30);
  int exact = 0;
  for (uint64_t k = 0; k < 20000; ++k) exact += s.Count(k * 0x10001 + 3) == 1;
  EXPECT_GE(exact, 19900);
  EXPECT_EQ(s.Count(42), 100);
}

}  // namespace
}  // namespace ecstore
