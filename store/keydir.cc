#include "store/keydir.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ecstore {

std::string FullKey(std::string_view ns, std::string_view key) {
  std::string k;
  k.reserve(ns.size() + key.size() + 1);
  k.append(ns);
  k.push_back('\0');
  k.append(key);
  return k;
}

// Recovery hands every live entry over (Recovered); once it is done they join the disk
// tier's accounting, oldest access first, so its LRU starts in the order it had.
Status Keydir::Recover() {
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

void Keydir::Recovered(IndexRow&& row) {
  auto e = std::make_shared<Entry>();
  const DiskLocation loc = row.loc;
  static_cast<EntryRecord&>(*e) = std::move(row);
  e->full_key = FullKey(e->ns, e->key);
  e->disk = loc;
  auto it = map_.find(e->full_key);
  if (it != map_.end()) {  // replaced by a newer record; not tracked yet
    it->second->disk.reset();
    map_.erase(it);
  }
  map_.emplace(e->full_key, e);
  recovered_.push_back(std::move(e));
}

uint64_t Keydir::RecoveredSeq(const std::string& ns, const std::string& key) {
  auto it = map_.find(FullKey(ns, key));
  return it == map_.end() ? 0 : it->second->seq;
}

void Keydir::RecoveredTombstone(const std::string& ns, const std::string& key,
                                uint64_t target_seq) {
  auto it = map_.find(FullKey(ns, key));
  if (it == map_.end() || it->second->seq > target_seq) return;
  it->second->disk.reset();
  map_.erase(it);
}

void Keydir::RecoveryRestarts() {
  map_.clear();
  recovered_.clear();
  pool().ResetPolicy();
  misses_ = 0;
}

void Keydir::RecoveryExpects(uint64_t entries) {
  map_.reserve(entries);
  recovered_.reserve(entries);
  pool().Reserve(std::min<uint64_t>(entries, 1 << 16));
}

Result<EntryPtr> Keydir::FindLocked(std::string_view ns, std::string_view key, bool count_miss) {
  if (closed_) return Status::Unavailable("store is closed");
  auto it = map_.find(FullKey(ns, key));
  if (it == map_.end()) {
    if (count_miss) {
      ++misses_;
      ++pool().counters().misses;
    }
    return Status::NotFound("no entry for key '" + std::string(key) + "' in namespace '" +
                            std::string(ns) + "'");
  }
  return it->second;
}

EntryInfo Keydir::InfoLocked(const Entry& e) const {
  TierSet tiers;
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

void Keydir::DropDiskLocked(Entry* e) {
  if (!e->disk) return;
  durable_->Untrack(e->id(), *e, *e->disk);
  e->disk.reset();
}

// Gives up the disk copy of an entry that stays in the pool. The entry takes a new seq, so
// the copy spilled next outlives the tombstone returned for the old one.
Tombstone Keydir::ForgetDiskCopyLocked(Entry* e) {
  Tombstone t{e->ns, e->key, e->seq};
  DropDiskLocked(e);
  e->seq = durable_->NextSeq();
  return t;
}

// Unlinks an entry that has left the keydir. Its pool block goes back now, or when the last
// lease ends / the spill in flight finishes. Returns the tombstone its disk copy needs.
std::optional<Tombstone> Keydir::DetachLocked(Entry* e) {
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

ReadLease Keydir::LeaseLocked(const EntryPtr& e, bool count_hit) {
  ++e->leases;
  ++e->hits;
  e->touched = true;
  e->last_access_us = env_->NowMicros();
  pool().Touch(e->id());
  if (e->disk) durable_->Touch(e->id());
  if (count_hit) ++pool().counters().hits;  // a get served by promotion counted as a disk hit
  return ReadLease(this, new EntryPtr(e), pool_->Ptr(*e->pool), InfoLocked(*e));
}

// Counts a hit on an entry served from disk.
void Keydir::TouchLocked(Entry* e) {
  ++e->hits;
  e->touched = true;
  e->last_access_us = env_->NowMicros();
  durable_->Touch(e->id());
}

// A lease that leaves no trace: no hit, no LRU touch (verify, export).
ReadLease Keydir::QuietLeaseLocked(const EntryPtr& e) {
  ++e->leases;
  return ReadLease(this, new EntryPtr(e), pool_->Ptr(*e->pool), InfoLocked(*e));
}

void Keydir::Release(void* token) {
  auto* ep = static_cast<EntryPtr*>(token);
  {
    MutexLock l(&mu);
    Entry* e = ep->get();
    if (--e->leases == 0) {
      if (e->erased && !e->spilling) FreePoolLocked(e);
      if (lease_end_) lease_end_();
    }
  }
  delete ep;
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
  map_.erase(FullKey(e->ns, e->key));
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
    auto it = map_.find(FullKey(e->ns, e->key));
    if (it != map_.end() && it->second == e) {
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
  for (uint64_t id : durable_->Coldest(64)) {
    Entry* e = reinterpret_cast<Entry*>(id);
    if (e->leases > 0 || e->loading || e->spilling) continue;
    any = true;
    if (e->pool) {  // still hot: keep it in the pool, give up only its disk copy
      tombs->push_back(ForgetDiskCopyLocked(e));
    } else {
      EntryPtr keep = e->shared_from_this();
      map_.erase(FullKey(e->ns, e->key));
      if (auto t = DetachLocked(e)) tombs->push_back(*t);
    }
    if (!durable_->OverQuota(incoming)) break;
  }
  return any;
}

// The keydir entry that `rec` (a record at `at`) still describes.
Result<EntryPtr> Keydir::FindRecordLocked(const EntryRecord& rec, const DiskLocation& at) {
  auto it = map_.find(FullKey(rec.ns, rec.key));
  if (it == map_.end()) return Status::NotFound("erased");
  const EntryPtr& e = it->second;
  if (e->seq != rec.seq || e->erased || !e->disk || !(*e->disk == at))
    return Status::NotFound("changed meanwhile");
  return e;
}

std::vector<IndexRow> Keydir::RecordsIn(uint32_t segment) {
  std::vector<IndexRow> live;
  MutexLock l(&mu);
  for (auto& [_, e] : map_)
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
  for (const auto& [_, e] : map_) all.push_back(e);
  return all;
}

EntryPtr Keydir::InsertLocked(const EntryPtr& e, std::optional<Tombstone>* tomb) {
  EntryPtr old;
  auto it = map_.find(e->full_key);
  if (it != map_.end()) {
    old = it->second;
    *tomb = DetachLocked(old.get());
    map_.erase(it);
  }
  map_.emplace(e->full_key, e);
  pool().Insert(e->id(), *e);
  return old;
}

std::optional<Tombstone> Keydir::RemoveLocked(Entry* e) {
  EntryPtr keep = e->shared_from_this();  // the map's reference may be the last
  map_.erase(e->full_key);
  return DetachLocked(e);
}

}  // namespace ecstore
