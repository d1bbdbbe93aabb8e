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

// Why a record's header does not belong to the entry an index row says it holds ("" = it does).
std::string RecordMismatch(const Entry& e, const DiskLocation& loc, const Result<RecordInfo>& h) {
  std::string at =
      "segment " + std::to_string(loc.segment) + " offset " + std::to_string(loc.offset);
  if (!h.ok()) return "no valid record header at " + at + ": " + h.status().message();
  if (h->tombstone() || h->ns != e.ns || h->key != e.key || h->seq != e.seq)
    return "the record at " + at + " is another entry's";
  if (h->raw_len != e.bytes || h->stored_len != loc.stored_len || h->codec != loc.codec ||
      h->checksum != e.checksum || (h->codec == Codec::kNone && h->stored_len != h->raw_len))
    return "length, codec or checksum differ from the record at " + at;
  return "";
}

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

  read_only_ = opt_.read_only;
  struct statvfs fs {};
  if (!read_only_ && statvfs(dir_.c_str(), &fs) == 0 &&
      static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize < kMinFreeBytes) {
    read_only_ = true;
    spdlog::warn(
        "disk full ({} bytes free where {} lives): opened read-only; writes fail "
        "until space is freed",
        static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize, dir_);
  }
  if (read_only_ && opt_.rebuild_index)
    return Status::NoSpace("rebuilding the index of " + dir_ + " needs free disk space (" +
                           (opt_.read_only ? "opened read-only" : "the disk is full") + ")");
  const std::string index_path = dir_ + "/index.sqlite";
  bool index_existed = env_->FileExists(index_path);
  bool index_damaged = false;
  EC_RETURN_IF_ERROR(OpenIndex(index_path, &index_damaged));
  DiskOptions dopt;
  // Segments of at most an eighth of the quota, so that compacting dead bytes away (which
  // works a sealed segment at a time) can keep the files within the quota.
  dopt.segment_bytes = std::min(
      opt_.segment_bytes, std::max<uint64_t>(RoundUpBlock(opt_.disk_quota_bytes / 8), 1 << 20));
  dopt.queue_depth = opt_.io_queue_depth;
  dopt.io_chunk_bytes = opt_.io_chunk_bytes;
  auto disk = DiskTier::Open(dir_ + "/segments", env_, dopt);
  if (!disk.ok()) return disk.status();
  disk_ = std::move(disk).value();

  backend_ = opt_.memory_backend ? opt_.memory_backend() : NewHostPinnedBackend();
  if (!backend_) return Status::InvalidArgument("Options::memory_backend returned no backend");
  auto region = backend_->Map(opt_.pool_bytes);
  if (!region.ok()) return region.status();
  region_ = *region;
  if (!region_.locked)
    spdlog::warn("pool of {} bytes could not be mlocked (RLIMIT_MEMLOCK); it is not pinned",
                 region_.size);
  {
    MutexLock l(&mu_);  // nothing else runs yet; the lock keeps the analysis whole
    alloc_ = std::make_unique<PoolAllocator>(region_.size);
    pool_policy_ = NewEvictionPolicy(opt_.eviction_policy);
    disk_policy_ = NewEvictionPolicy(opt_.eviction_policy);
  }

  bool rebuild =
      opt_.rebuild_index || index_damaged || (!index_existed && !disk_->Segments().empty());
  if (!index_existed && rebuild && !opt_.rebuild_index)
    spdlog::warn("index {} is missing; rebuilding it from the segment files", index_path);
  st = Recover(rebuild);
  if (st.IsCorruption() && !rebuild) {  // a damaged page turned up while loading
    {
      MutexLock l(&mu_);
      ResetKeydirLocked();
    }
    index_.reset();
    EC_RETURN_IF_ERROR(SetIndexAside(index_path, st));
    EC_RETURN_IF_ERROR(OpenIndex(index_path, &index_damaged));
    st = Recover(true);
  }
  EC_RETURN_IF_ERROR(st);
  evictor_ = std::thread([this] { EvictorLoop(); });
  return Status::Ok();
}

// Opens the index. A damaged file (or, for a requested rebuild, one failing SQLite's
// quick_check) is moved aside, never deleted, and a fresh one is made: the segments are the
// source of truth, so *damaged tells the caller to rebuild from them.
Status StoreImpl::OpenIndex(const std::string& path, bool* damaged) {
  if (read_only_) {  // nothing set aside or rebuilt on disk; a missing index is rebuilt in memory
    auto index = Index::Open(path, true);
    if (!index.ok()) return index.status();
    index_ = std::move(index).value();
    return Status::Ok();
  }
  auto index = Index::Open(path);
  Status bad = index.ok() ? Status::Ok() : index.status();
  if (index.ok() && opt_.rebuild_index) {
    bad = (*index)->Check();
    if (bad.IsCorruption()) index = Status::Corruption(bad.message());
  }
  if (!bad.ok() && !bad.IsCorruption()) return bad;
  if (bad.IsCorruption()) {
    EC_RETURN_IF_ERROR(SetIndexAside(path, bad));
    index = Index::Open(path);
    if (!index.ok()) return index.status();
    *damaged = true;
  }
  index_ = std::move(index).value();
  return Status::Ok();
}

Status StoreImpl::SetIndexAside(const std::string& path, const Status& why) {
  const std::string aside = path + ".broken-" + std::to_string(env_->NowMicros() / 1000000);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::string from = path + suffix;
    if (!env_->FileExists(from)) continue;
    Status st = env_->RenameFile(from, aside + suffix);
    if (!st.ok())
      return Status::IOError("index " + path + " is damaged (" + why.message() +
                             ") and could not be moved aside: " + st.message() +
                             "; move it away by hand and open again");
  }
  spdlog::warn(
      "index {} is damaged ({}); moved it to {} and rebuilding the index from the "
      "segment files (entries keep their data; access statistics restart)",
      path, why.message(), aside);
  return Status::Ok();
}

void StoreImpl::ResetKeydirLocked() {
  keydir_.clear();
  segment_live_.clear();
  pool_policy_ = NewEvictionPolicy(opt_.eviction_policy);
  disk_policy_ = NewEvictionPolicy(opt_.eviction_policy);
  disk_entries_ = disk_bytes_ = disk_record_bytes_ = 0;
  stats_ = {};
}

Status StoreImpl::Recover(bool rebuild) {
  std::map<uint32_t, uint64_t> tails;
  if (rebuild) {
    EC_RETURN_IF_ERROR(index_->Reset());
  } else {
    auto t = index_->SegmentTails();
    if (!t.ok()) return t.status();
    tails = std::move(t).value();
  }
  std::vector<uint32_t> segs = disk_->Segments();
  MutexLock l(&mu_);
  Recovery rs;
  if (!rebuild) EC_RETURN_IF_ERROR(LoadIndexLocked(segs, &rs));
  bool tail_clean = true;  // of the last segment, once scanned
  for (uint32_t seg : segs)
    EC_RETURN_IF_ERROR(
        ScanTailLocked(seg, tails.count(seg) ? tails[seg] : 0, rebuild, &rs, &tail_clean));
  // Entries replaced during the scan left keydir_; only live ones join the LRU, oldest first.
  std::vector<std::pair<uint64_t, Entry*>> order;
  order.reserve(rs.loaded.size());
  for (const EntryPtr& e : rs.loaded)
    if (e->disk && !e->erased) order.emplace_back(e->last_access_us, e.get());
  std::sort(order.begin(), order.end());
  for (auto [_, e] : order) disk_policy_->Insert(e->id(), e->bytes, e->meta.recompute_cost);
  next_seq_ = rs.max_seq + 1;
  if (tail_clean && !read_only_) disk_->ReopenTail();  // the last segment ends on a whole record
  return index_->Flush();
}

// Puts a recovered disk entry into the keydir (replacing an older one there).
void StoreImpl::InstallLocked(IndexRow&& row, Recovery* rs) {
  auto e = std::make_shared<Entry>();
  e->seq = row.seq;
  e->ns = std::move(row.ns);
  e->key = std::move(row.key);
  e->full_key = FullKey(e->ns, e->key);
  e->meta = std::move(row.meta);
  e->bytes = row.raw_len;
  e->checksum = row.checksum;
  e->created_us = row.created_us;
  e->last_access_us = row.last_access_us;
  e->hits = row.hits;
  e->disk = row.loc;
  auto it = keydir_.find(e->full_key);
  if (it != keydir_.end()) {
    DropDiskLocked(it->second.get());
    keydir_.erase(it);
  }
  keydir_.emplace(e->full_key, e);
  rs->loaded.push_back(e);
  segment_live_[row.loc.segment] += row.loc.record_bytes();
  ++disk_entries_;
  disk_bytes_ += e->bytes;
  disk_record_bytes_ += row.loc.record_bytes();
  rs->max_seq = std::max(rs->max_seq, row.seq);
}

// Loads every index row. Decoding SQLite rows and building entries overlap: a reader thread
// hands batches of rows over.
Status StoreImpl::LoadIndexLocked(const std::vector<uint32_t>& segs, Recovery* rs) {
  auto count = index_->Count();
  if (!count.ok()) return count.status();
  keydir_.reserve(*count);
  rs->loaded.reserve(*count);
  disk_policy_->Reserve(*count);
  pool_policy_->Reserve(std::min<uint64_t>(*count, 1 << 16));
  std::mutex qmu;
  std::condition_variable qcv;
  std::deque<std::vector<IndexRow>> batches;
  bool reader_done = false;
  Status read_status;
  std::thread reader([&] {
    std::vector<IndexRow> batch;
    auto hand_over = [&] {
      std::lock_guard<std::mutex> ql(qmu);
      batches.push_back(std::exchange(batch, {}));
      qcv.notify_one();
    };
    Status st = index_->ForEach([&](IndexRow&& row) {
      batch.push_back(std::move(row));
      if (batch.size() == 4096) hand_over();
    });
    hand_over();
    std::lock_guard<std::mutex> ql(qmu);
    read_status = st;
    reader_done = true;
    qcv.notify_one();
  });
  for (;;) {
    std::vector<IndexRow> batch;
    {
      std::unique_lock<std::mutex> ql(qmu);
      qcv.wait(ql, [&] { return reader_done || !batches.empty(); });
      if (batches.empty()) break;
      batch = std::move(batches.front());
      batches.pop_front();
    }
    for (IndexRow& row : batch) {
      if (!std::binary_search(segs.begin(), segs.end(), row.loc.segment)) {
        spdlog::warn("index entry {}/{} points at missing segment {}; dropped", row.ns, row.key,
                     row.loc.segment);
        index_->EnqueueDelete(row.ns, row.key, row.seq);
        continue;
      }
      InstallLocked(std::move(row), rs);
    }
  }
  reader.join();
  return read_status;
}

// Records past a segment's indexed tail were written but not yet indexed when the store last
// stopped: index them now, applying tombstones. A torn tail (a crash mid-write) is cut off.
Status StoreImpl::ScanTailLocked(uint32_t seg, uint64_t from, bool rebuild, Recovery* rs,
                                 bool* tail_clean) {
  // The callback runs on this thread, inside Scan, with mu_ still held.
  auto scan = disk_->Scan(
      seg, from, true,
      [&](const RecordInfo& info, const DiskLocation& loc, bool payload_ok) REQUIRES(mu_) {
        rs->max_seq = std::max({rs->max_seq, info.seq, info.target_seq});
        std::string fk = FullKey(info.ns, info.key);
        auto it = keydir_.find(fk);
        if (info.tombstone()) {
          uint64_t& t = rs->tomb_targets[fk];
          t = std::max(t, info.target_seq);
          if (it != keydir_.end() && it->second->seq <= info.target_seq) {
            DropDiskLocked(it->second.get());
            keydir_.erase(it);
          }
          index_->EnqueueDelete(info.ns, info.key, info.target_seq);
          return;
        }
        if (!payload_ok) {
          ++stats_.corrupt_dropped;
          spdlog::error("segment {} offset {}: record {}/{} fails its checksum; not indexed", seg,
                        loc.offset, info.ns, info.key);
          return;
        }
        auto tomb = rs->tomb_targets.find(fk);
        if (tomb != rs->tomb_targets.end() && info.seq <= tomb->second) return;
        if (it != keydir_.end() && it->second->seq > info.seq) return;
        IndexRow row = IndexRow::FromRecord(info, loc);
        index_->EnqueuePut(row);
        InstallLocked(std::move(row), rs);
      });
  if (!scan.ok()) return scan.status();
  stats_.corrupt_dropped += scan->bad_headers;
  if (scan->torn_tail && !rebuild && !read_only_) {
    spdlog::warn("segment {}: cutting a torn tail at offset {} (a write was interrupted)", seg,
                 scan->end);
    EC_RETURN_IF_ERROR(disk_->TruncateSegment(seg, scan->end));
  }
  *tail_clean = !scan->torn_tail || !rebuild;
  index_->EnqueueTail(seg, scan->end);
  return Status::Ok();
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
    partial = !index_ || !disk_ || !alloc_;
    if (partial) closed_ = true;
  }
  if (partial) {  // Init failed part way: nothing was served
    index_.reset();
    disk_.reset();
    if (backend_) backend_->Unmap(region_);
    region_ = {};
    return Status::Ok();
  }
  Status st = Flush();
  {
    MutexLock l(&mu_);
    for (auto& [_, e] : keydir_)
      if (e->disk && e->touched) {
        index_->EnqueueTouch(e->ns, e->key, e->last_access_us, e->hits);
        e->touched = false;
      }
    closed_ = true;
  }
  Status ist = index_->Flush();
  if (st.ok()) st = ist;
  index_.reset();
  disk_.reset();
  {
    std::lock_guard<std::mutex> rl(registrars_mu_);  // AddRegistrar reads region_
    for (MemoryRegistrar* r : registered_) r->Deregister(region_);
    registered_.clear();
    if (backend_) backend_->Unmap(region_);
    region_ = {};
  }
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
      ++stats_.pool.misses;
    }
    return Status::NotFound("no entry for key '" + std::string(key) + "' in namespace '" +
                            std::string(ns) + "'");
  }
  return it->second;
}

EntryInfo StoreImpl::InfoLocked(const Entry& e) const {
  EntryInfo i;
  i.ns = e.ns;
  i.key = e.key;
  if (e.pool) i.tiers.add(Tier::kPool);
  if (e.disk) i.tiers.add(Tier::kDisk);
  i.bytes = e.bytes;
  i.meta = e.meta;
  i.created_us = e.created_us;
  i.last_access_us = e.last_access_us;
  i.hits = e.hits;
  i.checksum = e.checksum;
  return i;
}

IndexRow StoreImpl::RowLocked(const Entry& e) const {
  IndexRow r;
  r.ns = e.ns;
  r.key = e.key;
  r.seq = e.seq;
  r.loc = *e.disk;
  r.raw_len = e.bytes;
  r.checksum = e.checksum;
  r.meta = e.meta;
  r.created_us = e.created_us;
  r.last_access_us = e.last_access_us;
  r.hits = e.hits;
  return r;
}

void StoreImpl::FreePoolLocked(Entry* e) {
  if (!e->pool) return;
  alloc_->Free(*e->pool);
  e->pool.reset();
  pool_policy_->Remove(e->id());
  --pool_entries_;
  pool_bytes_ -= e->bytes;
  space_cv_.NotifyAll();
}

void StoreImpl::DropDiskLocked(Entry* e) {
  if (!e->disk) return;
  segment_live_[e->disk->segment] -= e->disk->record_bytes();
  disk_record_bytes_ -= e->disk->record_bytes();
  --disk_entries_;
  disk_bytes_ -= e->bytes;
  disk_policy_->Remove(e->id());
  e->disk.reset();
}

// Gives up the disk copy of an entry that stays in the pool. The entry takes a new seq, so
// the copy spilled next outlives the tombstone returned for the old one.
Tombstone StoreImpl::ForgetDiskCopyLocked(Entry* e) {
  Tombstone t{e->ns, e->key, e->seq};
  DropDiskLocked(e);
  e->seq = next_seq_++;
  return t;
}

// Unlinks an entry that has left the keydir. Its pool block goes back now, or when the last
// lease ends / the spill in flight finishes. Returns the tombstone its disk copy needs.
std::optional<Tombstone> StoreImpl::DetachLocked(Entry* e) {
  e->erased = true;
  if (e->leases == 0 && !e->spilling)
    FreePoolLocked(e);
  else
    pool_policy_->Remove(e->id());
  if (!e->disk) return std::nullopt;
  Tombstone t{e->ns, e->key, e->seq};
  DropDiskLocked(e);
  return t;
}

DiskTier::WriteItem StoreImpl::TombstoneItem(const Tombstone& t) {
  DiskTier::WriteItem it;
  it.info.flags = RecordInfo::kTombstone;
  it.info.seq = next_seq_++;
  it.info.target_seq = t.target_seq;
  it.info.ns = t.ns;
  it.info.key = t.key;
  it.info.created_us = env_->NowMicros();
  return it;
}

Status StoreImpl::WriteTombstones(std::vector<Tombstone> tombs) {
  if (tombs.empty()) return Status::Ok();
  EC_RETURN_IF_ERROR(CheckWritable());  // read-only: a dropped entry stays dropped in memory
  std::vector<DiskTier::WriteItem> items;
  for (const Tombstone& t : tombs) items.push_back(TombstoneItem(t));
  std::vector<DiskLocation> locs;
  Status st = disk_->Append(items, &locs);
  if (!st.ok())
    spdlog::error(
        "could not write {} tombstone(s): {}; a later index rebuild may bring the "
        "erased entries back",
        tombs.size(), st.ToString());
  else
    index_->EnqueueTail(locs.back().segment, locs.back().offset + locs.back().record_bytes());
  for (Tombstone& t : tombs) index_->EnqueueDelete(std::move(t.ns), std::move(t.key), t.target_seq);
  if (!st.ok())
    return Status(st.IsNoSpace()
                      ? Status::NoSpace("erased, but not durably: " + st.message())
                      : Status::IOError("erased, but not durably: the tombstone could "
                                        "not be written (" +
                                        st.message() + "); a crash may bring the entry back"));
  return Status::Ok();
}

ReadLease StoreImpl::LeaseLocked(const EntryPtr& e, bool count_hit) {
  ++e->leases;
  ++e->hits;
  e->touched = true;
  e->last_access_us = env_->NowMicros();
  pool_policy_->Touch(e->id());
  disk_policy_->Touch(e->id());
  if (count_hit) ++stats_.pool.hits;  // a get served by promotion counted as a disk hit
  return ReadLease(this, new EntryPtr(e), PoolPtr(*e->pool), InfoLocked(*e));
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
  const uint64_t need = alloc_->RoundUp(bytes);
  const auto deadline = std::chrono::steady_clock::now() + opt_.put_wait;
  const uint64_t fail_gen = spill_fail_gen_;
  for (;;) {
    if (stop_ && wait) return Status::Unavailable("store is closing");
    if (auto b = alloc_->Allocate(bytes)) {
      *out = *b;
      if (NeedsEvictionLocked()) evict_cv_.NotifyOne();
      return Status::Ok();
    }
    need_bytes_ = std::max(need_bytes_, need);
    evict_cv_.NotifyOne();
    if (!wait) return Status::Busy("no free pool block right now");
    if (spill_fail_gen_ != fail_gen && consecutive_spill_failures_ >= 2) return last_spill_error_;
    if (!space_cv_.WaitUntil(l, deadline)) {
      if (auto b = alloc_->Allocate(bytes)) {
        *out = *b;
        return Status::Ok();
      }
      uint64_t leased = 0;
      for (auto& [_, e] : keydir_) leased += e->leases > 0;
      if (!last_spill_error_.ok() && spill_fail_gen_ != fail_gen) return last_spill_error_;
      return Status::Busy("pool is full (" + std::to_string(pool_entries_) + " entries, " +
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

Status StoreImpl::CheckWritable() const {
  if (!read_only_) return Status::Ok();
  return Status::NoSpace("store " + dir_ + " is open read-only (" +
                         (opt_.read_only ? std::string("as asked") : "its disk was full") +
                         "); free disk space and open it again to write");
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
    MutexLock l(&mu_);
    if (closed_ || stop_) return Status::Unavailable("store is closed");
    if (alloc_->RoundUp(size) > alloc_->capacity())
      return Status::NoSpace(
          "entry of " + std::to_string(size) + " bytes is larger than the whole pool (" +
          std::to_string(alloc_->capacity()) + " bytes); raise Options::pool_bytes");
  }
  auto p = std::make_unique<Pending>();
  EC_RETURN_IF_ERROR(AllocateBlock(size, true, &p->block));
  p->ns = ns;
  p->key = key;
  p->meta = meta;
  uint8_t* data = PoolPtr(p->block);
  return PutReservation(this, p.release(), data, size);
}

void StoreImpl::Abandon(void* token) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(token));
  MutexLock l(&mu_);
  alloc_->Free(p->block);
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
  uint8_t* dst = PoolPtr(blk);
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
      alloc_->Free(blk);
      return Status::Unavailable("store is closed");
    }
    e->seq = next_seq_++;
    auto it = keydir_.find(e->full_key);
    if (it != keydir_.end()) {
      old = it->second;
      tomb = DetachLocked(old.get());
      keydir_.erase(it);
    }
    keydir_.emplace(e->full_key, e);
    pool_policy_->Insert(e->id(), e->bytes, e->meta.recompute_cost);
    ++pool_entries_;
    pool_bytes_ += e->bytes;
    if (NeedsEvictionLocked()) evict_cv_.NotifyOne();
  }
  if (tomb) WriteTombstones({*tomb});
  if (old) AwaitSpill(old);  // the replaced bytes must not come back after a crash
  return Status::Ok();
}

// ---------------------------------------------------------------- get

// Reads the record's header with its payload (one batch) and checks that the header is the
// entry's own before a payload byte is used: a damaged index row must never make an intact
// record look corrupt, nor size a copy. A mismatch sets *stale_row and returns NotFound.
Status StoreImpl::ReadFromDisk(const Entry& e, const DiskLocation& loc, uint8_t* dst,
                               uint64_t dst_cap, bool* stale_row) {
  *stale_row = false;
  const bool direct = loc.codec == Codec::kNone &&
                      reinterpret_cast<uintptr_t>(dst) % kBlockSize == 0 &&
                      dst_cap >= RoundUpBlock(loc.stored_len);
  AlignedBuffer staging(direct ? 0 : loc.stored_len);
  Result<RecordInfo> header = Status::NotFound("header not read");
  // Straight into the destination when it is aligned, no staging copy.
  Status st = disk_->ReadStored(loc, direct ? dst : staging.data(), &header);
  if (!st.ok()) {
    // A row claiming more bytes than the record holds reads past the file's end: tell that
    // from a failing device by the header alone.
    header = disk_->ReadHeader(loc.segment, loc.offset);
    if (!header.ok() || RecordMismatch(e, loc, header).empty()) return st;
  }
  std::string why = RecordMismatch(e, loc, header);
  if (!why.empty()) {
    *stale_row = true;
    return Status::NotFound(why);
  }
  if (!direct) {
    if (loc.codec == Codec::kNone)
      std::memcpy(dst, staging.data(), e.bytes);
    else
      st = DecompressPayload(loc.codec, staging.data(), loc.stored_len, dst, e.bytes,
                             DTypeSize(e.meta.dtype));
    if (!st.ok()) return st;
  }
  if (PayloadChecksum(dst, e.bytes) != e.checksum)
    return Status::Corruption("checksum mismatch in segment " + std::to_string(loc.segment) +
                              " at offset " + std::to_string(loc.offset));
  return Status::Ok();
}

// The index row (entry + location) was wrong. Looks for the entry's own record (ns, key,
// seq) in the same segment and takes its self-checked header as the truth; otherwise forgets
// the row -- no tombstone, the record stays on disk for a rebuild of the index to find.
// Ok = the entry was corrected: read again.
Status StoreImpl::FixStaleRow(const EntryPtr& e, const DiskLocation& loc, const Status& why) {
  std::optional<std::pair<RecordInfo, DiskLocation>> found;
  auto scan =
      disk_->Scan(loc.segment, 0, false, [&](const RecordInfo& r, const DiskLocation& at, bool) {
        if (!r.tombstone() && r.ns == e->ns && r.key == e->key && r.seq == e->seq) found = {r, at};
      });
  MutexLock l(&mu_);
  if (e->erased || !e->disk || !(*e->disk == loc)) return Status::Ok();  // changed meanwhile
  const bool adopt =
      scan.ok() && found &&
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
    segment_live_[at.segment] += at.record_bytes();
    disk_record_bytes_ += at.record_bytes();
    ++disk_entries_;
    disk_bytes_ += e->bytes;
    disk_policy_->Insert(e->id(), e->bytes, e->meta.recompute_cost);
    index_->EnqueuePut(RowLocked(*e));
    return Status::Ok();
  }
  spdlog::error(
      "index row of {}/{} does not match its record ({}); the row was dropped, the "
      "data kept",
      e->ns, e->key, why.message());
  index_->EnqueueDelete(e->ns, e->key, e->seq);
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
      ++stats_.corrupt_dropped;
    }
  }
  spdlog::error("entry {}/{} is corrupt on disk ({}); dropped", e->ns, e->key, why.message());
  if (tomb) WriteTombstones({*tomb});
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
    ++stats_.corrupt_dropped;
  }
  spdlog::error("disk copy of {}/{} is corrupt; dropped, the pool copy is kept", e->ns, e->key);
  WriteTombstones({*tomb});
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
      alloc_->Free(blk);
      space_cv_.NotifyAll();
      return Status::Ok();
    }
    e->loading = true;
    loc = *e->disk;
  }
  bool stale_row = false;
  Status st = ReadFromDisk(*e, loc, PoolPtr(blk), blk.length, &stale_row);
  {
    MutexLock l(&mu_);
    e->loading = false;
    load_cv_.NotifyAll();
    if (st.ok() && !e->erased) {
      std::memset(PoolPtr(blk) + e->bytes, 0, blk.length - e->bytes);
      e->pool = blk;
      pool_policy_->Insert(e->id(), e->bytes, e->meta.recompute_cost);
      ++pool_entries_;
      pool_bytes_ += e->bytes;
      ++stats_.pool.promotions;
      ++stats_.disk.hits;
      return Status::Ok();
    }
    alloc_->Free(blk);
    space_cv_.NotifyAll();
  }
  if (stale_row) return FixStaleRow(e, loc, st);
  if (st.IsCorruption()) return DropCorrupt(e, st);
  return st;
}

Status StoreImpl::AddRegistrar(MemoryRegistrar* r) {
  std::lock_guard<std::mutex> rl(registrars_mu_);
  if (!region_.base) return Status::Unavailable("store is closed");
  if (std::find(registered_.begin(), registered_.end(), r) != registered_.end())
    return Status::Ok();
  Status st = r->Register(region_);
  if (!st.ok()) return st.WithContext(std::string("registering the pool with ") + r->Name());
  registered_.push_back(r);
  return Status::Ok();
}

void StoreImpl::RemoveRegistrar(MemoryRegistrar* r) {
  std::lock_guard<std::mutex> rl(registrars_mu_);
  auto it = std::find(registered_.begin(), registered_.end(), r);
  if (it == registered_.end()) return;  // never added, or the store closed already
  r->Deregister(region_);
  registered_.erase(it);
}

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
    Status st = ReadFromDisk(*e, loc, dst.data(), dst.size(), &stale_row);
    if (stale_row) {
      EC_RETURN_IF_ERROR(FixStaleRow(e, loc, st));
      continue;
    }
    if (st.IsCorruption()) return DropCorrupt(e, st);
    if (!st.ok()) return st;
    MutexLock l(&mu_);
    if (ro.record_access) ++stats_.disk.hits;
    return info;
  }
}

// Counts a hit on an entry served from disk.
void StoreImpl::TouchLocked(Entry* e) {
  ++e->hits;
  e->touched = true;
  e->last_access_us = env_->NowMicros();
  disk_policy_->Touch(e->id());
}

// A lease that leaves no trace: no hit, no LRU touch (verify, export).
ReadLease StoreImpl::QuietLeaseLocked(const EntryPtr& e) {
  ++e->leases;
  return ReadLease(this, new EntryPtr(e), PoolPtr(*e->pool), InfoLocked(*e));
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
  if (tomb) return WriteTombstones({*tomb});
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
  Status st = WriteTombstones(std::move(tombs));
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
  TierStats& pool = s.at(Tier::kPool);
  pool = stats_.pool;
  pool.tier = Tier::kPool;
  pool.entries = pool_entries_;
  pool.bytes = pool_bytes_;
  pool.capacity = alloc_ ? alloc_->capacity() : 0;
  pool.used = alloc_ ? alloc_->allocated_bytes() : 0;
  TierStats& disk = s.at(Tier::kDisk);
  disk = stats_.disk;
  disk.tier = Tier::kDisk;
  disk.entries = disk_entries_;
  disk.bytes = disk_bytes_;
  disk.misses = stats_.misses;
  disk.capacity = opt_.disk_quota_bytes;
  disk.used = disk_ ? disk_->file_bytes() : 0;
  s.pool_fragmentation = alloc_ ? alloc_->ExternalFragmentation() : 0;
  s.pool_huge_pages = region_.huge_pages;
  s.pool_locked = region_.locked;
  s.segments = disk_ ? disk_->Segments().size() : 0;
  s.corrupt_dropped = stats_.corrupt_dropped;
  s.spill_errors = stats_.spill_errors;
  s.compactions = stats_.compactions;
  s.misses = stats_.misses;
  return s;
}

// ---------------------------------------------------------------- eviction and spill

bool StoreImpl::NeedsEvictionLocked() const {
  double used = static_cast<double>(alloc_->allocated_bytes());
  double cap = static_cast<double>(alloc_->capacity());
  return used > opt_.high_watermark * cap ||
         (need_bytes_ > 0 && alloc_->largest_free_extent() < need_bytes_);
}

bool StoreImpl::EvictionDoneLocked() const {
  double used = static_cast<double>(alloc_->allocated_bytes());
  double cap = static_cast<double>(alloc_->capacity());
  return used <= opt_.low_watermark * cap &&
         (need_bytes_ == 0 || alloc_->largest_free_extent() >= need_bytes_);
}

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
    if (EvictionDoneLocked() || alloc_->largest_free_extent() >= need_bytes_) need_bytes_ = 0;
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
  auto done = [&]() REQUIRES(mu_) {
    double projected = static_cast<double>(alloc_->allocated_bytes() - batch_bytes);
    return projected <= opt_.low_watermark * static_cast<double>(alloc_->capacity()) &&
           (need_bytes_ == 0 || alloc_->largest_free_extent() >= need_bytes_);
  };
  for (uint64_t id : pool_policy_->Coldest(256)) {
    Entry* e = reinterpret_cast<Entry*>(id);
    if (e->leases > 0 || e->spilling || e->loading || e->erased) continue;
    if (e->disk) {  // a clean copy: dropping the pool block costs no I/O
      FreePoolLocked(e);
      ++stats_.pool.evictions;
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
  MaybeCompact();
  mu_.lock();
  return freed || st.ok();
}

// Evicts the coldest disk entries until live record bytes plus `incoming` fit the quota.
// Returns their tombstones, which the caller writes in the same append as its batch.
std::vector<Tombstone> StoreImpl::EnforceQuota(uint64_t incoming) {
  std::vector<Tombstone> tombs;
  {
    MutexLock l(&mu_);
    while (disk_record_bytes_ + incoming > opt_.disk_quota_bytes) {
      bool any = false;
      for (uint64_t id : disk_policy_->Coldest(64)) {
        Entry* e = reinterpret_cast<Entry*>(id);
        if (e->leases > 0 || e->loading || e->spilling) continue;
        any = true;
        ++stats_.disk.evictions;
        if (e->pool) {  // still hot: keep it in the pool, give up only its disk copy
          tombs.push_back(ForgetDiskCopyLocked(e));
        } else {
          EntryPtr keep = e->shared_from_this();
          keydir_.erase(FullKey(e->ns, e->key));
          if (auto t = DetachLocked(e)) tombs.push_back(*t);
        }
        if (disk_record_bytes_ + incoming <= opt_.disk_quota_bytes) break;
      }
      if (!any) break;
    }
  }
  return tombs;
}

Status StoreImpl::SpillBatch(const std::vector<EntryPtr>& batch, bool drop_from_pool) {
  MutexLock spill_lock(&spill_mu_);
  SpillPlan plan = PlanSpill(batch);
  std::vector<DiskLocation> locs;
  Status st = AppendWithQuota(plan, &locs);
  std::vector<Tombstone> tombs;
  std::vector<EntryPtr> dead;
  {
    MutexLock l(&mu_);
    for (const EntryPtr& e : plan.too_big) DropUnspillableLocked(e.get(), drop_from_pool);
    for (size_t i = 0; i < plan.written.size(); ++i) {
      Entry* e = plan.written[i].get();
      if (st.ok() && e->erased) {
        // Erased (or replaced) while its bytes were in flight: that record is dead. It stays
        // "spilling" until its tombstone is durable: the Erase or Put waiting on it returns
        // only then, so a crash cannot bring the old bytes back.
        tombs.push_back({e->ns, e->key, e->seq});
        dead.push_back(plan.written[i]);
        continue;
      }
      e->spilling = false;
      if (!st.ok()) {
        if (e->erased && e->leases == 0) FreePoolLocked(e);
        continue;
      }
      InstallSpilledLocked(e, locs[i], drop_from_pool);
    }
    if (!locs.empty())
      index_->EnqueueTail(locs.back().segment, locs.back().offset + locs.back().record_bytes());
    NoteSpillResultLocked(st, plan.written.size());
    space_cv_.NotifyAll();
    spill_cv_.NotifyAll();
  }
  WriteTombstones(std::move(tombs));
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

// The records of a spill batch: straight from pool memory, or LZ4 output where it pays.
StoreImpl::SpillPlan StoreImpl::PlanSpill(const std::vector<EntryPtr>& batch) {
  SpillPlan plan;
  for (const EntryPtr& e : batch) {
    DiskTier::WriteItem it;
    it.info = RecordOf(*e, DiskLocation{0, 0, e->bytes, Codec::kNone});
    it.payload = PoolPtr(*e->pool);  // the pool is 4 KiB aligned: O_DIRECT straight from it
    if (opt_.compress) {
      AlignedBuffer out;
      uint64_t stored = 0;
      Codec c = CompressPayload(it.payload, e->bytes, DTypeSize(e->meta.dtype),
                                opt_.min_compression_saving, &out, &stored);
      if (c != Codec::kNone) {
        it.info.codec = c;
        it.info.stored_len = stored;
        it.payload = out.data();
        plan.compressed.push_back(std::move(out));
      }
    }
    if (it.info.record_bytes() > opt_.disk_quota_bytes) {
      plan.too_big.push_back(e);
      continue;
    }
    plan.bytes += it.info.record_bytes();
    plan.items.push_back(std::move(it));
    plan.written.push_back(e);
  }
  return plan;
}

// Makes room under the quota, then appends the plan's records with the tombstones of what
// the quota evicted, in one append (one fdatasync). *locs gets the records' locations.
Status StoreImpl::AppendWithQuota(SpillPlan& plan, std::vector<DiskLocation>* locs) {
  std::vector<Tombstone> evicted = EnforceQuota(plan.bytes);
  ReclaimFileSpace(plan.bytes + evicted.size() * kBlockSize);
  std::vector<DiskTier::WriteItem> all;
  for (const Tombstone& t : evicted) all.push_back(TombstoneItem(t));
  std::move(plan.items.begin(), plan.items.end(), std::back_inserter(all));
  Status st = all.empty() ? Status::Ok() : disk_->Append(all, locs);
  if (st.ok() && !evicted.empty()) {
    const DiskLocation last = locs->back();
    locs->erase(locs->begin(), locs->begin() + static_cast<std::ptrdiff_t>(evicted.size()));
    if (locs->empty())  // tombstones only: the index learns the new tail here
      index_->EnqueueTail(last.segment, last.offset + last.record_bytes());
  }
  for (Tombstone& t : evicted) {
    if (!st.ok())
      spdlog::error("tombstone of {}/{} (evicted by the disk quota) not written: {}", t.ns, t.key,
                    st.ToString());
    index_->EnqueueDelete(std::move(t.ns), std::move(t.key), t.target_seq);
  }
  return st;
}

// An entry that cannot live on disk at all (larger than the quota): the cache drops it.
void StoreImpl::DropUnspillableLocked(Entry* e, bool drop_from_pool) {
  e->spilling = false;
  if (!drop_from_pool) return;
  ++stats_.pool.evictions;
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
  segment_live_[loc.segment] += loc.record_bytes();
  disk_record_bytes_ += loc.record_bytes();
  ++disk_entries_;
  disk_bytes_ += e->bytes;
  disk_policy_->Insert(e->id(), e->bytes, e->meta.recompute_cost);
  ++stats_.pool.spills;
  ++stats_.disk.spills;
  index_->EnqueuePut(RowLocked(*e));
  if (drop_from_pool && e->leases == 0) {
    FreePoolLocked(e);
    ++stats_.pool.evictions;
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
  return index_->Flush();
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
    std::optional<ReadLease> lease;
    std::optional<DiskLocation> loc;
    {
      MutexLock l(&mu_);
      if (e->erased) continue;
      if (e->pool) lease.emplace(QuietLeaseLocked(e));
      loc = e->disk;
    }
    ++report.checked;
    report.bytes += e->bytes;
    const std::string name = e->ns + "/" + e->key + ": ";
    const bool pool_good = lease && PayloadChecksum(lease->data(), lease->size()) == e->checksum;
    Status bad;
    if (lease && !pool_good) bad = Status::Corruption("pool copy checksum mismatch");
    lease.reset();
    if (bad.ok() && loc) {
      AlignedBuffer buf(e->bytes);
      bool stale_row = false;
      bad = ReadFromDisk(*e, *loc, buf.data(), buf.size(), &stale_row);
      if (stale_row) {
        Status fixed = FixStaleRow(e, *loc, bad);
        std::optional<DiskLocation> moved;
        {
          MutexLock l(&mu_);
          if (!e->erased) moved = e->disk;
        }
        if (fixed.ok() && moved)  // relocated: check the record it found
          bad = ReadFromDisk(*e, *moved, buf.data(), buf.size(), &stale_row);
        else
          bad = fixed;
        if (!bad.ok()) {
          report.errors.push_back(name + bad.message());
          continue;
        }
      }
    }
    if (bad.ok()) continue;
    if (!bad.IsCorruption()) {  // the device failed, not the data: report and keep it
      report.errors.push_back(name + bad.ToString());
      continue;
    }
    if (pool_good) {  // only the disk copy is bad: drop it; the pool copy is spilled again
      DropDiskCopy(e, *loc);
      report.corrupt.push_back(name + bad.message() + " (disk copy dropped, pool copy kept)");
      continue;
    }
    DropCorrupt(e, bad);
    report.corrupt.push_back(name + bad.message());
  }
  // Headers too: a damaged header hides its record from a rebuild of the index.
  for (uint32_t seg : disk_->Segments()) {
    auto scan = disk_->Scan(seg, 0, false, [](const RecordInfo&, const DiskLocation&, bool) {});
    if (!scan.ok()) {
      if (!scan.status().IsNotFound())  // NotFound: compacted away meanwhile
        report.errors.push_back("segment " + std::to_string(seg) + ": " + scan.status().ToString());
      continue;
    }
    if (scan->bad_headers > 0)
      report.corrupt.push_back("segment " + std::to_string(seg) + ": " +
                               std::to_string(scan->bad_headers) + " damaged record header(s), " +
                               std::to_string(scan->skipped_bytes) + " bytes unreadable");
  }
  if (progress) progress(all.size(), all.size());
  return report;
}

// The quota bounds the segment files, not only live bytes: while the files plus what is
// about to be written exceed it, the segment with the most dead bytes is compacted (the active
// one is sealed first). Runs with spill_mu_ held, before an append.
void StoreImpl::ReclaimFileSpace(uint64_t incoming) {
  for (int round = 0; round < 256; ++round) {
    if (disk_->file_bytes() + incoming <= opt_.disk_quota_bytes) return;
    std::vector<uint32_t> segs = disk_->Segments();
    uint32_t best = 0;
    uint64_t best_dead = 0;
    {
      MutexLock l(&mu_);
      for (uint32_t seg : segs) {
        uint64_t size = disk_->SegmentSize(seg), live = segment_live_[seg];
        if (size > live && size - live > best_dead) best = seg, best_dead = size - live;
      }
    }
    if (best_dead == 0) return;  // nothing dead left: live bytes already fit (EnforceQuota)
    if (best == disk_->active_segment()) disk_->SealActive();
    Status st = CompactSegment(best, best == segs.front());
    if (!st.ok()) {
      spdlog::warn("compaction to keep the disk quota failed: {}", st.ToString());
      return;
    }
  }
}

void StoreImpl::MaybeCompact() {
  uint64_t files = disk_->file_bytes();
  uint64_t live;
  {
    MutexLock l(&mu_);
    live = disk_record_bytes_;
  }
  // Compact once dead bytes exceed a segment's worth and half of what is live.
  if (files > live + opt_.segment_bytes && files - live > live / 2) {
    Status st = Compact(opt_.compact_live_ratio);
    if (!st.ok()) spdlog::warn("background compaction failed: {}", st.ToString());
  }
}

Status StoreImpl::Compact(double threshold) {
  EC_RETURN_IF_ERROR(CheckWritable());
  MutexLock spill_lock(&spill_mu_);
  uint32_t active = disk_->active_segment();
  std::vector<uint32_t> segs = disk_->Segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    uint32_t seg = segs[i];
    if (seg == active) continue;
    uint64_t size = disk_->SegmentSize(seg);
    uint64_t live;
    {
      MutexLock l(&mu_);
      live = segment_live_[seg];
    }
    if (size == 0 || (static_cast<double>(live) >= threshold * static_cast<double>(size) &&
                      !(threshold >= 1.0 && live < size)))
      continue;
    EC_RETURN_IF_ERROR(CompactSegment(seg, i == 0));
  }
  return Status::Ok();
}

// Moves a segment's live records and still-needed tombstones to the tail, then deletes it.
Status StoreImpl::CompactSegment(uint32_t seg, bool oldest) {
  std::vector<RecordInfo> tombs;
  std::vector<std::pair<EntryPtr, DiskLocation>> live;
  {
    MutexLock l(&mu_);
    for (auto& [_, e] : keydir_)
      if (e->disk && e->disk->segment == seg) live.emplace_back(e, *e->disk);
  }
  if (!oldest) {  // a tombstone must outlive every older record it hides
    auto scan = disk_->Scan(seg, 0, false, [&](const RecordInfo& info, const DiskLocation&, bool) {
      if (info.tombstone()) tombs.push_back(info);
    });
    if (!scan.ok()) return scan.status();
  }
  // Live records move in batches of up to kSpillBatchBytes, one append (one fdatasync) each;
  // the tombstones ride in the last batch.
  size_t next = 0;
  do {
    std::vector<AlignedBuffer> payloads;
    std::vector<DiskTier::WriteItem> items;
    std::vector<size_t> moved;  // index into live of each record item
    uint64_t bytes = 0;
    for (; next < live.size() && bytes < kSpillBatchBytes; ++next) {
      auto& [e, loc] = live[next];
      AlignedBuffer stored(loc.stored_len);
      Status st = disk_->ReadStored(loc, stored.data());
      if (st.ok() && loc.codec == Codec::kNone &&
          PayloadChecksum(stored.data(), e->bytes) != e->checksum)
        st = Status::Corruption("checksum mismatch during compaction");
      if (st.IsCorruption()) {
        DropCorrupt(e, st);
        continue;
      }
      EC_RETURN_IF_ERROR(st);
      items.push_back({RecordOf(*e, loc), stored.data()});
      payloads.push_back(std::move(stored));
      moved.push_back(next);
      bytes += loc.record_bytes();
    }
    if (next >= live.size())
      for (RecordInfo& t : tombs) items.push_back({std::move(t), nullptr});
    if (items.empty()) break;
    std::vector<DiskLocation> out;
    EC_RETURN_IF_ERROR(disk_->Append(items, &out));
    MutexLock l(&mu_);
    index_->EnqueueTail(out.back().segment, out.back().offset + out.back().record_bytes());
    for (size_t k = 0; k < moved.size(); ++k) {
      auto& [e, loc] = live[moved[k]];
      if (!e->disk || !(*e->disk == loc) || e->erased) continue;  // changed meanwhile
      segment_live_[seg] -= loc.record_bytes();
      segment_live_[out[k].segment] += out[k].record_bytes();
      e->disk = out[k];
      index_->EnqueuePut(RowLocked(*e));
    }
  } while (next < live.size());
  index_->EnqueueDropSegment(seg);
  EC_RETURN_IF_ERROR(index_->Flush());
  EC_RETURN_IF_ERROR(disk_->DropSegment(seg));
  MutexLock l(&mu_);
  segment_live_.erase(seg);
  ++stats_.compactions;
  return Status::Ok();
}

// The record header of an entry whose stored payload is at `loc`: the one conversion from a
// keydir entry to its on-disk description (spill and compaction both use it).
RecordInfo StoreImpl::RecordOf(const Entry& e, const DiskLocation& loc) {
  RecordInfo r;
  r.seq = e.seq;
  r.ns = e.ns;
  r.key = e.key;
  r.meta = e.meta;
  r.raw_len = e.bytes;
  r.stored_len = loc.stored_len;
  r.codec = loc.codec;
  r.checksum = e.checksum;
  r.created_us = e.created_us;
  return r;
}

}  // namespace ecstore
