#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "disk/codec.h"
#include "store/store_impl.h"

namespace ecstore {

PutReservation::PutReservation(PutReservation&& o) noexcept { *this = std::move(o); }
PutReservation& PutReservation::operator=(PutReservation&& o) noexcept {
  if (this != &o) {
    Reset();
    owner_ = std::exchange(o.owner_, nullptr);
    token_ = std::exchange(o.token_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}
PutReservation::~PutReservation() { Reset(); }
void PutReservation::Reset() {
  if (owner_ && token_) owner_->Abandon(token_);
  owner_ = nullptr;
  token_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}
namespace {

constexpr uint64_t kSpillBatchBytes = 64ull << 20;
constexpr uint64_t kMinFreeBytes = 1ull << 20;  // below this at open: read-only

}  // namespace

std::string FullKey(std::string_view ns, std::string_view key) {
  std::string k;
  k.reserve(ns.size() + key.size() + 1);
  k.append(ns);
  k.push_back('\0');
  k.append(key);
  return k;
}

// ---------------------------------------------------------------- open / close

Result<std::unique_ptr<Store>> Store::Open(const std::string& dir, const Options& options) {
  if (options.pool_bytes < (1u << 20))
    return Status::InvalidArgument("pool size must be at least 1MiB");
  if (!(options.low_watermark > 0 && options.low_watermark < options.high_watermark &&
        options.high_watermark <= 1.0))
    return Status::InvalidArgument("watermarks must satisfy 0 < low < high <= 1");
  if (!NewEvictionPolicy(options.eviction_policy))
    return Status::InvalidArgument("unknown eviction policy '" + options.eviction_policy +
                                   "'; use lru");
  auto store = std::make_unique<StoreImpl>(dir, options);
  EC_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<Store>(std::move(store));
}

Status StoreImpl::Init() {
  Status st = env_->CreateDirs(dir_);
  if (!st.ok())
    return Status::IOError("cannot create store directory " + dir_ + ": " + st.message() +
                           "; choose a writable store directory");
  auto lock = env_->OpenFile(dir_ + "/LOCK", O_RDWR | O_CREAT, 0644);
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

  DurableOptions dopt;
  dopt.read_only = opt_.read_only;
  dopt.read_only_reason = "as asked";
  struct statvfs fs {};
  if (!dopt.read_only && statvfs(dir_.c_str(), &fs) == 0 &&
      static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize < kMinFreeBytes) {
    dopt.read_only = true;
    dopt.read_only_reason = "its disk was full";
    spdlog::warn(
        "disk full ({} bytes free where {} lives): opened read-only; writes fail "
        "until space is freed",
        static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize, dir_);
  }
  read_only_ = dopt.read_only;
  dopt.quota_bytes = opt_.disk_quota_bytes;
  dopt.segment_bytes = opt_.segment_bytes;
  dopt.queue_depth = opt_.io_queue_depth;
  dopt.io_chunk_bytes = opt_.io_chunk_bytes;
  dopt.compress = opt_.compress;
  dopt.min_compression_saving = opt_.min_compression_saving;
  dopt.compact_live_ratio = opt_.compact_live_ratio;
  dopt.eviction_policy = opt_.eviction_policy;
  dopt.rebuild_index = opt_.rebuild_index;
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
  {
    MutexLock l(&mu_);  // nothing else runs yet; the lock keeps the analysis whole
    EC_RETURN_IF_ERROR(RecoverLocked());
  }
  evictor_ = std::thread([this] { EvictorLoop(); });
  return Status::Ok();
}

// Recovery hands every live entry over (Recovered); once it is done they join the disk
// tier's accounting, oldest access first, so its LRU starts in the order it had.
Status StoreImpl::RecoverLocked() {
  EC_RETURN_IF_ERROR(durable_->Recover(this));
  std::vector<std::pair<uint64_t, Entry*>> order;
  order.reserve(recovered_.size());
  for (const EntryPtr& e : recovered_)
    if (e->disk && !e->erased) order.emplace_back(e->last_access_us, e.get());
  std::sort(order.begin(), order.end());
  for (auto [_, e] : order) durable_->Track(e->id(), *e, *e->disk);
  recovered_ = {};
  return Status::Ok();
}

void StoreImpl::Recovered(IndexRow&& row) {
  auto e = std::make_shared<Entry>();
  const DiskLocation loc = row.loc;
  static_cast<EntryRecord&>(*e) = std::move(row);
  e->full_key = FullKey(e->ns, e->key);
  e->disk = loc;
  auto it = keydir_.find(e->full_key);
  if (it != keydir_.end()) {  // replaced by a newer record; not tracked yet
    it->second->disk.reset();
    keydir_.erase(it);
  }
  keydir_.emplace(e->full_key, e);
  recovered_.push_back(std::move(e));
}

uint64_t StoreImpl::RecoveredSeq(const std::string& ns, const std::string& key) {
  auto it = keydir_.find(FullKey(ns, key));
  return it == keydir_.end() ? 0 : it->second->seq;
}

void StoreImpl::RecoveredTombstone(const std::string& ns, const std::string& key,
                                   uint64_t target_seq) {
  auto it = keydir_.find(FullKey(ns, key));
  if (it == keydir_.end() || it->second->seq > target_seq) return;
  it->second->disk.reset();
  keydir_.erase(it);
}

void StoreImpl::RecoveryRestarts() {
  keydir_.clear();
  recovered_.clear();
  pool().ResetPolicy();
  stats_ = {};
}

void StoreImpl::RecoveryExpects(uint64_t entries) {
  keydir_.reserve(entries);
  recovered_.reserve(entries);
  pool().Reserve(std::min<uint64_t>(entries, 1 << 16));
}

Status StoreImpl::Close() {
  {
    MutexLock l(&mu_);
    if (closed_) return Status::Ok();
    stop_ = true;
  }
  evict_cv_.NotifyAll();
  space_cv_.NotifyAll();
  if (evictor_.joinable()) evictor_.join();
  bool partial;
  {
    MutexLock l(&mu_);
    partial = !durable_ || !pool_;
    if (partial) closed_ = true;
  }
  if (partial) {  // Init failed part way: nothing was served
    durable_.reset();
    if (pool_) pool_->Close();
    return Status::Ok();
  }
  Status st = Flush();
  {
    MutexLock l(&mu_);
    for (auto& [_, e] : keydir_)
      if (e->disk && e->touched) {
        durable_->SaveAccess(*e);
        e->touched = false;
      }
    closed_ = true;
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

Result<EntryPtr> StoreImpl::FindLocked(std::string_view ns, std::string_view key, bool count_miss) {
  if (closed_) return Status::Unavailable("store is closed");
  auto it = keydir_.find(FullKey(ns, key));
  if (it == keydir_.end()) {
    if (count_miss) {
      ++stats_.misses;
      ++pool().counters().misses;
    }
    return Status::NotFound("no entry for key '" + std::string(key) + "' in namespace '" +
                            std::string(ns) + "'");
  }
  return it->second;
}

EntryInfo StoreImpl::InfoLocked(const Entry& e) const {
  TierSet tiers;
  if (e.pool) tiers.add(Tier::kPool);
  if (e.disk) tiers.add(Tier::kDisk);
  return EntryInfo::Of(e, tiers);
}

void StoreImpl::FreePoolLocked(Entry* e) {
  if (!e->pool) return;
  pool().Remove(e->id(), e->bytes, *e->pool);
  e->pool.reset();
  space_cv_.NotifyAll();
}

void StoreImpl::DropDiskLocked(Entry* e) {
  if (!e->disk) return;
  durable_->Untrack(e->id(), *e, *e->disk);
  e->disk.reset();
}

// Gives up the disk copy of an entry that stays in the pool. The entry takes a new seq, so
// the copy spilled next outlives the tombstone returned for the old one.
Tombstone StoreImpl::ForgetDiskCopyLocked(Entry* e) {
  Tombstone t{e->ns, e->key, e->seq};
  DropDiskLocked(e);
  e->seq = durable_->NextSeq();
  return t;
}

// Unlinks an entry that has left the keydir. Its pool block goes back now, or when the last
// lease ends / the spill in flight finishes. Returns the tombstone its disk copy needs.
std::optional<Tombstone> StoreImpl::DetachLocked(Entry* e) {
  e->erased = true;
  if (e->leases == 0 && !e->spilling)
    FreePoolLocked(e);
  else
    pool().Unrank(e->id());
  if (!e->disk) return std::nullopt;
  Tombstone t{e->ns, e->key, e->seq};
  DropDiskLocked(e);
  return t;
}

ReadLease StoreImpl::LeaseLocked(const EntryPtr& e, bool count_hit) {
  ++e->leases;
  ++e->hits;
  e->touched = true;
  e->last_access_us = env_->NowMicros();
  pool().Touch(e->id());
  if (e->disk) durable_->Touch(e->id());
  if (count_hit) ++pool().counters().hits;  // a get served by promotion counted as a disk hit
  return ReadLease(this, new EntryPtr(e), pool_->Ptr(*e->pool), InfoLocked(*e));
}

void StoreImpl::Release(void* token) {
  auto* ep = static_cast<EntryPtr*>(token);
  {
    MutexLock l(&mu_);
    Entry* e = ep->get();
    if (--e->leases == 0) {
      if (e->erased && !e->spilling) FreePoolLocked(e);
      if (need_bytes_ || NeedsEvictionLocked()) evict_cv_.NotifyOne();
    }
  }
  delete ep;
}

// ---------------------------------------------------------------- put

Status StoreImpl::AllocateBlock(uint64_t bytes, bool wait, PoolBlock* out) {
  UniqueLock l(&mu_);
  const uint64_t need = pool().RoundUp(bytes);
  const auto deadline = std::chrono::steady_clock::now() + opt_.put_wait;
  const uint64_t fail_gen = spill_fail_gen_;
  for (;;) {
    if (stop_ && wait) return Status::Unavailable("store is closing");
    if (auto b = pool().Allocate(bytes)) {
      *out = *b;
      if (NeedsEvictionLocked()) evict_cv_.NotifyOne();
      return Status::Ok();
    }
    need_bytes_ = std::max(need_bytes_, need);
    evict_cv_.NotifyOne();
    if (!wait) return Status::Busy("no free pool block right now");
    if (spill_fail_gen_ != fail_gen && consecutive_spill_failures_ >= 2) return last_spill_error_;
    if (!space_cv_.WaitUntil(l, deadline)) {
      if (auto b = pool().Allocate(bytes)) {
        *out = *b;
        return Status::Ok();
      }
      uint64_t leased = 0;
      for (auto& [_, e] : keydir_) leased += e->leases > 0;
      if (!last_spill_error_.ok() && spill_fail_gen_ != fail_gen) return last_spill_error_;
      return Status::Busy("pool is full (" + std::to_string(pool().Stats().entries) + " entries, " +
                          std::to_string(leased) +
                          " leased) and nothing could be evicted in time; release leases or "
                          "raise Options::pool_bytes");
    }
  }
}

struct StoreImpl::Pending {
  std::string ns, key;
  TensorMeta meta;
  PoolBlock block;
};

Status StoreImpl::CheckWritable() const { return durable_->CheckWritable(); }

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
    MutexLock l(&mu_);
    if (closed_ || stop_) return Status::Unavailable("store is closed");
    if (pool().RoundUp(size) > pool().capacity())
      return Status::NoSpace(
          "entry of " + std::to_string(size) + " bytes is larger than the whole pool (" +
          std::to_string(pool().capacity()) + " bytes); raise Options::pool_bytes");
  }
  auto p = std::make_unique<Pending>();
  EC_RETURN_IF_ERROR(AllocateBlock(size, true, &p->block));
  p->ns = ns;
  p->key = key;
  p->meta = meta;
  uint8_t* data = pool_->Ptr(p->block);
  return PutReservation(this, p.release(), data, size);
}

void StoreImpl::Abandon(void* token) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(token));
  MutexLock l(&mu_);
  pool().Free(p->block);
  space_cv_.NotifyAll();
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
  const uint64_t checksum = PayloadChecksum(dst, size);
  // Zero the padding so a spill (which writes whole blocks) never carries stale bytes.
  std::memset(dst + size, 0, blk.length - size);
  auto e = std::make_shared<Entry>();
  e->ns = std::move(p->ns);
  e->key = std::move(p->key);
  e->full_key = FullKey(e->ns, e->key);
  e->meta = std::move(p->meta);
  e->bytes = size;
  e->checksum = checksum;
  e->created_us = e->last_access_us = env_->NowMicros();
  e->pool = blk;
  std::optional<Tombstone> tomb;
  EntryPtr old;
  {
    MutexLock l(&mu_);
    if (closed_) {
      pool().Free(blk);
      return Status::Unavailable("store is closed");
    }
    e->seq = durable_->NextSeq();
    auto it = keydir_.find(e->full_key);
    if (it != keydir_.end()) {
      old = it->second;
      tomb = DetachLocked(old.get());
      keydir_.erase(it);
    }
    keydir_.emplace(e->full_key, e);
    pool().Insert(e->id(), *e);
    if (NeedsEvictionLocked()) evict_cv_.NotifyOne();
  }
  if (tomb) durable_->WriteTombstones({*tomb});
  if (old) AwaitSpill(old);  // the replaced bytes must not come back after a crash
  return Status::Ok();
}

// ---------------------------------------------------------------- get

// The index row (entry + location) was wrong. Looks for the entry's own record (ns, key,
// seq) in the same segment and takes its self-checked header as the truth; otherwise forgets
// the row -- no tombstone, the record stays on disk for a rebuild of the index to find.
// Ok = the entry was corrected: read again.
Status StoreImpl::FixStaleRow(const EntryPtr& e, const DiskLocation& loc, const Status& why) {
  EntryRecord rec;
  {
    MutexLock l(&mu_);
    rec = *e;
  }
  auto found = durable_->FindRecord(rec, loc.segment);
  MutexLock l(&mu_);
  if (e->erased || !e->disk || !(*e->disk == loc)) return Status::Ok();  // changed meanwhile
  const bool adopt =
      found &&
      (!e->pool || (found->first.raw_len == e->bytes && found->first.checksum == e->checksum));
  if (adopt) {
    const auto& [h, at] = *found;
    spdlog::error(
        "index row of {}/{} was wrong ({}); corrected from its record at segment {} "
        "offset {}",
        e->ns, e->key, why.message(), at.segment, at.offset);
    DropDiskLocked(e.get());
    e->bytes = h.raw_len;  // only a disk-only entry's size can change here
    e->checksum = h.checksum;
    e->meta = h.meta;
    e->disk = at;
    durable_->Adopt(e->id(), *e, at, false);
    return Status::Ok();
  }
  spdlog::error(
      "index row of {}/{} does not match its record ({}); the row was dropped, the "
      "data kept",
      e->ns, e->key, why.message());
  durable_->Forget(*e);
  DropDiskLocked(e.get());
  if (e->pool) return Status::Ok();  // the pool copy serves, and is spilled again
  keydir_.erase(FullKey(e->ns, e->key));
  DetachLocked(e.get());  // no tombstone: the record on disk may well be intact
  return Status::NotFound("entry '" + e->key +
                          "': its index row does not match the record on "
                          "disk (" +
                          why.message() +
                          "); the row was dropped and the data kept: "
                          "rebuild the index (ec-store repair) to serve it again");
}

Status StoreImpl::DropCorrupt(const EntryPtr& e, const Status& why) {
  std::optional<Tombstone> tomb;
  {
    MutexLock l(&mu_);
    auto it = keydir_.find(FullKey(e->ns, e->key));
    if (it != keydir_.end() && it->second == e) {
      keydir_.erase(it);
      tomb = DetachLocked(e.get());
      durable_->NoteCorrupt();
    }
  }
  spdlog::error("entry {}/{} is corrupt on disk ({}); dropped", e->ns, e->key, why.message());
  if (tomb) durable_->WriteTombstones({*tomb});
  return Status::Corruption("entry '" + e->key + "' failed its checksum (" + why.message() +
                            "); it was dropped and must be recomputed");
}

// Drops a corrupt disk copy of an entry whose pool copy is sound; the next spill or Flush
// writes the pool copy again.
void StoreImpl::DropDiskCopy(const EntryPtr& e, const DiskLocation& loc) {
  std::optional<Tombstone> tomb;
  {
    MutexLock l(&mu_);
    if (e->erased || !e->disk || !(*e->disk == loc)) return;
    tomb = ForgetDiskCopyLocked(e.get());
    durable_->NoteCorrupt();
  }
  spdlog::error("disk copy of {}/{} is corrupt; dropped, the pool copy is kept", e->ns, e->key);
  durable_->WriteTombstones({*tomb});
}

// Reads a disk-only entry into a fresh pool block. Ok also when someone else promoted or
// erased it meanwhile; the caller looks again.
Status StoreImpl::Promote(const EntryPtr& e, bool wait) {
  PoolBlock blk;
  EC_RETURN_IF_ERROR(AllocateBlock(e->bytes, wait, &blk));
  DiskLocation loc;
  {
    MutexLock l(&mu_);
    if (e->erased || e->pool || e->loading || !e->disk) {
      pool().Free(blk);
      space_cv_.NotifyAll();
      return Status::Ok();
    }
    e->loading = true;
    loc = *e->disk;
  }
  bool stale_row = false;
  Status st = durable_->Read(*e, loc, pool_->Ptr(blk), blk.length, &stale_row);
  {
    MutexLock l(&mu_);
    e->loading = false;
    load_cv_.NotifyAll();
    if (st.ok() && !e->erased) {
      std::memset(pool_->Ptr(blk) + e->bytes, 0, blk.length - e->bytes);
      e->pool = blk;
      pool().Insert(e->id(), *e);
      ++pool().counters().promotions;
      durable_->NoteHit();
      return Status::Ok();
    }
    pool().Free(blk);
    space_cv_.NotifyAll();
  }
  if (stale_row) return FixStaleRow(e, loc, st);
  if (st.IsCorruption()) return DropCorrupt(e, st);
  return st;
}

Status StoreImpl::AddRegistrar(MemoryRegistrar* r) { return pool_->AddRegistrar(r); }

void StoreImpl::RemoveRegistrar(MemoryRegistrar* r) { pool_->RemoveRegistrar(r); }

Result<ReadLease> Store::Pin(std::string_view ns, std::string_view key) { return Acquire(ns, key); }

Result<ReadLease> StoreImpl::Acquire(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(CheckKey(ns, key));
  for (bool promoted = false;; promoted = true) {
    EntryPtr e;
    {
      UniqueLock l(&mu_);
      auto found = FindLocked(ns, key, !promoted);
      if (!found.ok()) return found.status();
      e = *found;
      if (e->pool) return LeaseLocked(e, !promoted);
      if (e->loading) {
        while (e->loading) load_cv_.Wait(l);
        continue;
      }
    }
    EC_RETURN_IF_ERROR(Promote(e, true));
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
      UniqueLock l(&mu_);
      auto found = FindLocked(ns, key, !promoted && ro.record_access);
      if (!found.ok()) return found.status();
      e = *found;
      if (dst.size() < e->bytes)
        return Status::InvalidArgument("destination buffer holds " + std::to_string(dst.size()) +
                                       " bytes but entry '" + e->key + "' has " +
                                       std::to_string(e->bytes) + "; Lookup the size first");
      if (e->pool) {
        ReadLease lease = ro.record_access ? LeaseLocked(e, !promoted) : QuietLeaseLocked(e);
        info = InfoLocked(*e);
        l.unlock();
        std::memcpy(dst.data(), lease.data(), lease.size());
        return info;
      }
      if (e->loading) {
        while (e->loading) load_cv_.Wait(l);
        continue;
      }
      if (!promote) {
        loc = *e->disk;
        if (ro.record_access) TouchLocked(e.get());
        info = InfoLocked(*e);
      }
    }
    if (promote) {
      Status st = Promote(e, false);
      if (st.ok()) continue;
      if (!st.IsBusy()) return st;
      // No pool space right now: serve straight from disk; promotion can happen next time.
      MutexLock l(&mu_);
      if (!e->disk || e->erased) continue;
      loc = *e->disk;
      TouchLocked(e.get());
      info = InfoLocked(*e);
    }
    bool stale_row = false;
    Status st = durable_->Read(*e, loc, dst.data(), dst.size(), &stale_row);
    if (stale_row) {
      EC_RETURN_IF_ERROR(FixStaleRow(e, loc, st));
      continue;
    }
    if (st.IsCorruption()) return DropCorrupt(e, st);
    if (!st.ok()) return st;
    if (ro.record_access) durable_->NoteHit();
    return info;
  }
}

// Counts a hit on an entry served from disk.
void StoreImpl::TouchLocked(Entry* e) {
  ++e->hits;
  e->touched = true;
  e->last_access_us = env_->NowMicros();
  durable_->Touch(e->id());
}

// A lease that leaves no trace: no hit, no LRU touch (verify, export).
ReadLease StoreImpl::QuietLeaseLocked(const EntryPtr& e) {
  ++e->leases;
  return ReadLease(this, new EntryPtr(e), pool_->Ptr(*e->pool), InfoLocked(*e));
}

Result<EntryInfo> StoreImpl::Lookup(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(CheckKey(ns, key));
  MutexLock l(&mu_);
  auto found = FindLocked(ns, key, false);
  if (!found.ok()) return found.status();
  return InfoLocked(**found);
}

Result<std::vector<std::optional<EntryInfo>>> StoreImpl::LookupMany(
    std::string_view ns, const std::vector<std::string>& keys) {
  for (const auto& k : keys) EC_RETURN_IF_ERROR(CheckKey(ns, k));
  std::vector<std::optional<EntryInfo>> out(keys.size());
  MutexLock l(&mu_);
  if (closed_) return Status::Unavailable("store is closed");
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = keydir_.find(FullKey(ns, keys[i]));
    if (it != keydir_.end()) out[i] = InfoLocked(*it->second);
  }
  return out;
}

// The hot path of a scheduler asking "is it cached?" every step: one hash lookup.
Result<bool> StoreImpl::Contains(std::string_view ns, std::string_view key) {
  MutexLock l(&mu_);
  if (closed_) return Status::Unavailable("store is closed");
  return keydir_.count(FullKey(ns, key)) > 0;
}

std::vector<Result<EntryInfo>> StoreImpl::GetMany(std::string_view ns,
                                                  const std::vector<std::string>& keys,
                                                  const std::vector<std::span<uint8_t>>& dsts) {
  std::vector<Result<EntryInfo>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    out.push_back(i < dsts.size() ? Get(ns, keys[i], dsts[i])
                                  : Result<EntryInfo>(Status::InvalidArgument(
                                        "GetMany needs one buffer per key")));
  return out;
}

Status StoreImpl::Erase(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(CheckWritable());
  EC_RETURN_IF_ERROR(CheckKey(ns, key));
  std::optional<Tombstone> tomb;
  EntryPtr e;
  {
    MutexLock l(&mu_);
    auto found = FindLocked(ns, key, false);
    if (!found.ok()) return found.status();
    e = *found;
    keydir_.erase(FullKey(ns, key));
    tomb = DetachLocked(e.get());
  }
  if (tomb) return durable_->WriteTombstones({*tomb});
  AwaitSpill(e);
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
    MutexLock l(&mu_);
    if (closed_) return Status::Unavailable("store is closed");
    for (size_t i = 0; i < ns_keys.size(); ++i) {
      auto it = keydir_.find(FullKey(ns_keys[i].first, ns_keys[i].second));
      if (it == keydir_.end()) continue;
      EntryPtr e = it->second;
      keydir_.erase(it);
      if (auto t = DetachLocked(e.get())) tombs.push_back(std::move(*t));
      detached.push_back(std::move(e));
      (*erased)[i] = true;
    }
  }
  Status st = durable_->WriteTombstones(std::move(tombs));
  for (const EntryPtr& e : detached) AwaitSpill(e);
  return st;
}

// Waits until a detached entry's spill in flight (if any) has ended, and with it the
// tombstone that spill writes for it: then no crash can bring the entry's bytes back.
void StoreImpl::AwaitSpill(const EntryPtr& e) {
  UniqueLock l(&mu_);
  while (e->spilling) spill_cv_.Wait(l);
}

Status StoreImpl::ListPages(size_t page_size,
                            const std::function<bool(std::vector<EntryInfo>&&)>& on_page) {
  if (page_size == 0) return Status::InvalidArgument("ListPages needs a page size above 0");
  std::vector<EntryPtr> snapshot;  // pointers only: the metadata is copied a page at a time
  {
    MutexLock l(&mu_);
    if (closed_) return Status::Unavailable("store is closed");
    snapshot.reserve(keydir_.size());
    for (const auto& [_, e] : keydir_) snapshot.push_back(e);
  }
  for (size_t at = 0; at < snapshot.size(); at += page_size) {
    std::vector<EntryInfo> page;
    {
      MutexLock l(&mu_);
      for (size_t i = at; i < std::min(snapshot.size(), at + page_size); ++i)
        page.push_back(InfoLocked(*snapshot[i]));
    }
    if (!on_page(std::move(page))) break;
  }
  return Status::Ok();
}

Result<StoreStats> StoreImpl::Stats() {
  MutexLock l(&mu_);
  StoreStats s;
  if (pool_) {
    s.at(Tier::kPool) = pool().Stats();
    s.pool_fragmentation = pool().fragmentation();
    s.pool_huge_pages = pool_->region().huge_pages;
    s.pool_locked = pool_->region().locked;
  }
  TierStats& disk = s.at(Tier::kDisk);
  if (durable_) durable_->FillStats(&disk, &s.segments, &s.compactions, &s.corrupt_dropped);
  disk.tier = Tier::kDisk;
  disk.misses = stats_.misses;
  s.spill_errors = stats_.spill_errors;
  s.misses = stats_.misses;
  return s;
}

// ---------------------------------------------------------------- eviction and spill

bool StoreImpl::NeedsEvictionLocked() const { return pool().NeedsEviction(need_bytes_); }

bool StoreImpl::EvictionDoneLocked() const { return pool().EvictionDone(need_bytes_); }

void StoreImpl::EvictorLoop() {
  UniqueLock l(&mu_);
  while (!stop_) {
    while (!stop_ && !NeedsEvictionLocked()) evict_cv_.Wait(l);
    if (stop_) break;
    if (std::chrono::steady_clock::now() < spill_retry_at_) {  // back off after a failed spill
      evict_cv_.WaitUntil(l, spill_retry_at_);                 // or a stop, or a new Put's nudge
      continue;
    }
    bool progress = EvictSomeLocked();
    if (EvictionDoneLocked() || pool().largest_free_extent() >= need_bytes_) need_bytes_ = 0;
    space_cv_.NotifyAll();
    if (!progress && !stop_) {
      // Everything evictable is leased or failed to spill: wait for a release or a retry.
      evict_cv_.WaitFor(l, std::chrono::milliseconds(50));
    }
  }
}

bool StoreImpl::EvictSomeLocked() {
  bool freed = false;
  std::vector<EntryPtr> batch;
  uint64_t batch_bytes = 0;
  auto done = [&]() REQUIRES(mu_) { return pool().EvictionDone(need_bytes_, batch_bytes); };
  for (uint64_t id : pool().Coldest(256)) {
    Entry* e = reinterpret_cast<Entry*>(id);
    if (e->leases > 0 || e->spilling || e->loading || e->erased) continue;
    if (e->disk) {  // a clean copy: dropping the pool block costs no I/O
      FreePoolLocked(e);
      ++pool().counters().evictions;
      freed = true;
    } else {
      e->spilling = true;
      batch.push_back(e->shared_from_this());
      batch_bytes += e->pool->length;
    }
    if (done() || batch_bytes >= kSpillBatchBytes) break;
  }
  if (batch.empty()) return freed;
  mu_.unlock();  // never across I/O
  Status st = SpillBatch(batch, true);
  durable_->MaybeCompact();
  mu_.lock();
  return freed || st.ok();
}

// The disk quota asks for room: gives up the coldest disk copies until it is satisfied.
bool StoreImpl::YieldForQuota(uint64_t incoming, std::vector<Tombstone>* tombs) {
  MutexLock l(&mu_);
  bool any = false;
  for (uint64_t id : durable_->Coldest(64)) {
    Entry* e = reinterpret_cast<Entry*>(id);
    if (e->leases > 0 || e->loading || e->spilling) continue;
    any = true;
    if (e->pool) {  // still hot: keep it in the pool, give up only its disk copy
      tombs->push_back(ForgetDiskCopyLocked(e));
    } else {
      EntryPtr keep = e->shared_from_this();
      keydir_.erase(FullKey(e->ns, e->key));
      if (auto t = DetachLocked(e)) tombs->push_back(*t);
    }
    if (!durable_->OverQuota(incoming)) break;
  }
  return any;
}

Status StoreImpl::SpillBatch(const std::vector<EntryPtr>& batch, bool drop_from_pool) {
  std::vector<DurableTier::SpillItem> items;
  {
    MutexLock l(&mu_);
    for (const EntryPtr& e : batch) items.push_back({e->id(), *e, pool_->Ptr(*e->pool)});
  }
  std::vector<Tombstone> tombs;
  std::vector<EntryPtr> dead;
  auto install = [&](const Status& st, const std::vector<DurableTier::SpillOutcome>& out) {
    MutexLock l(&mu_);
    for (size_t i = 0; i < batch.size(); ++i) {
      Entry* e = batch[i].get();
      if (out[i].too_big) {
        DropUnspillableLocked(e, drop_from_pool);
      } else if (st.ok() && e->erased) {
        // Erased (or replaced) while its bytes were in flight: that record is dead. It stays
        // "spilling" until its tombstone is durable: the Erase or Put waiting on it returns
        // only then, so a crash cannot bring the old bytes back.
        tombs.push_back({e->ns, e->key, e->seq});
        dead.push_back(batch[i]);
      } else if (!st.ok()) {
        e->spilling = false;
        if (e->erased && e->leases == 0) FreePoolLocked(e);
      } else {
        e->spilling = false;
        InstallSpilledLocked(e, *out[i].loc, drop_from_pool);
      }
    }
    NoteSpillResultLocked(st, batch.size());
    space_cv_.NotifyAll();
    spill_cv_.NotifyAll();
  };
  Status st = durable_->Spill(items, install);
  durable_->WriteTombstones(std::move(tombs));
  if (!dead.empty()) {
    MutexLock l(&mu_);
    for (const EntryPtr& e : dead) {
      e->spilling = false;
      if (e->leases == 0) FreePoolLocked(e.get());
    }
    spill_cv_.NotifyAll();
  }
  return st;
}

// An entry that cannot live on disk at all (larger than the quota): the cache drops it.
void StoreImpl::DropUnspillableLocked(Entry* e, bool drop_from_pool) {
  e->spilling = false;
  if (!drop_from_pool) return;
  ++pool().counters().evictions;
  if (!e->erased) {
    keydir_.erase(FullKey(e->ns, e->key));
    DetachLocked(e);
  } else if (e->leases == 0) {
    FreePoolLocked(e);
  }
}

// A spilled entry now has a durable copy at `loc`.
void StoreImpl::InstallSpilledLocked(Entry* e, const DiskLocation& loc, bool drop_from_pool) {
  e->disk = loc;
  durable_->Adopt(e->id(), *e, loc, true);
  ++pool().counters().spills;
  if (drop_from_pool && e->leases == 0) {
    FreePoolLocked(e);
    ++pool().counters().evictions;
  }
}

// Failure bookkeeping: Put gives up on the pool after two failed spills in a row, and the
// evictor backs off.
void StoreImpl::NoteSpillResultLocked(const Status& st, size_t entries) {
  if (st.ok()) {
    consecutive_spill_failures_ = 0;
    return;
  }
  ++consecutive_spill_failures_;
  spill_retry_at_ = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(consecutive_spill_failures_ > 1 ? 200 : 0);
  ++stats_.spill_errors;
  const std::string why = "pool is full and spilling to disk failed: " + st.message();
  last_spill_error_ = st.IsNoSpace() ? Status::NoSpace(why) : Status::IOError(why);
  ++spill_fail_gen_;
  spdlog::error("spill of {} entries failed: {}", entries, st.ToString());
}

Status StoreImpl::Flush() {
  for (;;) {
    std::vector<EntryPtr> batch;
    uint64_t bytes = 0;
    {
      MutexLock l(&mu_);
      if (closed_) return Status::Unavailable("store is closed");
      for (auto& [_, e] : keydir_) {
        if (e->pool && !e->disk && !e->spilling && !e->erased) {
          e->spilling = true;
          batch.push_back(e);
          bytes += e->bytes;
          if (bytes >= kSpillBatchBytes) break;
        }
      }
    }
    if (batch.empty()) break;
    EC_RETURN_IF_ERROR(SpillBatch(batch, false));
  }
  return durable_->Flush();
}

// ---------------------------------------------------------------- verify / compact

Result<VerifyReport> StoreImpl::Verify(const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<EntryPtr> all;
  {
    MutexLock l(&mu_);
    for (auto& [_, e] : keydir_) all.push_back(e);
  }
  VerifyReport report;
  uint64_t done = 0;
  for (const EntryPtr& e : all) {
    if (progress) progress(done, all.size());
    ++done;
    Status st = VerifyEntry(e, &report);
    if (!st.ok()) report.errors.push_back(e->ns + "/" + e->key + ": " + st.message());
  }
  // Headers too: a damaged header hides its record from a rebuild of the index.
  durable_->VerifyHeaders(&report.corrupt, &report.errors);
  if (progress) progress(all.size(), all.size());
  return report;
}

// Checks one entry's pool and disk copies. A corrupt copy is dropped and reported in
// report->corrupt; what keeps a check from finishing (a failing device) is returned.
Status StoreImpl::VerifyEntry(const EntryPtr& e, VerifyReport* report) {
  std::optional<ReadLease> lease;
  std::optional<DiskLocation> loc;
  {
    MutexLock l(&mu_);
    if (e->erased) return Status::Ok();
    if (e->pool) lease.emplace(QuietLeaseLocked(e));
    loc = e->disk;
  }
  ++report->checked;
  report->bytes += e->bytes;
  const std::string name = e->ns + "/" + e->key + ": ";
  const bool pool_good = lease && PayloadChecksum(lease->data(), lease->size()) == e->checksum;
  Status bad;
  if (lease && !pool_good) bad = Status::Corruption("pool copy checksum mismatch");
  lease.reset();
  if (bad.ok() && loc) {
    AlignedBuffer buf(e->bytes);
    bool stale_row = false;
    bad = durable_->Read(*e, *loc, buf.data(), buf.size(), &stale_row);
    if (stale_row) {
      Status fixed = FixStaleRow(e, *loc, bad);
      std::optional<DiskLocation> moved;
      {
        MutexLock l(&mu_);
        if (!e->erased) moved = e->disk;
      }
      if (!fixed.ok() || !moved) return fixed;
      bad = durable_->Read(*e, *moved, buf.data(), buf.size(), &stale_row);  // the record it found
      if (!bad.ok()) return bad;
    }
  }
  if (bad.ok()) return Status::Ok();
  if (!bad.IsCorruption())  // the device failed, not the data: report and keep it
    return Status::IOError(bad.ToString());
  if (pool_good) {  // only the disk copy is bad: drop it; the pool copy is spilled again
    DropDiskCopy(e, *loc);
    report->corrupt.push_back(name + bad.message() + " (disk copy dropped, pool copy kept)");
    return Status::Ok();
  }
  DropCorrupt(e, bad);
  report->corrupt.push_back(name + bad.message());
  return Status::Ok();
}

Status StoreImpl::Compact(double threshold) { return durable_->Compact(threshold); }

// ---------------------------------------------------------------- DurableTier::Owner

// The keydir entry that `rec` (a record at `at`) still describes.
Result<EntryPtr> StoreImpl::FindRecordLocked(const EntryRecord& rec, const DiskLocation& at) {
  auto it = keydir_.find(FullKey(rec.ns, rec.key));
  if (it == keydir_.end()) return Status::NotFound("erased");
  const EntryPtr& e = it->second;
  if (e->seq != rec.seq || e->erased || !e->disk || !(*e->disk == at))
    return Status::NotFound("changed meanwhile");
  return e;
}

std::vector<IndexRow> StoreImpl::RecordsIn(uint32_t segment) {
  std::vector<IndexRow> live;
  MutexLock l(&mu_);
  for (auto& [_, e] : keydir_)
    if (e->disk && e->disk->segment == segment) live.emplace_back(*e, *e->disk);
  return live;
}

void StoreImpl::Relocate(const EntryRecord& rec, const DiskLocation& from, const DiskLocation& to) {
  MutexLock l(&mu_);
  auto e = FindRecordLocked(rec, from);
  if (!e.ok()) return;
  (*e)->disk = to;
  durable_->Moved(**e, from, to);
}

void StoreImpl::RecordCorrupt(const EntryRecord& rec, const DiskLocation& at, const Status& why) {
  EntryPtr e;
  {
    MutexLock l(&mu_);
    auto found = FindRecordLocked(rec, at);
    if (!found.ok()) return;
    e = *found;
  }
  DropCorrupt(e, why);
}

}  // namespace ecstore
