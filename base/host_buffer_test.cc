#include "base/host_buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>

namespace ecstore {
namespace {

TEST(HostBuffer, MapsWritableMemoryAndMovesIt) {
  auto b = HostBuffer::Allocate(8 << 20);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_NE(b->data(), nullptr);
  EXPECT_EQ(b->size(), 8u << 20);
  std::memset(b->data(), 0x5a, b->size());
  EXPECT_EQ(b->span(b->size() - 1, 1)[0], 0x5a);
  uint8_t* at = b->data();
  HostBuffer moved = std::move(b).value();
  EXPECT_EQ(moved.data(), at) << "a move hands the mapping over, no copy";
  EXPECT_EQ(moved.size(), 8u << 20);
  HostBuffer other;
  other = std::move(moved);
  EXPECT_EQ(moved.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(moved.size(), 0u);
  EXPECT_EQ(other.data()[0], 0x5a);
}

TEST(HostBuffer, ZeroBytesIsAClearError) {
  auto b = HostBuffer::Allocate(0);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(b.status().IsInvalidArgument()) << b.status().ToString();
}

}  // namespace
}  // namespace ecstore
