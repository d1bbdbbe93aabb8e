// LeaseTable: a connection's leases, bounded, released by id, by TTL and at the end.
#include "server/lease_table.h"

#include <gtest/gtest.h>

#include <set>

namespace ecstore::net {
namespace {

using std::chrono::milliseconds;

// Counts which leases were released (their tokens), as a store's pool would unpin them.
class CountingReleaser : public ReadLease::Releaser {
 public:
  void Release(void* token) override { released.insert(reinterpret_cast<uintptr_t>(token)); }
  std::set<uintptr_t> released;
};

ReadLease Lease(CountingReleaser* r, uintptr_t token, uint64_t bytes) {
  EntryInfo info;
  info.key = "k" + std::to_string(token);
  info.bytes = bytes;
  static const uint8_t kByte = 0;
  return ReadLease(r, reinterpret_cast<void*>(token), &kByte, info);
}

TEST(LeaseTable, BoundsCountAndBytesButAlwaysAdmitsTheFirst) {
  CountingReleaser r;
  std::atomic<uint64_t> total{0};
  LeaseTable t({.max_leases = 2, .max_bytes = 100, .ttl = milliseconds(1000)}, &total);
  auto big = t.Add(Lease(&r, 1, 500));  // larger than the byte share: admitted, being first
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(*big, 1u);
  auto refused = t.Add(Lease(&r, 2, 10));
  ASSERT_TRUE(refused.status().IsBusy());
  EXPECT_NE(refused.status().ToString().find("holds 1 leases (500 bytes)"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(r.released, std::set<uintptr_t>{2});  // the refused lease is not held
  t.Release(*big);
  EXPECT_EQ(r.released, (std::set<uintptr_t>{1, 2}));
  auto a = t.Add(Lease(&r, 3, 60)), b = t.Add(Lease(&r, 4, 60));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(b.status().IsBusy()) << "120 bytes is over the 100-byte share";
  auto c = t.Add(Lease(&r, 5, 40));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(t.Add(Lease(&r, 6, 0)).status().IsBusy()) << "2 leases is the count limit";
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.bytes(), 100u);
  EXPECT_EQ(total.load(), 2u);
  EXPECT_GT(*c, *a) << "ids are never reused";
}

TEST(LeaseTable, ReleaseOfAnUnknownIdIsIgnored) {
  CountingReleaser r;
  std::atomic<uint64_t> total{0};
  LeaseTable t({.max_leases = 8, .max_bytes = 1 << 20, .ttl = milliseconds(1000)}, &total);
  auto id = t.Add(Lease(&r, 1, 10));
  ASSERT_TRUE(id.ok());
  t.Release(*id + 7);
  t.Release(*id);
  t.Release(*id);  // twice: the second is an unknown id
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.bytes(), 0u);
  EXPECT_EQ(total.load(), 0u);
  EXPECT_EQ(r.released, std::set<uintptr_t>{1});
}

TEST(LeaseTable, ExpiresLeasesOlderThanTheTtlOnly) {
  CountingReleaser r;
  std::atomic<uint64_t> total{0};
  LeaseTable t({.max_leases = 8, .max_bytes = 1 << 20, .ttl = milliseconds(100)}, &total);
  const auto t0 = LeaseTable::Clock::now();
  ASSERT_TRUE(t.Add(Lease(&r, 1, 10), t0).ok());
  ASSERT_TRUE(t.Add(Lease(&r, 2, 20), t0 + milliseconds(60)).ok());
  EXPECT_EQ(t.Expire(t0 + milliseconds(99)), 0u);
  EXPECT_EQ(t.Expire(t0 + milliseconds(100)), 1u);  // the first, at exactly its TTL
  EXPECT_EQ(r.released, std::set<uintptr_t>{1});
  EXPECT_EQ(t.bytes(), 20u);
  EXPECT_EQ(total.load(), 1u);
  EXPECT_EQ(t.Expire(t0 + milliseconds(160)), 1u);
  EXPECT_TRUE(t.empty());
}

TEST(LeaseTable, TheEndOfTheConnectionReleasesEverythingAndTheSharedCount) {
  CountingReleaser r;
  std::atomic<uint64_t> total{5};  // another connection's leases
  {
    LeaseTable t({.max_leases = 8, .max_bytes = 1 << 20, .ttl = milliseconds(1000)}, &total);
    for (uintptr_t i = 1; i <= 3; ++i) ASSERT_TRUE(t.Add(Lease(&r, i, 10)).ok());
    EXPECT_EQ(total.load(), 8u);
  }
  EXPECT_EQ(total.load(), 5u);
  EXPECT_EQ(r.released, (std::set<uintptr_t>{1, 2, 3}));
}

}  // namespace
}  // namespace ecstore::net
