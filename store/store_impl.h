// StoreImpl: the store behind the Store facade. It serves requests and moves payload bytes;
// the state lives in the parts it owns, each with its own header:
//   Keydir       (store/keydir.h)        every entry, the metadata lock, tier transitions
//   MemoryTier   (store/memory_tier.h)   the pinned host pool: region, allocator, policy
//   DurableTier  (store/durable_tier.h)  segments, index, quota, tombstones, recovery
//   Evictor      (store/evictor.h)       the background evictor and waiting Puts
//   DeviceFront  (store/device_front.h)  the GPU pool and the requests in device memory
//   BatchReads   (store/batch_reads.h)   GetMany and AcquireMany: one batch of disk reads
// Private to store/.
// Thread rules: as Store's. The Keydir's mu guards all metadata and is never held across
// I/O or a payload copy. Lock order: DurableTier's append lock -> mu -> DurableTier's
// accounting lock.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "store/batch_reads.h"
#include "store/device_front.h"
#include "store/durable_tier.h"
#include "store/evictor.h"
#include "store/keydir.h"
#include "store/memory_tier.h"
#include "store/store.h"

namespace ecstore {

class StoreImpl : public Store, private PutReservation::Owner, private DeviceFront::Host {
 public:
  StoreImpl(std::string dir, Options o) : dir_(std::move(dir)), opt_(std::move(o)) {
    env_ = opt_.env ? opt_.env : Env::Default();
  }
  ~StoreImpl() override { Close(); }

  Status Init();  // LockDir, the tiers opened, recovery, the threads started
  Status Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
             std::span<const uint8_t> bytes) override;
  Result<PutReservation> Reserve(std::string_view ns, std::string_view key, const TensorMeta& meta,
                                 uint64_t size) override;
  Status Commit(PutReservation reservation) override;
  using Store::Get;
  Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst,
                        const ReadOptions& ro) override;
  Result<ReadLease> Acquire(std::string_view ns, std::string_view key) override;  // and Host's
  std::vector<Result<EntryInfo>> GetMany(std::string_view ns, const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts) override;
  using Cache::AcquireMany;
  std::vector<Result<ReadLease>> AcquireMany(std::string_view ns,
                                             const std::vector<std::string>& keys,
                                             LandingWatch* watch) override;
  using Store::Lookup;
  Result<EntryInfo> Lookup(std::string_view ns, std::string_view key,
                           const ReadOptions& ro) override;
  Result<bool> Prefetch(std::string_view ns, const std::vector<std::string>& keys) override;
  Result<std::vector<std::optional<EntryInfo>>> LookupMany(
      std::string_view ns, const std::vector<std::string>& keys) override;
  Result<bool> Contains(std::string_view ns, std::string_view key) override;
  Status Erase(std::string_view ns, std::string_view key) override;
  Status EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                   std::vector<bool>* erased) override;
  Status ListPages(size_t page_size,
                   const std::function<bool(std::vector<EntryInfo>&&)>& on_page) override;
  Result<StoreStats> Stats() override;
  Status Flush() override;
  Result<VerifyReport> Verify(const std::function<void(uint64_t, uint64_t)>& progress) override;
  Result<CompactReport> Compact(double threshold) override;
  Status Close() override;
  Status Health() override;
  void SetAdmission(Admission admit) override;
  void SetEvents(EntryEvents* events) override;
  Status PutFromDevice(std::string_view ns, std::string_view key, const TensorMeta& meta,
                       const void* src, uint64_t bytes, bool checksum_when_spilled) override;
  Result<EntryInfo> GetToDevice(std::string_view ns, std::string_view key, void* dst,
                                uint64_t dst_bytes) override;
  Result<ReadLease> AcquireOnDevice(std::string_view ns, std::string_view key) override;
  int device_ordinal() const override { return opt_.device; }
  MemoryRegion device_region() const override {
    return dev_ ? dev_->memory()->region() : MemoryRegion{};
  }
  MemoryRegion pool_region() const override { return pool_ ? pool_->region() : MemoryRegion{}; }
  Status AddRegistrar(MemoryRegistrar* r) override;
  void RemoveRegistrar(MemoryRegistrar* r) override;

 private:
  Status LockDir();  // the directory made (private) and LOCK held, or Busy naming its holder
  DurableOptions DiskOptions();
  struct Pending;  // a reserved, not yet committed Put
  void Abandon(void* token) override;
  Status CheckKey(std::string_view ns, std::string_view key) const;
  Status CheckWritable() const;
  // Inserts a new entry whose bytes are complete in its block (host or device), replacing
  // the key's current one; the replaced entry's tombstone is durable before it returns.
  Status Install(Keydir::FreshEntry f) override EXCLUDES(kd_->mu);
  Status CheckDeviceTier(const char* what) const;  // Ok with one; else how to get one

  std::string dir_;
  Options opt_;
  Env* env_ = nullptr;
  bool read_only_ = false;  // set once at Init
  const std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now();
  UniqueFd lock_fd_;
  // Set in Init (in this order) and kept until destruction; Close closes them.
  std::unique_ptr<DurableTier> durable_;
  std::unique_ptr<MemoryTier> pool_;  // the pinned host pool
  std::unique_ptr<DeviceFront> dev_;  // the GPU pool and its evictor, if any
  std::unique_ptr<Keydir> kd_;        // its mu is the metadata lock
  std::unique_ptr<HostEvictor> ev_;
  std::unique_ptr<BatchReads> batch_;  // GetMany, AcquireMany
};

}  // namespace ecstore
