#include "cache/told_copies.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace ecstore {
namespace {

ReadLease LeaseOf(uint64_t bytes) {
  EntryInfo info;
  info.bytes = bytes;
  return ReadLease(nullptr, nullptr, nullptr, info);
}

// Each key's new bytes are handed over once, in order; a read redone at another place starts
// again at 0; nothing goes past a key's buffer; a piece the copy refuses is not counted, so
// that key's buffer is not Whole. Whole also needs the watch's streamed mark.
TEST(ToldCopies, HandsOverEachNewPieceOnceAndSaysWhichBuffersAreWhole) {
  std::vector<uint8_t> a(8, 0), b(4, 0), c(8, 0);
  const std::vector<std::span<uint8_t>> dsts{
      {a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  const std::vector<uint8_t> src1(8, 1), src2(8, 2), src3(8, 3);
  int batch_ends = 0;
  bool refuse = false;
  ToldCopies told(
      dsts,
      [&](void* d, const uint8_t* s, uint64_t n) {
        if (refuse) return false;
        std::memcpy(d, s, n);
        return true;
      },
      [&] { ++batch_ends; });
  Cache::LandingWatch* w = told.watch();
  w->landed(0, src1.data(), 3);
  w->landed(0, src1.data(), 3);  // nothing new
  w->landed(0, src2.data(), 5);  // redone elsewhere: [0, 5) from there
  w->landed(0, src2.data(), 8);
  w->landed(1, src1.data(), 8);  // the buffer holds 4: no more is copied
  refuse = true;
  w->landed(2, src3.data(), 8);
  w->batch_end();
  w->streamed = {true, true, true};
  EXPECT_EQ(a, std::vector<uint8_t>(8, 2));
  EXPECT_EQ(b, std::vector<uint8_t>(4, 1));
  EXPECT_EQ(c, std::vector<uint8_t>(8, 0));
  EXPECT_EQ(batch_ends, 1);
  EXPECT_TRUE(told.Whole(0, LeaseOf(8)));
  EXPECT_FALSE(told.Whole(1, LeaseOf(8))) << "an entry larger than its buffer";
  EXPECT_FALSE(told.Whole(2, LeaseOf(8))) << "a refused copy";
  w->streamed = {false, true, true};
  EXPECT_FALSE(told.Whole(0, LeaseOf(8))) << "a lease that came another way";
}

}  // namespace
}  // namespace ecstore
