#include "store/keydir.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "disk/aligned_buffer.h"
#include "disk/record.h"
#include "store/eviction_policy.h"

namespace ecstore {

size_t EntryKeyHash::operator()(const EntryKey& k) const {
  const std::hash<std::string_view> h;
  return h(k.key) ^ (h(k.ns) * 0x9e3779b97f4a7c15ull);
}

// Recovery hands every live entry over (Recovered); once it is done they join the disk
// tier's accounting, in the table's order (a sequential walk).
Status Keydir::Recover() {
  EC_RETURN_IF_ERROR(durable_->Recover(this));
  for (const EntryPtr& e : map_)
    if (e->disk) durable_->Track(*e, *e->disk);
  return Status::Ok();
}

void Keydir::Recovered(IndexRow&& row) {
  auto e = NewEntry();
  const DiskLocation loc = row.loc;
  static_cast<EntryRecord&>(*e) = std::move(row);
  e->disk = loc;
  auto [it, added] = map_.insert(e);  // one probe: the key is almost always new
  if (!added) {                       // replaced by a newer record; not tracked yet
    map_.erase(it);
    map_.insert(e);
  }
}

uint64_t Keydir::RecoveredSeq(const std::string& ns, const std::string& key) {
  auto it = FindIn(ns, key);
  return it == map_.end() ? 0 : (*it)->seq;
}

void Keydir::RecoveredTombstone(const std::string& ns, const std::string& key,
                                uint64_t target_seq) {
  auto it = FindIn(ns, key);
  if (it == map_.end() || (*it)->seq > target_seq) return;
  map_.erase(it);
}

void Keydir::RecoveryRestarts() {
  map_.clear();
  pool().ResetPolicy();
  misses_ = 0;
}

void Keydir::RecoveryExpects(uint64_t entries) {
  map_.reserve(entries);
  pool().Reserve(std::min<uint64_t>(entries, 1 << 16));
}

Result<EntryPtr> Keydir::FindLocked(std::string_view ns, std::string_view key, bool count_miss) {
  if (closed_) return Status::Unavailable("store is closed");
  auto it = FindIn(ns, key);
  if (it == map_.end()) {
    if (count_miss) {
      ++misses_;
      ++pool().counters().misses;
    }
    return Status::NotFound("no entry for key '" + std::string(key) + "' in namespace '" +
                            std::string(ns) + "'");
  }
  return *it;
}

EntryInfo Keydir::InfoLocked(const Entry& e) const {
  TierSet tiers;
  if (e.device) tiers.add(Tier::kDevice);
  if (e.pool) tiers.add(Tier::kPool);
  if (e.disk) tiers.add(Tier::kDisk);
  return EntryInfo::Of(e, tiers);
}

void Keydir::FreePoolLocked(Entry* e) {
  if (!e->pool) return;
  pool().Remove(e->id(), e->bytes, *e->pool);
  e->pool.reset();
  space_cv.NotifyAll();
}

void Keydir::FreeDeviceLocked(Entry* e) {
  if (!e->device) return;
  device_->Remove(e->id(), e->bytes, *e->device);
  e->device.reset();
  space_cv.NotifyAll();
}

void Keydir::FreeCopiesLocked(Entry* e) {
  FreePoolLocked(e);
  FreeDeviceLocked(e);
}

void Keydir::DropDiskLocked(Entry* e) {
  if (!e->disk) return;
  durable_->Untrack(*e, *e->disk);
  e->disk.reset();
}

// Gives up the disk copy of an entry that stays in the pool. The entry takes a new seq, so
// the copy spilled next outlives the tombstone returned for the old one.
Tombstone Keydir::ForgetDiskCopyLocked(Entry* e) {
  Tombstone t{e->ns, e->key, e->seq, e->disk ? e->disk->segment : 0};
  DropDiskLocked(e);
  e->seq = durable_->NextSeq();
  return t;
}

// Unlinks an entry that has left the keydir. Its memory blocks go back now, or when the last
// lease ends / the spill in flight finishes. Returns the tombstone its disk copy needs.
std::optional<Tombstone> Keydir::DetachLocked(Entry* e) {
  e->erased = true;
  if (e->leases == 0 && !e->spilling) {
    FreeCopiesLocked(e);
  } else {
    pool().Unrank(e->id());
    if (device_) device_->Unrank(e->id());
  }
  if (!e->disk) return std::nullopt;
  Tombstone t{e->ns, e->key, e->seq, e->disk->segment};
  DropDiskLocked(e);
  return t;
}

ReadLease Keydir::LeaseLocked(const EntryPtr& e, bool count_hit, MemoryKind kind,
                              std::optional<Tier> served_from) {
  PinLocked(e.get());
  ++e->hits;
  e->touched = true;
  e->last_access_us = env_->NowMicros();
  if (e->pool) pool().Touch(e->id());
  if (e->device) device_->Touch(e->id());
  const bool on_device = kind == MemoryKind::kDevice;
  // A get served by promotion was counted as a hit of the tier it came from.
  if (count_hit) ++(on_device ? device_ : pool_)->counters().hits;
  const uint8_t* data = on_device ? device_->Ptr(*e->device) : pool_->Ptr(*e->pool);
  return ReadLease(this, new EntryPtr(e), data, InfoLocked(*e), kind, served_from);
}

// Counts a hit on an entry served from disk.
void Keydir::TouchLocked(Entry* e) {
  ++e->hits;
  e->touched = true;
  e->last_access_us = env_->NowMicros();
}

// A lease that leaves no trace: no hit, no LRU touch (verify, export).
ReadLease Keydir::QuietLeaseLocked(const EntryPtr& e) {
  PinLocked(e.get());
  return ReadLease(this, new EntryPtr(e), pool_->Ptr(*e->pool), InfoLocked(*e));
}

void Keydir::Release(void* token) {
  auto* ep = static_cast<EntryPtr*>(token);
  {
    MutexLock l(&mu);
    UnpinLocked(ep->get());
  }
  delete ep;
}

void Keydir::UnpinLocked(Entry* e) {
  --leases_;
  if (--e->leases > 0) return;
  if (e->erased && !e->spilling) FreeCopiesLocked(e);
  if (lease_end_) lease_end_();
}

// Waits until a detached entry's spill in flight (if any) has ended, and with it the
// tombstone that spill writes for it: then no crash can bring the entry's bytes back.
void Keydir::AwaitSpill(const EntryPtr& e) {
  UniqueLock l(&mu);
  while (e->spilling) spill_cv.Wait(l);
}

// The index row (entry + location) was wrong. Looks for the entry's own record (ns, key,
// seq) in the same segment and takes its self-checked header as the truth; otherwise forgets
// the row -- no tombstone, the record stays on disk for a rebuild of the index to find.
// Ok = the entry was corrected: read again.
Status Keydir::FixStaleRow(const EntryPtr& e, const DiskLocation& loc, const Status& why) {
  EntryRecord rec;
  {
    MutexLock l(&mu);
    rec = *e;
  }
  auto found = durable_->FindRecord(rec, loc.segment);
  MutexLock l(&mu);
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
    durable_->Adopt(*e, at, false);
    return Status::Ok();
  }
  spdlog::error(
      "index row of {}/{} does not match its record ({}); the row was dropped, the "
      "data kept",
      e->ns, e->key, why.message());
  durable_->Forget(*e);
  DropDiskLocked(e.get());
  if (e->pool) return Status::Ok();  // the pool copy serves, and is spilled again
  map_.erase(e);
  DetachLocked(e.get());  // no tombstone: the record on disk may well be intact
  return Status::NotFound("entry '" + e->key +
                          "': its index row does not match the record on "
                          "disk (" +
                          why.message() +
                          "); the row was dropped and the data kept: "
                          "rebuild the index (ec-store repair) to serve it again");
}

Status Keydir::DropCorrupt(const EntryPtr& e, const Status& why) {
  std::optional<Tombstone> tomb;
  {
    MutexLock l(&mu);
    auto it = map_.find(e);
    if (it != map_.end() && *it == e) {
      map_.erase(it);
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
void Keydir::DropDiskCopy(const EntryPtr& e, const DiskLocation& loc) {
  std::optional<Tombstone> tomb;
  {
    MutexLock l(&mu);
    if (e->erased || !e->disk || !(*e->disk == loc)) return;
    tomb = ForgetDiskCopyLocked(e.get());
    durable_->NoteCorrupt();
  }
  spdlog::error("disk copy of {}/{} is corrupt; dropped, the pool copy is kept", e->ns, e->key);
  durable_->WriteTombstones({*tomb});
}

// The disk quota asks for room: gives up the coldest disk copies until it is satisfied.
bool Keydir::YieldForQuota(uint64_t incoming, std::vector<Tombstone>* tombs) {
  MutexLock l(&mu);
  bool any = false;
  for (Entry* e : ColdestOnDiskLocked(64)) {
    any = true;
    if (e->pool) {  // still hot: keep it in the pool, give up only its disk copy
      tombs->push_back(ForgetDiskCopyLocked(e));
    } else {
      EntryPtr keep = EntryPtr(e);
      map_.erase(keep);
      if (auto t = DetachLocked(e)) tombs->push_back(*t);
    }
    if (!durable_->OverQuota(incoming)) break;
  }
  return any;
}

// The disk quota ranks entries by what the keydir already holds for each -- no per-entry
// structure of its own (an LRU list node cost 64 B an entry, the most of any part of a
// large disk tier's index). Up to 4096 entries it ranks them all; beyond, a random sample
// of 16 per victim wanted, as Redis's approximated LRU does: the victims come from the
// coldest few percent. LRU ranks by last access; the value-aware ranking by hits x
// recompute cost per MiB / age (hyperbolic caching, which needs no priority queue and
// scores as GDSF does in the policy bench).
std::vector<Entry*> Keydir::ColdestOnDiskLocked(size_t max) {
  constexpr size_t kRankAllBelow = 4096, kSamplesPerVictim = 16;
  const uint64_t now = env_->NowMicros();
  auto coldness = [&](const Entry& e) {  // lower: goes first
    if (!value_aware_) return static_cast<double>(e.last_access_us);
    const double mib = std::max<double>(static_cast<double>(e.bytes), 1.0) / (1 << 20);
    const double age_s = static_cast<double>(now - std::min(now, e.last_access_us)) / 1e6 + 1;
    return static_cast<double>(std::max<uint64_t>(e.hits, 1)) * RecomputeCost(e.meta) / mib / age_s;
  };
  std::vector<std::pair<double, Entry*>> ranked;
  auto consider = [&](Entry* e) {
    if (e->disk && !e->erased && e->leases == 0 && !e->loading && !e->spilling)
      ranked.emplace_back(coldness(*e), e);
  };
  if (map_.size() <= kRankAllBelow) {
    for (const EntryPtr& e : map_) consider(e.get());
  } else {
    for (size_t i = 0; i < max * kSamplesPerVictim; ++i) {
      sample_state_ = sample_state_ * 6364136223846793005ull + 1442695040888963407ull;
      consider(map_.from_slot(sample_state_ >> 20)->get());
    }
    std::sort(ranked.begin(), ranked.end());
    ranked.erase(std::unique(ranked.begin(), ranked.end()), ranked.end());  // drawn twice
  }
  const size_t n = std::min(max, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<ptrdiff_t>(n), ranked.end());
  std::vector<Entry*> out;
  for (size_t i = 0; i < n; ++i) out.push_back(ranked[i].second);
  return out;
}

// The keydir entry that `rec` (a record at `at`) still describes.
Result<EntryPtr> Keydir::FindRecordLocked(const EntryRecord& rec, const DiskLocation& at) {
  auto it = FindIn(rec.ns, rec.key);
  if (it == map_.end()) return Status::NotFound("erased");
  const EntryPtr& e = *it;
  if (e->seq != rec.seq || e->erased || !e->disk || !(*e->disk == at))
    return Status::NotFound("changed meanwhile");
  return e;
}

std::vector<IndexRow> Keydir::RecordsIn(uint32_t segment) {
  std::vector<IndexRow> live;
  MutexLock l(&mu);
  for (const EntryPtr& e : map_)
    if (e->disk && e->disk->segment == segment) live.emplace_back(*e, *e->disk);
  return live;
}

void Keydir::Relocate(const EntryRecord& rec, const DiskLocation& from, const DiskLocation& to) {
  MutexLock l(&mu);
  auto e = FindRecordLocked(rec, from);
  if (!e.ok()) return;
  (*e)->disk = to;
  durable_->Moved(**e, from, to);
}

void Keydir::RecordCorrupt(const EntryRecord& rec, const DiskLocation& at, const Status& why) {
  EntryPtr e;
  {
    MutexLock l(&mu);
    auto found = FindRecordLocked(rec, at);
    if (!found.ok()) return;
    e = *found;
  }
  DropCorrupt(e, why);
}

std::vector<EntryPtr> Keydir::Snapshot() {
  std::vector<EntryPtr> all;
  MutexLock l(&mu);
  all.reserve(map_.size());
  for (const EntryPtr& e : map_) all.push_back(e);
  return all;
}

EntryPtr Keydir::InsertLocked(const EntryPtr& e, std::optional<Tombstone>* tomb) {
  EntryPtr old;
  auto it = map_.find(e);
  if (it != map_.end()) {
    old = *it;
    *tomb = DetachLocked(old.get());
    map_.erase(it);
  }
  map_.insert(e);
  if (e->pool) pool().Insert(e->id(), *e);
  if (e->device) device_->Insert(e->id(), *e);
  return old;
}

std::optional<Tombstone> Keydir::RemoveLocked(Entry* e) {
  EntryPtr keep = EntryPtr(e);  // the map's reference may be the last
  map_.erase(keep);
  return DetachLocked(e);
}

Result<VerifyReport> Keydir::Verify(const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<EntryPtr> all = Snapshot();
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
Status Keydir::VerifyEntry(const EntryPtr& e, VerifyReport* report) {
  std::optional<ReadLease> lease;
  std::optional<DiskLocation> loc;
  bool checksummed = true;
  {
    MutexLock l(&mu);
    if (e->erased) return Status::Ok();
    if (e->pool) lease.emplace(QuietLeaseLocked(e));
    checksummed = e->checksummed;
    loc = e->disk;
  }
  ++report->checked;
  report->bytes += e->bytes;
  const std::string name = e->ns + "/" + e->key + ": ";
  // Not yet checksummed (put from device memory, never spilled): nothing to check against.
  const bool pool_good =
      lease && (!checksummed || PayloadChecksum(lease->data(), lease->size()) == e->checksum);
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
        MutexLock l(&mu);
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

}  // namespace ecstore
