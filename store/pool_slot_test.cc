// Store::ReserveSlot: a pool block filled in place and committed through the Cache
// interface, once; a slot dropped uncommitted puts nothing and gives its block back.
#include <gtest/gtest.h>

#include <cstring>

#include "base/test_util.h"
#include "store/store.h"

namespace ecstore {
namespace {

using testing::Bf16;
using testing::Payload;
using testing::TempDir;

TEST(PoolSlot, AFilledSlotIsCommittedOnceAndADroppedOnePutsNothing) {
  TempDir dir;
  Options o;
  o.pool_bytes = 16 << 20;
  o.write_back = false;  // no spill in the background: the checksum waits for one
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Cache& c = **s;
  ASSERT_TRUE(c.capabilities().reserve && c.capabilities().reservations);
  Reservations& r = *c.capabilities().reservations;
  const uint64_t n = 1 << 20;
  const uint64_t used_before = (*s)->Stats()->pool().used;
  {
    auto dropped = r.ReserveSlot("ns", "gone", Bf16(n), n);
    ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
    EXPECT_FALSE((*dropped)->landing()) << "a pool block is filled, then committed";
  }
  EXPECT_TRUE(c.Lookup("ns", "gone").status().IsNotFound());
  EXPECT_EQ((*s)->Stats()->pool().used, used_before) << "the dropped slot's block went back";

  auto slot = r.ReserveSlot("ns", "k", Bf16(n), n);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  ASSERT_EQ((*slot)->bytes().size(), n);
  std::memcpy((*slot)->bytes().data(), Payload(3, n).data(), n);
  EXPECT_TRUE(c.Lookup("ns", "k").status().IsNotFound()) << "not visible before the commit";
  ASSERT_TRUE((*slot)->Commit(/*checksum_when_spilled=*/true).ok());
  Status again = (*slot)->Commit(false);
  EXPECT_TRUE(again.IsInvalidArgument()) << again.ToString();
  std::vector<uint8_t> got(n);
  ASSERT_TRUE(c.Get("ns", "k", {got.data(), n}).ok());
  EXPECT_EQ(got, Payload(3, n));
  EXPECT_EQ(c.Lookup("ns", "k")->checksum, 0u) << "hashed by its first spill, not the commit";
}

}  // namespace
}  // namespace ecstore
