#include "server/prefetcher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "base/test_util.h"
#include "base/units.h"

namespace ecstore::net {
namespace {

// A store whose entries k0..k{n-1} are on disk only (closed, reopened).
std::unique_ptr<Store> OnDisk(const testing::TempDir& dir, int n) {
  Options o;
  o.pool_bytes = 64 * kMiB;
  {
    auto s = Store::Open(dir.path(), o);
    EXPECT_TRUE(s.ok());
    for (int i = 0; i < n; ++i) {
      auto p = testing::Payload(i, kMiB);
      EXPECT_TRUE(
          (*s)->Put("ns", "k" + std::to_string(i), testing::Bf16(kMiB), {p.data(), kMiB}).ok());
    }
    EXPECT_TRUE((*s)->Close().ok());
  }
  return std::move(Store::Open(dir.path(), o)).value();
}

// Hints are acted on by the prefetcher's thread, in order; one that would pass the queue's
// bound is dropped and counted, and one queued after Stop is refused.
TEST(Prefetcher, ActsOnQueuedHintsAndDropsWhatPassesItsBound) {
  testing::TempDir dir;
  auto store = OnDisk(dir, 3);
  Prefetcher p(store.get());
  EXPECT_FALSE(p.Queue("ns", std::vector<std::string>(Prefetcher::kMaxQueuedKeys + 1, "k0")));
  EXPECT_TRUE(p.Queue("ns", {"k0", "absent"}));
  EXPECT_TRUE(p.Queue("ns", {"k2"}));
  for (int i = 0; i < 500 && p.counters().done < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto c = p.counters();
  EXPECT_EQ(c.hints, 2u);
  EXPECT_EQ(c.dropped, 1u);
  EXPECT_EQ(c.done, 2u);
  EXPECT_TRUE(store->Lookup("ns", "k0")->tiers.has(Tier::kPool));
  EXPECT_TRUE(store->Lookup("ns", "k2")->tiers.has(Tier::kPool));
  EXPECT_FALSE(store->Lookup("ns", "k1")->tiers.has(Tier::kPool));
  p.Stop();
  EXPECT_FALSE(p.Queue("ns", {"k1"}));
}

// PREFETCH's answer: queued (u8 1) for valid keys; a bad key is the answer's error with
// nothing queued; a malformed body (no keys) is the outer status.
TEST(Prefetcher, AnswersPrefetchAndRefusesBadKeys) {
  testing::TempDir dir;
  auto store = OnDisk(dir, 1);
  Prefetcher p(store.get());
  auto ask = [&](const std::string& body) {
    BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
    return AnswerPrefetch(&p, &r);
  };
  auto ok = ask(KeysBody("ns", {"k0"}));
  ASSERT_TRUE(ok.ok() && ok->error.ok());
  EXPECT_EQ(ok->body, std::string(1, '\1'));
  auto bad = ask(KeysBody("ns", {"k0", ""}));
  ASSERT_TRUE(bad.ok());
  EXPECT_TRUE(bad->error.IsInvalidArgument()) << bad->error.ToString();
  BodyWriter none;
  none.Str("ns");
  none.U32(0);
  EXPECT_TRUE(ask(none.data()).status().IsInvalidArgument());
  p.Stop();
  EXPECT_EQ(p.counters().hints, 1u);
}

}  // namespace
}  // namespace ecstore::net
