#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <tuple>

#include "store/store_impl.h"
#include "store/verify.h"

namespace ecstore {
namespace {
constexpr uint64_t kMinFreeBytes = 1ull << 20;  // below this at open: read-only
}  // namespace

// ---------------------------------------------------------------- open / close

Result<std::unique_ptr<Store>> Store::Open(const std::string& dir, const Options& options) {
  if (options.pool_bytes < (1u << 20))
    return Status::InvalidArgument("pool size must be at least 1MiB");
  for (auto [low, high, name] :
       {std::tuple{options.low_watermark, options.high_watermark, ""},
        {options.device_low_watermark, options.device_high_watermark, "device_"}})
    if (!(low > 0 && low < high && high <= 1.0))
      return Status::InvalidArgument(
          fmt::format("Options::{0}low_watermark ({1}) and {0}high_watermark ({2}) must satisfy "
                      "0 < low < high <= 1",
                      name, low, high));
  if (!NewEvictionPolicy(options.eviction_policy))
    return Status::InvalidArgument("unknown eviction policy '" + options.eviction_policy +
                                   "'; use freq, lru or gdsf");
  auto store = std::make_unique<StoreImpl>(dir, options);
  EC_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<Store>(std::move(store));
}

Status StoreImpl::LockDir() {
  const bool fresh = !env_->FileExists(dir_);
  Status st = env_->CreateDirs(dir_);
  if (!st.ok())
    return Status::IOError("cannot create store directory " + dir_ + ": " + st.message() +
                           "; choose a writable store directory");
  const int dir_mode = opt_.group_access ? 0750 : 0700;
  if (fresh && ::chmod(dir_.c_str(), dir_mode) != 0)
    spdlog::warn("could not make {} private (mode {:o}): {}", dir_, dir_mode, std::strerror(errno));
  auto lock = env_->OpenFile(dir_ + "/LOCK", O_RDWR | O_CREAT, opt_.group_access ? 0640 : 0600);
  if (!lock.ok())
    return Status::IOError("cannot open " + dir_ + "/LOCK: " + lock.status().message() +
                           "; choose a writable store directory");
  lock_fd_ = std::move(lock).value();
  if (flock(lock_fd_.get(), LOCK_EX | LOCK_NB) != 0)
    return Status::Busy("store " + dir_ + " is in use by another process (pid in " + dir_ +
                        "/LOCK); if that is a server, connect to it as a client, "
                        "otherwise wait for it or stop it");
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(lock_fd_.get(), 0) == 0 && pwrite(lock_fd_.get(), pid.data(), pid.size(), 0) < 0)
    spdlog::debug("could not record pid in LOCK");
  return Status::Ok();
}

// The disk tier's options from the store's; read-only where asked, or where the disk is full.
DurableOptions StoreImpl::DiskOptions() {
  DurableOptions dopt;
  dopt.read_only = opt_.read_only;
  dopt.read_only_reason = "as asked";
  auto free_bytes = env_->FreeBytes(dir_);
  if (!dopt.read_only && free_bytes.ok() && *free_bytes < kMinFreeBytes) {
    dopt.read_only = true;
    dopt.read_only_reason = "its disk was full";
    spdlog::warn(
        "disk full ({} bytes free where {} lives): opened read-only; writes fail "
        "until space is freed",
        *free_bytes, dir_);
  }
  read_only_ = dopt.read_only;
  dopt.quota_bytes = opt_.disk_quota_bytes;
  dopt.segment_bytes = opt_.segment_bytes;
  dopt.queue_depth = opt_.io_queue_depth;
  dopt.io_chunk_bytes = opt_.io_chunk_bytes;
  dopt.io_read_window = opt_.io_read_window;
  dopt.compress = opt_.compress;
  dopt.min_compression_saving = opt_.min_compression_saving;
  dopt.compact_live_ratio = opt_.compact_live_ratio;
  dopt.rebuild_index = opt_.rebuild_index;
  dopt.file_mode = opt_.group_access ? 0640 : 0600;
  return dopt;
}

Status StoreImpl::Init() {
  EC_RETURN_IF_ERROR(LockDir());
  const DurableOptions dopt = DiskOptions();
  if (dopt.read_only && dopt.rebuild_index)
    return Status::NoSpace("rebuilding the index of " + dir_ + " needs free disk space (" +
                           (opt_.read_only ? "opened read-only" : "the disk is full") + ")");
  auto durable = DurableTier::Open(dir_, env_, dopt);
  if (!durable.ok()) return durable.status();
  durable_ = std::move(durable).value();

  MemoryTierOptions mopt{opt_.eviction_policy, opt_.high_watermark, opt_.low_watermark};
  auto pool = MemoryTier::Open(Tier::kPool,
                               opt_.memory_backend ? opt_.memory_backend() : NewHostPinnedBackend(),
                               opt_.pool_bytes, mopt);
  if (!pool.ok()) return pool.status();
  pool_ = std::move(pool).value();
  if (opt_.device_pool_bytes > 0) {  // the GPU pool, and the host pool registered with CUDA
    const MemoryTierOptions device_mopt{opt_.eviction_policy, opt_.device_high_watermark,
                                        opt_.device_low_watermark};
    auto dev = DeviceFront::Open(opt_.device, opt_.device_pool_bytes, device_mopt, pool_.get());
    if (!dev.ok()) return dev.status();
    dev_ = std::move(dev).value();
  }
  kd_ = std::make_unique<Keydir>(env_, pool_.get(), dev_ ? dev_->memory() : nullptr, durable_.get(),
                                 opt_.eviction_policy != "lru" && !opt_.eviction_policy.empty());
  ev_ = std::make_unique<HostEvictor>(kd_.get(), opt_.put_wait, opt_.write_back);
  batch_ = std::make_unique<BatchReads>(this, kd_.get(), ev_.get(), opt_.promote_on_get);
  if (dev_) dev_->Attach(kd_.get(), ev_.get(), this, opt_.put_wait);
  kd_->OnLeaseEnd([this]() NO_THREAD_SAFETY_ANALYSIS {  // runs under mu
    ev_->NudgeLocked();
    if (dev_) dev_->NudgeLocked();
  });
  {
    Keydir::Lock l(kd_.get());  // nothing else runs yet; the lock keeps the analysis whole
    EC_RETURN_IF_ERROR(kd_->Recover());
  }
  ev_->Start();
  if (dev_) dev_->Start();
  return Status::Ok();
}

Status StoreImpl::Close() {
  if (!kd_) {  // Init failed part way: nothing was served
    durable_.reset();
    if (pool_) pool_->Close();
    return Status::Ok();
  }
  {
    Keydir::Lock l(kd_.get());
    if (kd_->closed()) return Status::Ok();
  }
  Status st = dev_ ? dev_->DemoteAll() : Status::Ok();  // needs the host evictor
  if (dev_) dev_->Stop();
  ev_->Stop();
  Status fst = ev_->Flush();
  if (st.ok()) st = fst;
  {
    Keydir::Lock l(kd_.get());
    kd_->SaveTouchedLocked();
    kd_->CloseLocked();
  }
  Status ist = durable_->Flush();
  if (st.ok()) st = ist;
  durable_.reset();
  pool_->Close();
  lock_fd_.reset();
  return st;
}

// ---------------------------------------------------------------- helpers

Status StoreImpl::CheckKey(std::string_view ns, std::string_view key) const {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  return ValidateKey(key);
}

// ---------------------------------------------------------------- put

struct StoreImpl::Pending {
  std::string ns, key;
  TensorMeta meta;
  PoolBlock block;
};

Status StoreImpl::CheckWritable() const { return durable_->CheckWritable(); }

Status StoreImpl::Health() {
  {
    Keydir::Lock l(kd_.get());
    if (kd_->closed()) return Status::Unavailable("store is closed");
  }
  EC_RETURN_IF_ERROR(durable_->CheckWritable());
  EC_RETURN_IF_ERROR(durable_->CheckDirectory());
  EC_RETURN_IF_ERROR(ev_->Health());
  return dev_ ? dev_->Health() : Status::Ok();
}

Result<PutReservation> StoreImpl::Reserve(std::string_view ns, std::string_view key,
                                          const TensorMeta& meta, uint64_t size) {
  EC_RETURN_IF_ERROR(CheckWritable());
  EC_RETURN_IF_ERROR(ValidateNewNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateNewKey(key));
  EC_RETURN_IF_ERROR(ValidateMeta(meta, size));

  if (kBlockSize + RoundUpBlock(size) > opt_.disk_quota_bytes)
    return Status::NoSpace("entry of " + std::to_string(size) +
                           " bytes can never be made durable: it is larger than the disk quota (" +
                           std::to_string(opt_.disk_quota_bytes) +
                           " bytes); raise Options::disk_quota_bytes");
  {
    Keydir::Lock l(kd_.get());
    if (kd_->closed()) return Status::Unavailable("store is closed");
  }
  auto p = std::make_unique<Pending>();
  EC_RETURN_IF_ERROR(ev_->Allocate(size, true, &p->block));
  p->ns = ns;
  p->key = key;
  p->meta = meta;
  uint8_t* data = pool_->Ptr(p->block);
  PutReservation r(this, p.release(), data, size);
  r.same_ = kd_->QuietLeaseIfHolds(ns, key, meta, size);
  return r;
}

void StoreImpl::Abandon(void* token) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(token));
  ev_->Free(p->block);
}

Status StoreImpl::Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
                      std::span<const uint8_t> bytes) {
  auto r = Reserve(ns, key, meta, bytes.size());
  if (!r.ok()) return r.status();
  // Two passes beat a fused copy+hash here: a large memcpy streams with non-temporal stores
  // that 256 KiB pieces give up (measured: 7.2 vs 3.6-5.2 GB/s).
  std::memcpy(r->bytes().data(), bytes.data(), bytes.size());
  return Commit(std::move(r).value());
}

Status StoreImpl::Commit(PutReservation r) {
  if (r.owner_ != this) return Status::InvalidArgument("reservation is not this store's");
  std::unique_ptr<Pending> p(static_cast<Pending*>(std::exchange(r.token_, nullptr)));
  r.owner_ = nullptr;
  const PoolBlock blk = p->block;
  const uint64_t size = r.size_;
  uint8_t* dst = pool_->Ptr(blk);
  const bool later = r.checksum_when_spilled_ && !kd_->Holds(p->ns, p->key);
  const uint64_t checksum = later ? 0 : r.Checksum();
  if (!later && kd_->HoldsIdentical(p->ns, p->key, p->meta, dst, size, checksum, r.KnownSame())) {
    Abandon(p.release());  // the key already holds these bytes: keep that entry
    return Status::Ok();
  }
  // Zero the padding so a spill (which writes whole blocks) never carries stale bytes.
  std::memset(dst + size, 0, blk.length - size);
  // checksummed false: hashed by the spill that gives it a disk copy.
  return Install({.ns = std::move(p->ns),
                  .key = std::move(p->key),
                  .meta = std::move(p->meta),
                  .bytes = size,
                  .checksum = checksum,
                  .checksummed = !later,
                  .tier = Tier::kPool,
                  .block = blk});
}

void StoreImpl::SetEvents(EntryEvents* events) {
  Keydir::Lock l(kd_.get());
  kd_->SetEventsLocked(events);
}

void StoreImpl::SetAdmission(Admission admit) {
  Keydir::Lock l(kd_.get());
  kd_->SetAdmissionLocked(std::move(admit));
}

Status StoreImpl::Install(Keydir::FreshEntry f) {
  const Tier tier = f.tier;
  std::optional<Tombstone> tomb;
  EntryPtr old, e;
  {
    Keydir::Lock l(kd_.get());
    auto made = kd_->InstallLocked(std::move(f), &old, &tomb);
    if (!made.ok()) return made.status();
    e = std::move(made).value();
  }
  if (tier == Tier::kDevice)
    dev_->Nudge();
  else
    ev_->QueueWriteBack(e);  // and nudges
  if (tomb) durable_->WriteTombstones({*tomb});
  if (old) kd_->AwaitSpill(old);  // the replaced bytes must not come back after a crash
  return Status::Ok();
}

// ---------------------------------------------------------------- device memory

Status StoreImpl::CheckDeviceTier(const char* what) const {
  if (dev_) return Status::Ok();
  return Status::Unavailable(std::string(what) +
                             " needs the device tier: open the store with "
                             "Options::device_pool_bytes > 0 (a CUDA build with a GPU)");
}

Status StoreImpl::PutFromDevice(std::string_view ns, std::string_view key, const TensorMeta& meta,
                                const void* src, uint64_t bytes, bool /*checksum_when_spilled*/) {
  EC_RETURN_IF_ERROR(CheckDeviceTier("PutFromDevice"));
  EC_RETURN_IF_ERROR(CheckWritable());
  EC_RETURN_IF_ERROR(ValidateNewNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateNewKey(key));
  EC_RETURN_IF_ERROR(ValidateMeta(meta, bytes));
  return dev_->PutFromDevice(ns, key, meta, src, bytes);
}

Result<EntryInfo> StoreImpl::GetToDevice(std::string_view ns, std::string_view key, void* dst,
                                         uint64_t dst_bytes) {
  EC_RETURN_IF_ERROR(CheckDeviceTier("GetToDevice"));
  EC_RETURN_IF_ERROR(CheckKey(ns, key));
  return dev_->GetToDevice(ns, key, dst, dst_bytes);
}

Result<ReadLease> StoreImpl::AcquireOnDevice(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(CheckDeviceTier("AcquireOnDevice"));
  EC_RETURN_IF_ERROR(CheckKey(ns, key));
  return dev_->AcquireOnDevice(ns, key);
}

// ---------------------------------------------------------------- get

Status StoreImpl::AddRegistrar(MemoryRegistrar* r) { return pool_->AddRegistrar(r); }

void StoreImpl::RemoveRegistrar(MemoryRegistrar* r) { pool_->RemoveRegistrar(r); }

Result<ReadLease> Store::Pin(std::string_view ns, std::string_view key) { return Acquire(ns, key); }

Result<ReadLease> StoreImpl::Acquire(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(CheckKey(ns, key));
  std::optional<Tier> promoted_from;
  for (bool promoted = false;; promoted = true) {
    EntryPtr e;
    bool device_only = false;
    {
      Keydir::Lock l(kd_.get());
      auto found = kd_->FindLocked(ns, key, !promoted);
      if (!found.ok()) return found.status();
      e = *found;
      if (e->pool) return kd_->LeaseLocked(e, !promoted, MemoryKind::kHost, promoted_from);
      if (e->loading) {
        kd_->AwaitLoadLocked(l, *e);
        continue;
      }
      device_only = e->device.has_value();
    }
    if (!promoted_from) promoted_from = device_only ? Tier::kDevice : Tier::kDisk;
    // A device-only entry gets a host copy (it stays on the device too).
    EC_RETURN_IF_ERROR(device_only ? dev_->CopyToHost(e) : ev_->Promote(e, true));
  }
}

Result<EntryInfo> StoreImpl::Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst,
                                 const ReadOptions& ro) {
  EC_RETURN_IF_ERROR(CheckKey(ns, key));
  const bool promote = opt_.promote_on_get && ro.record_access;
  for (bool promoted = false;; promoted = true) {
    EntryPtr e;
    EntryInfo info;
    DiskLocation loc;
    {
      Keydir::Lock l(kd_.get());
      auto found = kd_->FindLocked(ns, key, !promoted && ro.record_access);
      if (!found.ok()) return found.status();
      e = *found;
      if (dst.size() < e->bytes)
        return Status::BufferTooSmall("destination buffer holds " + std::to_string(dst.size()) +
                                          " bytes but entry '" + e->key + "' has " +
                                          std::to_string(e->bytes) + "; size it from this answer",
                                      e->bytes, e->meta);
      if (e->pool) {
        ReadLease lease =
            ro.record_access ? kd_->LeaseLocked(e, !promoted) : kd_->QuietLeaseLocked(e);
        info = kd_->InfoLocked(*e);
        l.unlock();
        std::memcpy(dst.data(), lease.data(), lease.size());
        return info;
      }
      if (e->device) {  // device only: one device->host copy straight into dst
        ReadLease lease = kd_->LeaseLocked(e, !promoted && ro.record_access, MemoryKind::kDevice);
        info = kd_->InfoLocked(*e);
        l.unlock();
        EC_RETURN_IF_ERROR(
            dev_->Copy(dst.data(), lease.data(), lease.size(), cuda::Direction::kDeviceToHost));
        return info;
      }
      if (e->loading) {
        kd_->AwaitLoadLocked(l, *e);
        continue;
      }
      if (!promote) {
        loc = *e->disk;
        if (ro.record_access) kd_->TouchLocked(e.get());
        info = kd_->InfoLocked(*e);
      }
    }
    if (promote) {  // the payload lands in dst as it is read into the pool (dst is large enough)
      std::optional<EntryInfo> delivered;
      Status st = ev_->Promote(e, false, dst.data(), &delivered);
      if (st.ok() && delivered) return *delivered;
      if (st.ok()) continue;
      if (!st.IsBusy()) return st;
      // No pool space right now: serve straight from disk; promotion can happen next time.
      Keydir::Lock l(kd_.get());
      if (!e->disk || e->erased) continue;
      loc = *e->disk;
      kd_->TouchLocked(e.get());
      info = kd_->InfoLocked(*e);
    }
    bool stale_row = false;
    Status st = durable_->Read(*e, loc, dst.data(), dst.size(), &stale_row);
    if (stale_row) {
      EC_RETURN_IF_ERROR(kd_->FixStaleRow(e, loc, st));
      continue;
    }
    if (st.IsCorruption()) return kd_->DropCorrupt(e, st);
    if (!st.ok()) return st;
    if (ro.record_access) durable_->NoteHit();
    return info;
  }
}

Result<EntryInfo> StoreImpl::Lookup(std::string_view ns, std::string_view key,
                                    const ReadOptions& ro) {
  EC_RETURN_IF_ERROR(CheckKey(ns, key));
  Keydir::Lock l(kd_.get());
  auto found = kd_->LookupLocked(ns, key);
  if (ro.record_access) kd_->CountLookupLocked(found.ok());
  return found;
}

Result<std::vector<std::optional<EntryInfo>>> StoreImpl::LookupMany(
    std::string_view ns, const std::vector<std::string>& keys) {
  for (const auto& k : keys) EC_RETURN_IF_ERROR(CheckKey(ns, k));
  std::vector<std::optional<EntryInfo>> out(keys.size());
  Keydir::Lock l(kd_.get());
  if (kd_->closed()) return Status::Unavailable("store is closed");
  for (size_t i = 0; i < keys.size(); ++i) {
    auto found = kd_->LookupLocked(ns, keys[i]);
    kd_->CountLookupLocked(found.ok());
    if (found.ok()) out[i] = std::move(*found);
  }
  return out;
}

// The hot path of a scheduler asking "is it cached?" every step: one hash lookup.
Result<bool> StoreImpl::Contains(std::string_view ns, std::string_view key) {
  Keydir::Lock l(kd_.get());
  if (kd_->closed()) return Status::Unavailable("store is closed");
  const bool found = kd_->ContainsLocked(ns, key);
  kd_->CountLookupLocked(found);
  return found;
}

std::vector<Result<EntryInfo>> StoreImpl::GetMany(std::string_view ns,
                                                  const std::vector<std::string>& keys,
                                                  const std::vector<std::span<uint8_t>>& dsts) {
  return batch_->GetMany(ns, keys, dsts);
}

std::vector<Result<ReadLease>> StoreImpl::AcquireMany(std::string_view ns,
                                                      const std::vector<std::string>& keys,
                                                      LandingWatch* watch) {
  return batch_->AcquireMany(ns, keys, watch);
}

Result<bool> StoreImpl::Prefetch(std::string_view ns, const std::vector<std::string>& keys) {
  for (const auto& k : keys) EC_RETURN_IF_ERROR(CheckKey(ns, k));
  bool all = true;
  for (const Status& st : ev_->PromoteKeys(ns, keys)) {
    if (st.IsBusy())
      all = false;  // no free room for it now: it stays on disk until read
    else if (!st.ok())
      return st;
  }
  return all;
}

Status StoreImpl::Erase(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(CheckWritable());
  EC_RETURN_IF_ERROR(CheckKey(ns, key));
  std::optional<Tombstone> tomb;
  EntryPtr e;
  {
    Keydir::Lock l(kd_.get());
    auto found = kd_->FindLocked(ns, key, false);
    if (!found.ok()) return found.status();
    e = *found;
    tomb = kd_->RemoveLocked(e.get());
  }
  if (tomb) return durable_->WriteTombstones({*tomb});
  kd_->AwaitSpill(e);
  return Status::Ok();
}

Status StoreImpl::EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                            std::vector<bool>* erased) {
  EC_RETURN_IF_ERROR(CheckWritable());
  for (const auto& [ns, key] : ns_keys) EC_RETURN_IF_ERROR(CheckKey(ns, key));
  erased->assign(ns_keys.size(), false);
  std::vector<Tombstone> tombs;
  std::vector<EntryPtr> detached;
  {
    Keydir::Lock l(kd_.get());
    if (kd_->closed()) return Status::Unavailable("store is closed");
    for (size_t i = 0; i < ns_keys.size(); ++i) {
      auto found = kd_->FindLocked(ns_keys[i].first, ns_keys[i].second, false);
      if (!found.ok()) continue;
      EntryPtr e = *found;
      if (auto t = kd_->RemoveLocked(e.get())) tombs.push_back(std::move(*t));
      detached.push_back(std::move(e));
      (*erased)[i] = true;
    }
  }
  Status st = durable_->WriteTombstones(std::move(tombs));
  for (const EntryPtr& e : detached) kd_->AwaitSpill(e);
  return st;
}

Status StoreImpl::ListPages(size_t page_size,
                            const std::function<bool(std::vector<EntryInfo>&&)>& on_page) {
  return kd_->ListPages(page_size, on_page);
}

Result<StoreStats> StoreImpl::Stats() {
  const uint64_t spill_errors = ev_->Errors() + (dev_ ? dev_->Errors() : 0);
  Keydir::Lock l(kd_.get());
  StoreStats s;
  if (dev_) s.at(Tier::kDevice) = kd_->device().Stats();
  if (pool_) {
    s.at(Tier::kPool) = kd_->pool().Stats();
    s.pool_fragmentation = kd_->pool().fragmentation();
    s.pool_huge_pages = pool_->region().huge_pages;
    s.pool_huge_page_bytes = pool_->region().huge_page_bytes;
    s.pool_locked = pool_->region().locked;
    s.pool_prefault_seconds = pool_->region().prefault_seconds;
    s.pool_prefault_threads = pool_->region().prefault_threads;
  }
  TierStats& disk = s.at(Tier::kDisk);
  if (durable_) durable_->FillStats(&disk, &s.segments, &s.compactions, &s.corrupt_dropped);
  disk.tier = Tier::kDisk;
  disk.misses = kd_->misses();
  s.spill_errors = spill_errors;
  s.misses = kd_->misses();
  s.version = EC_STORE_VERSION;
  s.uptime_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - opened_).count();
  s.lookup_hits = kd_->lookup_hits();
  s.lookup_misses = kd_->lookup_misses();
  s.leases = kd_->leases();
  s.keydir_entries = kd_->size();
  s.keydir_compact_rows = kd_->cold_rows();
  return s;
}

// ---------------------------------------------------------------- verify / compact

Result<VerifyReport> StoreImpl::Verify(const std::function<void(uint64_t, uint64_t)>& progress) {
  return VerifyStore(kd_.get(), progress);
}

Status StoreImpl::Flush() {
  if (dev_) EC_RETURN_IF_ERROR(dev_->DemoteAll());
  return ev_->Flush();
}

Result<CompactReport> StoreImpl::Compact(double threshold) {
  auto before = Stats();
  if (!before.ok()) return before.status();
  EC_RETURN_IF_ERROR(durable_->Compact(threshold));
  auto after = Stats();
  if (!after.ok()) return after.status();
  return CompactReport{.before = before->disk().used, .after = after->disk().used};
}

}  // namespace ecstore
