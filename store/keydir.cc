#include "store/keydir.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "disk/aligned_buffer.h"
#include "disk/record.h"
#include "store/eviction_policy.h"

namespace ecstore {

// Recovery hands every live entry over (Recovered); once it is done they join the disk
// tier's accounting, in the table's order (a sequential walk).
Status Keydir::Recover() {
  EC_RETURN_IF_ERROR(durable_->Recover(this));
  // Every entry's record counted per segment and handed over once a segment (a lock and a
  // map lookup per entry before), the rows fetched a few slots ahead: they lie scattered.
  // Measured at 1 M entries on the 2-core VM: this pass took 0.15-0.27 s entry by entry.
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
  pool().Remove(e->id(), e->bytes, *e->pool);
  e->pool.reset();
  space_cv.NotifyAll();
  MaybeIdleLocked(e);
}

void Keydir::FreeDeviceLocked(Entry* e) {
  if (!e->device) return;
  device_->Remove(e->id(), e->bytes, *e->device);
  e->device.reset();
  space_cv.NotifyAll();
  MaybeIdleLocked(e);
}

void Keydir::FreeCopiesLocked(Entry* e) {
  FreePoolLocked(e);
  FreeDeviceLocked(e);
}

void Keydir::DropDiskLocked(Entry* e) {
  if (!e->disk) return;
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
  MutexLock l(&mu);
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
  MutexLock l(&mu);
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
    MutexLock l(&mu);
    if (closed_ || !(e = table_.Find(ns, key))) return false;
    if (!SameShape(*e, meta, size) || e->checksum != checksum) return false;
    lease = QuietLeaseLocked(e);
  }
  if (lease.data() != compared && std::memcmp(lease.data(), data, size) != 0) return false;
  MutexLock l(&mu);
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
    MutexLock l(&mu);
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
  durable_->Adopt(*e, loc, true);
}

void Keydir::EndLoadLocked(Entry* e, std::optional<PoolBlock> blk) {
  e->loading = false;
  load_cv.NotifyAll();
  if (!blk) return;
  e->pool = *blk;
  pool().Insert(e->id(), *e);
}

void Keydir::AddCopyLocked(Entry* e, Tier tier, const PoolBlock& blk) {
  (tier == Tier::kDevice ? e->device : e->pool) = blk;
  (tier == Tier::kDevice ? *device_ : *pool_).Insert(e->id(), *e);
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
    MutexLock l(&mu);
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
  for (const KeydirSlot& s : ColdestOnDiskLocked(64)) {
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

// The disk quota ranks entries by what the keydir already holds for each -- no per-entry
// structure of its own (an LRU list node cost 64 B an entry, the most of any part of a
// large disk tier's index). Up to 4096 entries it ranks them all; beyond, a random sample
// of 16 per victim wanted, as Redis's approximated LRU does: the victims come from the
// coldest few percent. LRU ranks by last access; the value-aware ranking by hits x
// recompute cost per MiB / age (hyperbolic caching, which needs no priority queue and
// scores as GDSF does in the policy bench).
std::vector<KeydirSlot> Keydir::ColdestOnDiskLocked(size_t max) {
  constexpr size_t kRankAllBelow = 4096, kSamplesPerVictim = 16;
  const uint64_t now = env_->NowMicros();
  auto coldness = [&](uint64_t last_access_us, uint64_t hits, uint64_t bytes, double cost) {
    if (!value_aware_) return static_cast<double>(last_access_us);  // lower: goes first
    const double mib = std::max<double>(static_cast<double>(bytes), 1.0) / (1 << 20);
    const double age_s = static_cast<double>(now - std::min(now, last_access_us)) / 1e6 + 1;
    return static_cast<double>(std::max<uint64_t>(hits, 1)) * cost / mib / age_s;
  };
  std::vector<std::pair<double, const KeydirSlot*>> ranked;
  auto consider = [&](const KeydirSlot& s) {
    if (const ColdRow* r = s.row()) {  // a row is never held
      const double cost = value_aware_ ? RecomputeCost(r->meta()) : 0;
      ranked.emplace_back(coldness(r->last_access_us, r->hits, r->bytes, cost), &s);
      return;
    }
    const Entry& e = *s.entry();
    if (e.disk && !e.erased && e.leases == 0 && !e.loading && !e.spilling)
      ranked.emplace_back(
          coldness(e.last_access_us, e.hits, e.bytes, value_aware_ ? RecomputeCost(e.meta) : 0),
          &s);
  };
  if (table_.size() <= kRankAllBelow) {
    for (const KeydirSlot& s : table_.slots()) consider(s);
  } else {
    for (size_t i = 0; i < max * kSamplesPerVictim; ++i) {
      sample_state_ = sample_state_ * 6364136223846793005ull + 1442695040888963407ull;
      consider(table_.Sample(sample_state_ >> 20));
    }
    std::sort(ranked.begin(), ranked.end());
    ranked.erase(std::unique(ranked.begin(), ranked.end()), ranked.end());  // drawn twice
  }
  const size_t n = std::min(max, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<ptrdiff_t>(n), ranked.end());
  std::vector<KeydirSlot> out;  // copies: the slots move as the caller erases
  for (size_t i = 0; i < n; ++i) out.push_back(*ranked[i].second);
  return out;
}

void Keydir::YieldRowLocked(ColdRow* r, std::vector<Tombstone>* tombs) {
  const std::string ns(table_.NamespaceOf(*r)), key = r->Key();
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
  MutexLock l(&mu);
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
  MutexLock l(&mu);
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
    MutexLock l(&mu);
    auto found = FindRecordLocked(rec, at);
    if (!found.ok()) return;
    e = *found;
  }
  DropCorrupt(e, why);
}

std::vector<KeydirSlot> Keydir::Snapshot() {
  std::vector<KeydirSlot> all;
  MutexLock l(&mu);
  all.reserve(table_.size());
  for (const KeydirSlot& s : table_.slots()) all.push_back(s);
  return all;
}

Status Keydir::ListPages(size_t page_size,
                         const std::function<bool(std::vector<EntryInfo>&&)>& on_page) {
  if (page_size == 0) return Status::InvalidArgument("ListPages needs a page size above 0");
  {
    MutexLock l(&mu);
    if (closed()) return Status::Unavailable("store is closed");
  }
  std::vector<KeydirSlot> snapshot = Snapshot();
  for (size_t at = 0; at < snapshot.size(); at += page_size) {
    std::vector<EntryInfo> page;
    {
      MutexLock l(&mu);
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
  return old;
}

std::optional<Tombstone> Keydir::RemoveLocked(Entry* e) {
  EntryPtr keep(e);  // the table's reference may be the last
  table_.Erase(*e);
  return DetachLocked(e);
}

Result<VerifyReport> Keydir::Verify(const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<KeydirSlot> all = Snapshot();
  VerifyReport report;
  uint64_t done = 0;
  for (const KeydirSlot& s : all) {
    if (progress) progress(done, all.size());
    ++done;
    EntryPtr e;
    {
      MutexLock l(&mu);
      table_.FreezeSome(4);   // those checked before: the queue stays short
      e = table_.EntryOf(s);  // a row is made an Entry, and a row again once checked
    }
    if (!e) continue;  // erased since
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
