// DeviceFront on a keydir of its own (no Store), its host side a fake that records what it
// was asked: device puts installed through it, gets from the device copy or the host copy,
// a disk-only entry asked of the host, a buffer too small, and gets into another GPU's
// memory (a peer copy, or the host path) routed by a fake topology. Its device tier is host
// memory standing in for the GPU's (store/device_tier_test_util.h), so these run anywhere.
#include "store/device_front.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/test_util.h"
#include "base/units.h"
#include "disk/record.h"
#include "store/device_tier_test_util.h"
#include "store/evictor.h"

namespace ecstore {
namespace {

using testing::Payload;
using testing::TempDir;

// The store's side of DeviceFront: leases of host copies already in the pool (a disk-only
// entry is NotFound here: no promotion), and installs into the keydir.
class FakeHost : public DeviceFront::Host {
 public:
  explicit FakeHost(Keydir* kd) : kd_(kd) {}
  std::vector<std::string> acquires;
  int installs = 0;
  DeviceFront* front = nullptr;  // gives a device-only entry its host copy, as the store does
  Result<ReadLease> Acquire(std::string_view ns, std::string_view key) override {
    acquires.emplace_back(key);
    EntryPtr e;
    {
      Keydir::Lock l(kd_);
      auto found = kd_->FindLocked(ns, key, true);
      if (!found.ok()) return found.status();
      e = *found;
      if (e->pool) return kd_->LeaseLocked(e);
      if (!e->device) return Status::NotFound("on disk only, and this host promotes nothing");
    }
    EC_RETURN_IF_ERROR(front->CopyToHost(e));
    Keydir::Lock l(kd_);
    return kd_->LeaseLocked(e);
  }
  Status Install(Keydir::FreshEntry f) override {
    ++installs;
    EntryPtr old;
    std::optional<Tombstone> tomb;
    Keydir::Lock l(kd_);
    return kd_->InstallLocked(std::move(f), &old, &tomb).status();
  }

 private:
  Keydir* const kd_;
};

struct Front {
  TempDir dir;
  std::unique_ptr<MemoryTier> pool;
  std::unique_ptr<DurableTier> durable;
  testing::HostDeviceTier* dev = nullptr;  // front's
  std::unique_ptr<DeviceFront> front;
  std::unique_ptr<Keydir> kd;
  std::unique_ptr<HostEvictor> host_ev;
  std::unique_ptr<FakeHost> host;
  cuda::PeerRoutes* routes = &cuda::PeerRoutes::Process();  // a test's own, set before Open

  bool Open() {
    pool = MemoryTier::Open(Tier::kPool, NewHostPinnedBackend(), 4 << 20, {}).value();
    DurableOptions o;
    o.quota_bytes = 16 << 20;
    durable = DurableTier::Open(dir.path(), Env::Default(), o).value();
    auto tier = testing::HostDeviceTier::Make(4 << 20);
    dev = tier.get();
    front = DeviceFront::Over(std::move(tier), pool.get(), routes);
    kd =
        std::make_unique<Keydir>(Env::Default(), pool.get(), front->memory(), durable.get(), false);
    {
      Keydir::Lock l(kd.get());
      EXPECT_TRUE(kd->Recover().ok());
    }
    host_ev = std::make_unique<HostEvictor>(kd.get(), std::chrono::milliseconds(2000), false);
    host = std::make_unique<FakeHost>(kd.get());
    host->front = front.get();
    front->Attach(kd.get(), host_ev.get(), host.get(), std::chrono::milliseconds(2000));
    front->Start();
    return true;
  }
  ~Front() {
    if (front) front->Stop();
  }
  // A host-only entry holding Payload(seed, n), as a Put leaves it.
  void HostEntry(const std::string& key, uint64_t seed, uint64_t n) {
    Keydir::Lock l(kd.get());
    PoolBlock b = *pool->Allocate(n);
    std::memcpy(pool->Ptr(b), Payload(seed, n).data(), n);
    Keydir::FreshEntry fresh;
    fresh.ns = "ns";
    fresh.key = key;
    fresh.meta = {DType::kU8, {static_cast<int64_t>(n)}};
    fresh.bytes = n;
    fresh.checksum = PayloadChecksum(pool->Ptr(b), n);
    fresh.block = b;
    EntryPtr old;
    std::optional<Tombstone> tomb;
    ASSERT_TRUE(kd->InstallLocked(std::move(fresh), &old, &tomb).ok());
  }
};

TEST(DeviceFront, ADevicePutIsInstalledThroughTheHostAndReadDeviceToDevice) {
  Front f;
  ASSERT_TRUE(f.Open());
  const uint64_t n = 256 * kKiB;
  std::vector<uint8_t> src = Payload(1, n), dst(n);
  ASSERT_TRUE(f.front->PutFromDevice("ns", "k", {DType::kU8, {256 * 1024}}, src.data(), n).ok());
  EXPECT_EQ(f.host->installs, 1);
  auto got = f.front->GetToDevice("ns", "k", dst.data(), n);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->tiers.has(Tier::kDevice));
  EXPECT_EQ(dst, src);
  EXPECT_EQ(f.dev->across.load(), 2) << "in and out, device to device";
  auto lease = f.front->AcquireOnDevice("ns", "k");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->memory_kind(), MemoryKind::kDevice);
  EXPECT_TRUE(f.host->acquires.empty()) << "the device copy served every read";
}

TEST(DeviceFront, AHostCopyIsCopiedUpADiskOnlyOneIsAskedOfTheHostAndASmallBufferRefused) {
  Front f;
  ASSERT_TRUE(f.Open());
  const uint64_t n = 128 * kKiB;
  f.HostEntry("h", 2, n);
  std::vector<uint8_t> dst(n), small(n / 2);
  auto got = f.front->GetToDevice("ns", "h", dst.data(), n);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(dst, Payload(2, n));
  EXPECT_EQ(f.dev->up.load(), 1) << "host to device";
  EXPECT_TRUE(f.host->acquires.empty()) << "the pool copy was leased in the keydir";
  auto refused = f.front->GetToDevice("ns", "h", small.data(), n / 2);
  EXPECT_TRUE(refused.status().IsInvalidArgument()) << refused.status().ToString();
  auto absent = f.front->GetToDevice("ns", "gone", dst.data(), n);
  EXPECT_TRUE(absent.status().IsNotFound()) << absent.status().ToString();
  EXPECT_TRUE(f.host->acquires.empty());
  f.HostEntry("d", 3, n);  // then spilled, its pool copy dropped: on disk only
  EntryPtr d;
  {
    Keydir::Lock l(f.kd.get());
    d = *f.kd->FindLocked("ns", "d", false);
    f.kd->BeginSpillLocked(d.get());
  }
  ASSERT_TRUE(f.host_ev->SpillBatch({d}, /*drop_from_pool=*/true).ok());
  auto disk = f.front->GetToDevice("ns", "d", dst.data(), n);
  EXPECT_TRUE(disk.status().IsNotFound()) << "the fake host's answer: " << disk.status().ToString();
  EXPECT_EQ(f.host->acquires, std::vector<std::string>{"d"}) << "asked of the host, once";
  Keydir::Lock l(f.kd.get());
  EXPECT_EQ(f.kd->leases(), 0u);
}

// GPUs 0 and 1 reach each other.
class TwoGpus : public cuda::PeerTopology {
 public:
  bool CanAccessPeer(int, int) override { return true; }
  Status EnablePeerAccess(int, int) override { return Status::Ok(); }
};

TEST(DeviceFront, AGetIntoAnotherGpuIsAPeerCopyOfTheDeviceCopyWhereThePairReachesEachOther) {
  TwoGpus gpus;
  cuda::PeerRoutes routes(&gpus, true);
  Front f;
  f.routes = &routes;
  ASSERT_TRUE(f.Open());
  const uint64_t n = 192 * kKiB;
  std::vector<uint8_t> src = Payload(4, n), dst(n);
  ASSERT_TRUE(f.front->PutFromDevice("ns", "k", {DType::kU8, {192 * 1024}}, src.data(), n).ok());
  f.dev->PlaceOn(dst.data(), n, 1);
  auto got = f.front->GetToDevice("ns", "k", dst.data(), n);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(dst, src);
  EXPECT_EQ(f.dev->peer.load(), 1);
  EXPECT_EQ(f.dev->across.load(), 1) << "the put's copy in only";
  EXPECT_TRUE(f.host->acquires.empty()) << "no host hop";
  EXPECT_EQ(routes.counts().peer_copies, 1u);
  EXPECT_EQ(routes.counts().peer_bytes, n);
  EXPECT_EQ(routes.counts().host_path_copies, 0u);
  // A host-pool entry into GPU 1: a host->device copy on that GPU, as it is on any.
  f.HostEntry("h", 5, n);
  std::fill(dst.begin(), dst.end(), 0);
  ASSERT_TRUE(f.front->GetToDevice("ns", "h", dst.data(), n).ok());
  EXPECT_EQ(dst, Payload(5, n));
  EXPECT_EQ(f.dev->up_other.load(), 1);
  EXPECT_EQ(routes.counts().peer_copies, 1u) << "not a GPU-to-GPU copy";
}

TEST(DeviceFront, WithPeerCopiesOffAGetIntoAnotherGpuGoesUpFromTheEntrysHostCopy) {
  TwoGpus gpus;
  cuda::PeerRoutes routes(&gpus, false);
  Front f;
  f.routes = &routes;
  ASSERT_TRUE(f.Open());
  const uint64_t n = 160 * kKiB;
  std::vector<uint8_t> src = Payload(6, n), dst(n);
  ASSERT_TRUE(f.front->PutFromDevice("ns", "k", {DType::kU8, {160 * 1024}}, src.data(), n).ok());
  f.dev->PlaceOn(dst.data(), n, 1);
  auto got = f.front->GetToDevice("ns", "k", dst.data(), n);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(dst, src);
  EXPECT_EQ(f.dev->peer.load(), 0);
  EXPECT_EQ(f.dev->down.load(), 1) << "the device-only entry's host copy, made once";
  EXPECT_EQ(f.dev->up_other.load(), 1);
  EXPECT_EQ(f.host->acquires, std::vector<std::string>{"k"});
  EXPECT_EQ(routes.counts().host_path_copies, 1u);
  EXPECT_EQ(routes.counts().host_path_bytes, n);
  // Again: the host copy is there now; nothing copied down.
  std::fill(dst.begin(), dst.end(), 0);
  ASSERT_TRUE(f.front->GetToDevice("ns", "k", dst.data(), n).ok());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(f.dev->down.load(), 1);
  Keydir::Lock l(f.kd.get());
  EXPECT_EQ(f.kd->leases(), 0u);
}

}  // namespace
}  // namespace ecstore
