#include "store/keydir.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "disk/record.h"

namespace ecstore {

// Recovery hands every live entry over (Recovered); once it is done they join the disk
// tier's accounting, in the table's order (a sequential walk).
Status Keydir::Recover() {
  EC_RETURN_IF_ERROR(durable_->Recover(this));
  // Every entry's record counted per segment and handed over once a segment (a lock and a
  // map lookup per entry before), the rows fetched a few slots ahead: they lie scattered.
  // Entry by entry, this pass was a large part of opening a 1 M-entry store.
  std::map<uint32_t, DiskAccounting::Tally> tallies;
  const auto& slots = table_.slots();
  auto ahead = slots.begin();
  for (int i = 0; i < 8 && ahead != slots.end(); ++i) ++ahead;
  for (const KeydirSlot& s : slots) {
    if (ahead != slots.end()) {
      const KeydirSlot& next = *ahead;
      __builtin_prefetch(next.cold() ? static_cast<const void*>(next.row())
                                     : static_cast<const void*>(next.entry()));
      ++ahead;
    }
    if (const ColdRow* r = s.row())
      tallies[r->loc().segment].Add(r->bytes, r->loc());
    else if (s.entry()->disk)
      tallies[s.entry()->disk->segment].Add(s.entry()->bytes, *s.entry()->disk);
  }
  for (const auto& [segment, records] : tallies) durable_->Track(segment, records);
  return Status::Ok();
}

void Keydir::Recovered(IndexRow&& row) { table_.AddRecovered(std::move(row)); }

uint64_t Keydir::RecoveredSeq(const std::string& ns, const std::string& key) {
  const KeydirSlot* s = table_.Peek(ns, key);
  return !s ? 0 : s->cold() ? s->row()->seq : s->entry()->seq;
}

void Keydir::RecoveredTombstone(const std::string& ns, const std::string& key,
                                uint64_t target_seq) {
  if (RecoveredSeq(ns, key) <= target_seq) table_.Erase(ns, key);
}

void Keydir::RecoveryRestarts() {
  table_.clear();
  pool().ResetPolicy();
  misses_ = 0;
}

void Keydir::RecoveryExpects(uint64_t entries) {
  table_.reserve(entries);
  pool().Reserve(std::min<uint64_t>(entries, 1 << 16));
}

Result<EntryPtr> Keydir::FindLocked(std::string_view ns, std::string_view key, bool count_miss) {
  if (closed_) return Status::Unavailable("store is closed");
  table_.FreezeSome(4);  // amortized: a few queued entries looked at per request
  EntryPtr e = table_.Find(ns, key);
  if (!e) {
    if (count_miss) {
      ++misses_;
      ++pool().counters().misses;
      pool().Requested(ns, key);
    }
    return Status::NotFound("no entry for key '" + std::string(key) + "' in namespace '" +
                            std::string(ns) + "'");
  }
  return e;
}

Result<EntryInfo> Keydir::LookupLocked(std::string_view ns, std::string_view key) {
  if (closed_) return Status::Unavailable("store is closed");
  const KeydirSlot* s = table_.Peek(ns, key);
  if (!s)
    return Status::NotFound("no entry for key '" + std::string(key) + "' in namespace '" +
                            std::string(ns) + "'");
  return *table_.Info(*s);
}

void Keydir::MaybeIdleLocked(Entry* e) {
  if (e->disk && !e->pool && !e->device && e->leases == 0 && !e->erased)
    table_.QueueFreeze(EntryPtr(e));
}

void Keydir::FreePoolLocked(Entry* e) {
  if (!e->pool) return;
  RemovedLocked(*e, Tier::kPool);
  pool().Remove(e->id(), e->bytes, *e->pool);
  e->pool.reset();
  space_cv_.NotifyAll();
  MaybeIdleLocked(e);
}

void Keydir::FreeDeviceLocked(Entry* e) {
  if (!e->device) return;
  RemovedLocked(*e, Tier::kDevice);
  device_->Remove(e->id(), e->bytes, *e->device);
  e->device.reset();
  space_cv_.NotifyAll();
  MaybeIdleLocked(e);
}

void Keydir::FreeCopiesLocked(Entry* e) {
  FreePoolLocked(e);
  FreeDeviceLocked(e);
}

void Keydir::DropDiskLocked(Entry* e) {
  if (!e->disk) return;
  RemovedLocked(*e, Tier::kDisk);
  durable_->Untrack(e->bytes, *e->disk);
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
  if (e->device) RemovedLocked(*e, Tier::kDevice);
  if (e->pool) RemovedLocked(*e, Tier::kPool);
  if (e->disk) RemovedLocked(*e, Tier::kDisk);
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
  if (!e->pool) pool().Requested(e->ns, e->key);
  ++e->hits;
  e->touched = true;
  e->last_access_us = env_->NowMicros();
}

bool Keydir::Holds(std::string_view ns, std::string_view key) {
  Lock l(this);
  EntryPtr e;
  return !closed_ && (e = table_.Find(ns, key)) && !e->erased;
}

namespace {
bool SameShape(const Entry& e, const TensorMeta& meta, uint64_t size) {
  return !e.erased && e.pool && e.bytes == size && e.meta.dtype == meta.dtype &&
         e.meta.shape == meta.shape && e.meta.recompute_cost == meta.recompute_cost;
}
}  // namespace

std::optional<ReadLease> Keydir::QuietLeaseIfHolds(std::string_view ns, std::string_view key,
                                                   const TensorMeta& meta, uint64_t size) {
  Lock l(this);
  EntryPtr e;
  if (closed_ || !(e = table_.Find(ns, key)) || !SameShape(*e, meta, size)) return std::nullopt;
  return QuietLeaseLocked(e);
}

bool Keydir::HoldsIdentical(std::string_view ns, std::string_view key, const TensorMeta& meta,
                            const uint8_t* data, uint64_t size, uint64_t checksum,
                            const uint8_t* compared) {
  EntryPtr e;
  ReadLease lease;
  {
    Lock l(this);
    if (closed_ || !(e = table_.Find(ns, key))) return false;
    if (!SameShape(*e, meta, size) || e->checksum != checksum) return false;
    lease = QuietLeaseLocked(e);
  }
  if (lease.data() != compared && std::memcmp(lease.data(), data, size) != 0) return false;
  Lock l(this);
  if (e->erased || !e->pool) return false;  // erased meanwhile: the Put installs its own
  e->last_access_us = env_->NowMicros();
  pool().Touch(e->id());
  return true;  // the lease is released after the mutex
}

// A lease that leaves no trace: no hit, no LRU touch (verify, export).
ReadLease Keydir::QuietLeaseLocked(const EntryPtr& e) {
  PinLocked(e.get());
  return ReadLease(this, new EntryPtr(e), pool_->Ptr(*e->pool), InfoLocked(*e));
}

void Keydir::Release(void* token) {
  auto* ep = static_cast<EntryPtr*>(token);
  {
    Lock l(this);
    UnpinLocked(ep->get());
  }
  delete ep;
}

void Keydir::UnpinLocked(Entry* e) {
  --leases_;
  if (--e->leases > 0) return;
  if (e->erased && !e->spilling) FreeCopiesLocked(e);
  MaybeIdleLocked(e);
  if (lease_end_) lease_end_();
}

void Keydir::EndSpillLocked(Entry* e) {
  e->spilling = false;
  if (e->erased && e->leases == 0) FreeCopiesLocked(e);
}

void Keydir::SpilledLocked(Entry* e, const DiskLocation& loc) {
  e->spilling = false;
  e->disk = loc;
  StoredLocked(*e, Tier::kDisk);
  durable_->Adopt(*e, loc, true);
}

void Keydir::EndLoadLocked(Entry* e, std::optional<PoolBlock> blk) {
  e->loading = false;
  load_cv_.NotifyAll();
  if (!blk) return;
  e->pool = *blk;
  pool().Insert(e->id(), *e);
  StoredLocked(*e, Tier::kPool);
}

void Keydir::AddCopyLocked(Entry* e, Tier tier, const PoolBlock& blk) {
  (tier == Tier::kDevice ? e->device : e->pool) = blk;
  (tier == Tier::kDevice ? *device_ : *pool_).Insert(e->id(), *e);
  StoredLocked(*e, tier);
}

// Waits until a detached entry's spill in flight (if any) has ended, and with it the
// tombstone that spill writes for it: then no crash can bring the entry's bytes back.
void Keydir::AwaitSpill(const EntryPtr& e) {
  Lock l(this);
  while (e->spilling) spill_cv_.Wait(l);
}

// The index row (entry + location) was wrong. Looks for the entry's own record (ns, key,
// seq) in the same segment and takes its self-checked header as the truth; otherwise forgets
// the row -- no tombstone, the record stays on disk for a rebuild of the index to find.
// Ok = the entry was corrected: read again.
Status Keydir::FixStaleRow(const EntryPtr& e, const DiskLocation& loc, const Status& why) {
  EntryRecord rec;
  {
    Lock l(this);
    rec = *e;
  }
  auto found = durable_->FindRecord(rec, loc.segment);
  Lock l(this);
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
  table_.Erase(*e);
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
    Lock l(this);
    if (table_.Erase(*e)) {
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
    Lock l(this);
    if (e->erased || !e->disk || !(*e->disk == loc)) return;
    tomb = ForgetDiskCopyLocked(e.get());
    durable_->NoteCorrupt();
  }
  spdlog::error("disk copy of {}/{} is corrupt; dropped, the pool copy is kept", e->ns, e->key);
  durable_->WriteTombstones({*tomb});
}

// The disk quota asks for room: gives up the coldest disk copies until it is satisfied.
bool Keydir::YieldForQuota(uint64_t incoming, std::vector<Tombstone>* tombs) {
  Lock l(this);
  bool any = false;
  for (const KeydirSlot& s : victims_.Coldest(table_, env_->NowMicros(), 64)) {
    any = true;
    Entry* e = s.entry();
    if (!e) {
      YieldRowLocked(s.row(), tombs);
    } else if (e->pool) {  // still hot: keep it in the pool, give up only its disk copy
      tombs->push_back(ForgetDiskCopyLocked(e));
    } else {
      table_.Erase(*e);
      if (auto t = DetachLocked(e)) tombs->push_back(*t);
    }
    if (!durable_->OverQuota(incoming)) break;
  }
  return any;
}

void Keydir::YieldRowLocked(ColdRow* r, std::vector<Tombstone>* tombs) {
  const std::string ns(table_.NamespaceOf(*r)), key = r->Key();
  if (events_) events_->Removed(ns, key, Tier::kDisk);  // a row is a disk-only entry
  tombs->push_back({ns, key, r->seq, r->segment});
  durable_->Untrack(r->bytes, r->loc());
  table_.Erase(ns, key);
}

// The keydir entry that `rec` (a record at `at`) still describes.
Result<EntryPtr> Keydir::FindRecordLocked(const EntryRecord& rec, const DiskLocation& at) {
  EntryPtr e = table_.Find(rec.ns, rec.key);
  if (!e) return Status::NotFound("erased");
  if (e->seq != rec.seq || e->erased || !e->disk || !(*e->disk == at))
    return Status::NotFound("changed meanwhile");
  return e;
}

std::vector<IndexRow> Keydir::RecordsIn(uint32_t segment) {
  std::vector<IndexRow> live;
  Lock l(this);
  for (const KeydirSlot& s : table_.slots()) {
    if (const ColdRow* r = s.row()) {
      if (r->segment == segment) live.emplace_back(table_.RecordOf(*r), r->loc());
    } else if (const Entry* e = s.entry(); e->disk && e->disk->segment == segment) {
      live.emplace_back(*e, *e->disk);
    }
  }
  return live;
}

void Keydir::Relocate(const EntryRecord& rec, const DiskLocation& from, const DiskLocation& to) {
  Lock l(this);
  const KeydirSlot* s = table_.Peek(rec.ns, rec.key);
  if (s && s->cold()) {  // a row stays a row: only its location changes
    ColdRow* r = s->row();
    if (r->seq != rec.seq || !(r->loc() == from)) return;
    r->set_loc(to);
    durable_->Moved(rec, from, to);
    return;
  }
  auto e = FindRecordLocked(rec, from);
  if (!e.ok()) return;
  (*e)->disk = to;
  durable_->Moved(**e, from, to);
}

void Keydir::RecordCorrupt(const EntryRecord& rec, const DiskLocation& at, const Status& why) {
  EntryPtr e;
  {
    Lock l(this);
    auto found = FindRecordLocked(rec, at);
    if (!found.ok()) return;
    e = *found;
  }
  DropCorrupt(e, why);
}

std::vector<KeydirSlot> Keydir::Snapshot() {
  std::vector<KeydirSlot> all;
  Lock l(this);
  all.reserve(table_.size());
  for (const KeydirSlot& s : table_.slots()) all.push_back(s);
  return all;
}

Status Keydir::ListPages(size_t page_size,
                         const std::function<bool(std::vector<EntryInfo>&&)>& on_page) {
  if (page_size == 0) return Status::InvalidArgument("ListPages needs a page size above 0");
  {
    Lock l(this);
    if (closed()) return Status::Unavailable("store is closed");
  }
  std::vector<KeydirSlot> snapshot = Snapshot();
  for (size_t at = 0; at < snapshot.size(); at += page_size) {
    std::vector<EntryInfo> page;
    {
      Lock l(this);
      for (size_t i = at; i < std::min(snapshot.size(), at + page_size); ++i)
        if (auto info = table_.Info(snapshot[i])) page.push_back(std::move(*info));
    }
    if (!on_page(std::move(page))) break;
  }
  return Status::Ok();
}

void Keydir::SaveTouchedLocked() {
  for (const KeydirSlot& s : table_.slots()) {
    if (ColdRow* r = s.row()) {
      if (r->flags & ColdRow::kTouched) durable_->SaveAccess(table_.RecordOf(*r));
      r->flags &= ~ColdRow::kTouched;
    } else if (Entry* e = s.entry(); e->disk && e->touched) {
      durable_->SaveAccess(*e);
      e->touched = false;
    }
  }
}

Result<EntryPtr> Keydir::InstallLocked(FreshEntry f, EntryPtr* old,
                                       std::optional<Tombstone>* tomb) {
  MemoryTier& tier = f.tier == Tier::kDevice ? device() : pool();
  if (closed_) {
    tier.Free(f.block);
    return Status::Unavailable("store is closed");
  }
  // Checked here, under mu, so that a caller that changes what it admits and then lists the
  // entries (ListPages snapshots under mu) sees every entry admitted before the change.
  if (admit_) {
    if (Status st = admit_(f.ns, f.key); !st.ok()) {
      tier.Free(f.block);
      return st;
    }
  }
  EntryPtr e = NewEntry();
  e->ns = std::move(f.ns);
  e->key = std::move(f.key);
  e->meta = std::move(f.meta);
  e->bytes = f.bytes;
  e->checksum = f.checksum;
  e->checksummed = f.checksummed;
  e->created_us = e->last_access_us = env_->NowMicros();
  (f.tier == Tier::kDevice ? e->device : e->pool) = f.block;
  e->seq = durable_->NextSeq();
  *old = InsertLocked(e, tomb);
  return e;
}

EntryPtr Keydir::InsertLocked(const EntryPtr& e, std::optional<Tombstone>* tomb) {
  EntryPtr old = table_.Insert(e);
  if (old) *tomb = DetachLocked(old.get());
  if (e->pool) pool().Insert(e->id(), *e);
  if (e->device) device_->Insert(e->id(), *e);
  if (e->device) StoredLocked(*e, Tier::kDevice);
  if (e->pool) StoredLocked(*e, Tier::kPool);
  if (e->disk) StoredLocked(*e, Tier::kDisk);
  return old;
}

std::optional<Tombstone> Keydir::RemoveLocked(Entry* e) {
  EntryPtr keep(e);  // the table's reference may be the last
  table_.Erase(*e);
  return DetachLocked(e);
}

Result<EntryPtr> Keydir::Find(std::string_view ns, std::string_view key) {
  Lock l(this);
  return FindLocked(ns, key, false);
}

Result<std::optional<ReadLease>> Keydir::LeaseInMemory(std::string_view ns, std::string_view key,
                                                       uint64_t room) {
  Lock l(this);
  auto found = FindLocked(ns, key, true);
  if (!found.ok()) return found.status();
  const EntryPtr& e = *found;
  if (room < e->bytes)
    return Status::BufferTooSmall("destination holds " + std::to_string(room) +
                                      " bytes but entry '" + e->key + "' has " +
                                      std::to_string(e->bytes) + "; size it from this answer",
                                  e->bytes, e->meta);
  if (e->device) return std::optional<ReadLease>(LeaseLocked(e, true, MemoryKind::kDevice));
  if (e->pool) return std::optional<ReadLease>(LeaseLocked(e, true));
  return std::optional<ReadLease>();
}

Result<std::optional<ReadLease>> Keydir::LeaseDeviceCopy(std::string_view ns, std::string_view key,
                                                         bool promoted) {
  Lock l(this);
  auto found = FindLocked(ns, key, !promoted);
  if (!found.ok()) return found.status();
  if (!(*found)->device) return std::optional<ReadLease>();
  return std::optional<ReadLease>(
      LeaseLocked(*found, !promoted, MemoryKind::kDevice,
                  promoted ? std::optional<Tier>(Tier::kPool) : std::nullopt));
}

std::vector<std::optional<ReadLease>> Keydir::LeasePoolCopies(
    std::string_view ns, const std::vector<std::string>& keys,
    const std::vector<std::span<uint8_t>>* dsts, const std::vector<bool>* only) {
  std::vector<std::optional<ReadLease>> hot(keys.size());
  const size_t n = dsts ? std::min(keys.size(), dsts->size()) : keys.size();
  if (!ValidateNamespace(ns).ok()) return hot;  // bad input: the single-key path says why
  Lock l(this);
  for (size_t i = 0; i < n; ++i) {
    if ((only && !(*only)[i]) || !ValidateKey(keys[i]).ok()) continue;
    auto found = FindLocked(ns, keys[i], false);
    if (!found.ok() || !(*found)->pool) continue;
    if (dsts && (*dsts)[i].size() < (*found)->bytes) continue;
    hot[i] = only ? LeaseLocked(*found, false, MemoryKind::kHost, Tier::kDisk)
                  : LeaseLocked(*found, true);
  }
  return hot;
}

std::vector<uint64_t> Keydir::UnpooledBytes(std::string_view ns,
                                            const std::vector<std::string>& keys,
                                            const std::vector<bool>& skip) {
  std::vector<uint64_t> bytes(keys.size());
  Lock l(this);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i < skip.size() && skip[i]) continue;
    auto found = FindLocked(ns, keys[i], false);
    if (found.ok() && !(*found)->pool) bytes[i] = (*found)->bytes;
  }
  return bytes;
}

EntryPtr Keydir::EntryForPass(const KeydirSlot& slot) {
  Lock l(this);
  table_.FreezeSome(4);         // those passed before: the queue stays short
  return table_.EntryOf(slot);  // a row is made an Entry, and a row again once passed
}

std::optional<Keydir::Copies> Keydir::CopiesOf(const EntryPtr& e) {
  Lock l(this);
  if (e->erased) return std::nullopt;
  Copies c;
  c.checksummed = e->checksummed;
  c.disk = e->disk;
  if (e->pool) c.pool.emplace(QuietLeaseLocked(e));
  return c;
}

}  // namespace ecstore
