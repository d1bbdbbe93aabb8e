// A Keydir with what it needs around it, for unit tests of it and of what works on it (the
// evictors): a host pool, a durable tier in a temp directory, and an Env whose clock the test
// sets; a device tier where the test brings one (store/device_tier_test.cc).
// Thread rules: the test's thread builds it; kd's mu guards what Keydir says it guards.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "base/env.h"
#include "base/test_util.h"
#include "store/keydir.h"

namespace ecstore::testing {

class FixedClock : public EnvWrapper {
 public:
  FixedClock() : EnvWrapper(Env::Default()) {}
  uint64_t NowMicros() override { return now; }
  uint64_t now = 1'000'000;
};

struct KeydirFixture {
  TempDir dir;
  FixedClock env;
  std::unique_ptr<MemoryTier> pool;
  std::unique_ptr<DurableTier> durable;
  std::unique_ptr<Keydir> kd;
  int lease_ends = 0;

  explicit KeydirFixture(uint64_t pool_bytes = 1 << 20, MemoryTier* device = nullptr) {
    pool = MemoryTier::Open(Tier::kPool, NewHostPinnedBackend(), pool_bytes, {}).value();
    DurableOptions o;
    o.quota_bytes = 16 << 20;
    auto d = DurableTier::Open(dir.path(), &env, o);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    durable = std::move(d).value();
    kd = std::make_unique<Keydir>(&env, pool.get(), device, durable.get(), false);
    kd->OnLeaseEnd([this] { ++lease_ends; });
    Keydir::Lock l(kd.get());
    EXPECT_TRUE(kd->Recover().ok());
  }
  // An entry of `bytes` whose bytes are complete in a new pool block, as a Put makes it.
  EntryPtr Complete(const std::string& key, uint64_t bytes) {
    EntryPtr e(new Entry);
    e->ns = "ns";
    e->key = key;
    e->bytes = bytes;
    e->meta = {DType::kU8, {static_cast<int64_t>(bytes)}};
    e->seq = durable->NextSeq();
    Keydir::Lock l(kd.get());  // the pool is the keydir's (an evictor may be at work)
    e->pool = pool->Allocate(bytes);
    EXPECT_TRUE(e->pool.has_value());
    return e;
  }
  EntryPtr Insert(const std::string& key, uint64_t bytes) {
    EntryPtr e = Complete(key, bytes);
    Keydir::Lock l(kd.get());
    std::optional<Tombstone> tomb;
    kd->InsertLocked(e, &tomb);
    EXPECT_FALSE(tomb.has_value()) << "no disk copy, no tombstone";
    return e;
  }
};

}  // namespace ecstore::testing
