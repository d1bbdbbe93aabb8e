// DeviceEvictor on host memory standing in for the GPU's: a DeviceTier whose copies are
// memcpy (and fail when told), so that the device tier's eviction runs on every machine.
// Demotion of the coldest device-only entries to the host pool, bytes and all; an entry that
// already has a host copy leaving without a copy; leased entries staying, and a put saying
// why; a failed copy losing nothing; promotion; DemoteAll.
#include "store/device_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>

#include "store/device_tier_test_util.h"
#include "store/keydir_test_util.h"

namespace ecstore {
namespace {

using std::chrono::milliseconds;
using testing::HostDeviceTier;
using testing::KeydirFixture;

constexpr uint64_t kDeviceBlock = 64 << 10;
constexpr uint64_t kDeviceBytes = 1 << 20;  // 16 entries of kDeviceBlock fill it

struct DeviceFixture {
  std::unique_ptr<HostDeviceTier> dev = HostDeviceTier::Make(kDeviceBytes);
  KeydirFixture f{4 << 20, dev->memory()};
  HostEvictor host{f.kd.get(), milliseconds(2000), /*write_back=*/false};
  DeviceEvictor ev{f.kd.get(), dev.get(), &host, milliseconds(2000)};
  ~DeviceFixture() { ev.Stop(); }

  // An entry put from device memory: its bytes (all `fill`) only in a device block.
  EntryPtr OnDevice(const std::string& key, uint8_t fill) {
    Keydir::Lock l(f.kd.get());
    std::optional<PoolBlock> blk = f.kd->device().Allocate(kDeviceBlock);
    EXPECT_TRUE(blk.has_value()) << "the device pool has room for " << key;
    std::memset(f.kd->device().Ptr(*blk), fill, kDeviceBlock);
    Keydir::FreshEntry fresh;
    fresh.ns = "ns";
    fresh.key = key;
    fresh.meta = {DType::kU8, {static_cast<int64_t>(kDeviceBlock)}};
    fresh.bytes = kDeviceBlock;
    fresh.checksummed = false;
    fresh.tier = Tier::kDevice;
    fresh.block = *blk;
    EntryPtr old;
    std::optional<Tombstone> tomb;
    auto e = f.kd->InstallLocked(std::move(fresh), &old, &tomb);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return *e;
  }
  void Fill() {
    for (int i = 0; i < 16; ++i) OnDevice("k" + std::to_string(i), static_cast<uint8_t>(i + 1));
  }
  // Whether every byte of the entry's host copy is `fill`.
  bool HostCopyHolds(const EntryPtr& e, uint8_t fill) {
    Keydir::Lock l(f.kd.get());
    if (!e->pool) return false;
    const uint8_t* p = f.kd->pool().Ptr(*e->pool);
    for (uint64_t i = 0; i < e->bytes; ++i)
      if (p[i] != fill) return false;
    return true;
  }
  void FreeDevice(const PoolBlock& b) {
    Keydir::Lock l(f.kd.get());
    f.kd->device().Free(b);
  }
};

EntryPtr Find(KeydirFixture& f, const std::string& key) {
  Keydir::Lock l(f.kd.get());
  auto e = f.kd->FindLocked("ns", key, false);
  EXPECT_TRUE(e.ok()) << key << ": " << e.status().ToString();
  return e.ok() ? *e : EntryPtr();
}

TEST(DeviceEvictor, AFullDevicePoolDemotesItsColdestEntriesToTheHostPoolBytesAndAll) {
  DeviceFixture d;
  d.Fill();
  PoolBlock b;
  Status busy = d.ev.Allocate(kDeviceBlock, /*wait=*/false, &b);
  EXPECT_TRUE(busy.IsBusy()) << busy.ToString();
  d.ev.Start();
  ASSERT_TRUE(d.ev.Allocate(kDeviceBlock, /*wait=*/true, &b).ok());
  EntryPtr coldest = Find(d.f, "k0"), warmest = Find(d.f, "k15");
  EXPECT_TRUE(d.HostCopyHolds(coldest, 1)) << "k0's bytes went to the host pool";
  {
    Keydir::Lock l(d.f.kd.get());
    EXPECT_FALSE(coldest->device.has_value()) << "and left the device";
    EXPECT_TRUE(warmest->device.has_value());
    EXPECT_FALSE(warmest->pool.has_value()) << "the warmest was not copied";
    EXPECT_FALSE(coldest->checksummed) << "hashed when spilled, not at demotion";
    EXPECT_GE(d.f.kd->device().counters().spills, 1u);
    EXPECT_EQ(coldest->leases, 0) << "the demotion's pin was let go";
  }
  EXPECT_GE(d.dev->down.load(), 1);
  d.FreeDevice(b);
}

TEST(DeviceEvictor, AnEntryWithAHostCopyLeavesTheDeviceWithoutACopy) {
  DeviceFixture d;
  d.Fill();
  EntryPtr k0 = Find(d.f, "k0");
  ASSERT_TRUE(d.ev.CopyToHost(k0).ok());  // a host read of it made a host copy
  ASSERT_EQ(d.dev->down.load(), 1);
  {
    Keydir::Lock l(d.f.kd.get());
    ASSERT_TRUE(k0->device.has_value()) << "CopyToHost keeps the device copy";
  }
  d.ev.Start();
  PoolBlock b;
  ASSERT_TRUE(d.ev.Allocate(kDeviceBlock, /*wait=*/true, &b).ok());
  d.ev.Stop();  // the block taken, the pool is above its watermark again: more may have gone
  EXPECT_TRUE(d.HostCopyHolds(k0, 1));
  int demoted = 0;  // others that left the device since (each with a copy)
  for (int i = 1; i < 16; ++i) {
    EntryPtr e = Find(d.f, "k" + std::to_string(i));
    Keydir::Lock l(d.f.kd.get());
    demoted += !e->device.has_value();
  }
  EXPECT_EQ(d.dev->down.load(), 1 + demoted) << "k0 left the device without a copy";
  Keydir::Lock l(d.f.kd.get());
  EXPECT_FALSE(k0->device.has_value()) << "the coldest, and free to leave";
  d.f.kd->device().Free(b);
}

TEST(DeviceEvictor, LeasedEntriesStayOnTheDeviceAndAPutSaysWhy) {
  DeviceFixture d;
  d.Fill();
  std::vector<ReadLease> leases;
  {
    Keydir::Lock l(d.f.kd.get());
    for (int i = 0; i < 16; ++i)
      leases.push_back(d.f.kd->LeaseLocked(
          *d.f.kd->FindLocked("ns", "k" + std::to_string(i), false), false, MemoryKind::kDevice));
  }
  DeviceEvictor ev{d.f.kd.get(), d.dev.get(), &d.host, milliseconds(100)};
  ev.Start();
  PoolBlock b;
  Status st = ev.Allocate(kDeviceBlock, /*wait=*/true, &b);
  EXPECT_TRUE(st.IsBusy()) << st.ToString();
  EXPECT_NE(st.message().find("device pool is full (16 entries, 16 leased)"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("raise Options::device_pool_bytes"), std::string::npos);
  EXPECT_EQ(d.dev->down.load(), 0) << "a leased entry is not copied away";
  leases.clear();  // released: the evictor makes room
  ASSERT_TRUE(ev.Allocate(kDeviceBlock, /*wait=*/true, &b).ok());
  ev.Stop();
  d.FreeDevice(b);
}

TEST(DeviceEvictor, AFailedCopyLosesNothingAndTheNextOneHeals) {
  DeviceFixture d;
  d.Fill();
  d.dev->FailWith(Status::IOError("the copy engine is gone"));
  d.ev.Start();
  PoolBlock b;
  Status st = d.ev.Allocate(kDeviceBlock, /*wait=*/true, &b);
  EXPECT_TRUE(st.IsIOError()) << st.ToString();
  EXPECT_NE(st.message().find("moving entries out of it failed: the copy engine is gone"),
            std::string::npos)
      << st.message();
  EXPECT_FALSE(d.ev.Health().ok());
  for (int i = 0; i < 16; ++i) {
    EntryPtr e = Find(d.f, "k" + std::to_string(i));
    Keydir::Lock l(d.f.kd.get());
    ASSERT_TRUE(e->device.has_value()) << "k" << i << " kept its only copy";
    EXPECT_FALSE(e->pool.has_value());
    EXPECT_EQ(e->leases, 0);
    EXPECT_EQ(d.f.kd->device().Ptr(*e->device)[0], i + 1);
  }
  {
    Keydir::Lock l(d.f.kd.get());
    EXPECT_EQ(d.f.kd->pool().Stats().used, 0u) << "the host blocks went back";
  }
  d.dev->FailWith(Status::Ok());
  ASSERT_TRUE(d.ev.Allocate(kDeviceBlock, /*wait=*/true, &b).ok());
  d.ev.Stop();  // the put may take its block before the batch that freed it has ended
  EXPECT_TRUE(d.ev.Health().ok()) << d.ev.Health().ToString();
  EXPECT_TRUE(d.HostCopyHolds(Find(d.f, "k0"), 1));
  d.FreeDevice(b);
}

TEST(DeviceEvictor, PromoteCopiesAHostEntryUpAndDemoteAllGivesEachDeviceOnlyEntryAHostCopy) {
  DeviceFixture d;
  EntryPtr host = d.f.Insert("h", kDeviceBlock);
  {
    Keydir::Lock l(d.f.kd.get());
    std::memset(d.f.kd->pool().Ptr(*host->pool), 0x5a, kDeviceBlock);
  }
  {
    ReadLease lease = [&] {
      Keydir::Lock l(d.f.kd.get());
      return d.f.kd->QuietLeaseLocked(host);
    }();
    ASSERT_TRUE(d.ev.Promote(host, lease).ok());
  }
  EXPECT_EQ(d.dev->up.load(), 1);
  {
    Keydir::Lock l(d.f.kd.get());
    ASSERT_TRUE(host->device.has_value());
    EXPECT_EQ(d.f.kd->device().Ptr(*host->device)[kDeviceBlock - 1], 0x5a);
  }
  EntryPtr a = d.OnDevice("a", 7), b = d.OnDevice("b", 8);
  ASSERT_TRUE(d.ev.DemoteAll().ok());
  EXPECT_EQ(d.dev->down.load(), 2) << "h already had a host copy";
  EXPECT_TRUE(d.HostCopyHolds(a, 7));
  EXPECT_TRUE(d.HostCopyHolds(b, 8));
  Keydir::Lock l(d.f.kd.get());
  EXPECT_TRUE(a->device.has_value() && b->device.has_value()) << "DemoteAll keeps device copies";
}

}  // namespace
}  // namespace ecstore
