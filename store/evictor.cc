#include "store/evictor.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <unordered_set>

namespace ecstore {
namespace {
constexpr uint64_t kSpillBatchBytes = 64ull << 20;
constexpr size_t kSpanCandidates = 4096;  // the coldest entries a span may be made of
}  // namespace

void Evictor::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Evictor::Stop() {
  {
    Keydir::Lock l(kd_);
    stop_ = true;
  }
  evict_cv_.NotifyAll();
  kd_->NotifySpace();
  if (thread_.joinable()) thread_.join();
}

void Evictor::NudgeLocked() {
  if (need_bytes_ || NeedsEvictionLocked() || HasBackgroundWorkLocked()) evict_cv_.NotifyOne();
}

void Evictor::Nudge() {
  Keydir::Lock l(kd_);
  NudgeLocked();
}

uint64_t Evictor::Errors() const {
  Keydir::Lock l(kd_);
  return errors_;
}

Status Evictor::Allocate(uint64_t bytes, bool wait, PoolBlock* out, bool may_evict) {
  Keydir::Lock l(kd_);
  const uint64_t need = tier().RoundUp(bytes);
  const bool device = tier_->tier() == Tier::kDevice;
  if (need > tier().capacity())
    return Status::NoSpace(
        "entry of " + std::to_string(bytes) + " bytes is larger than the whole " +
        (device ? "device pool" : "pool") + " (" + std::to_string(tier().capacity()) +
        " bytes); raise Options::" + (device ? "device_pool_bytes" : "pool_bytes"));
  const auto deadline = std::chrono::steady_clock::now() + put_wait_;
  const uint64_t fail_gen = fail_gen_;
  bool made_room = false;
  for (;;) {
    if (stop_ && wait) return Status::Unavailable("store is closing");
    if (auto b = tier().Allocate(bytes)) {
      *out = *b;
      if (NeedsEvictionLocked()) evict_cv_.NotifyOne();
      return Status::Ok();
    }
    if (!made_room && (MoveAsideLocked(need) || (may_evict && FreeCleanLocked(need)))) {
      made_room = true;  // once: what it freed holds the block, unless others took it meanwhile
      continue;
    }
    if (!may_evict)  // nor later: the evictor is not asked to make room for it either
      return Status::Busy(std::string("no free ") + TierName(tier_->tier()) + " block right now");
    need_bytes_ = std::max(need_bytes_, need);
    evict_cv_.NotifyOne();
    if (!wait)
      return Status::Busy(std::string("no free ") + TierName(tier_->tier()) + " block right now");
    if (fail_gen_ != fail_gen && consecutive_failures_ >= 2) return last_error_;
    if (!kd_->WaitForSpace(l, deadline)) {
      if (auto b = tier().Allocate(bytes)) {
        *out = *b;
        return Status::Ok();
      }
      uint64_t leased = 0;
      kd_->ForEachLocked([&](const EntryPtr& e) {
        leased += e->leases > 0;
        return true;
      });
      if (!last_error_.ok() && fail_gen_ != fail_gen) return last_error_;
      return Status::Busy(std::string(device ? "device pool" : "pool") + " is full (" +
                          std::to_string(tier().Stats().entries) + " entries, " +
                          std::to_string(leased) +
                          " leased) and nothing could be evicted in time; release leases or "
                          "raise Options::" +
                          (device ? "device_pool_bytes" : "pool_bytes"));
    }
  }
}

void Evictor::Free(const PoolBlock& blk) {
  {
    Keydir::Lock l(kd_);
    tier().Free(blk);
  }
  kd_->NotifySpace();
}

bool Evictor::NeedsEvictionLocked() const { return tier().NeedsEviction(need_bytes_); }

bool Evictor::EvictionDoneLocked() const { return tier().EvictionDone(need_bytes_); }

void Evictor::Loop() {
  Keydir::Lock l(kd_);
  while (!stop_) {
    while (!stop_ && !NeedsEvictionLocked() && !HasBackgroundWorkLocked()) evict_cv_.Wait(l);
    if (stop_) break;
    if (std::chrono::steady_clock::now() < retry_at_) {  // back off after a failed spill
      evict_cv_.WaitUntil(l, retry_at_);                 // or a stop, or a new Put's nudge
      continue;
    }
    if (!NeedsEvictionLocked()) {  // only background work
      if (!DoBackgroundWorkLocked() && !stop_) evict_cv_.WaitFor(l, std::chrono::milliseconds(50));
      continue;
    }
    bool progress = EvictSomeLocked();
    if (EvictionDoneLocked() || tier().largest_free_extent() >= need_bytes_) need_bytes_ = 0;
    kd_->NotifySpace();
    if (!progress && !stop_) {
      // Everything evictable is leased or failed to spill: wait for a release or a retry.
      evict_cv_.WaitFor(l, std::chrono::milliseconds(50));
    }
  }
}

Status Evictor::Health() const {
  Keydir::Lock l(kd_);
  return consecutive_failures_ > 0 ? last_error_ : Status::Ok();
}

// Failure bookkeeping: Put gives up on the pool after two failed spills in a row, and the
// evictor backs off.
void Evictor::NoteMoveResultLocked(const Status& st, size_t entries) {
  if (st.ok()) {
    consecutive_failures_ = 0;
    return;
  }
  ++consecutive_failures_;
  retry_at_ = std::chrono::steady_clock::now() +
              std::chrono::milliseconds(consecutive_failures_ > 1 ? 200 : 0);
  ++errors_;
  const std::string why = std::string(TierName(tier_->tier())) +
                          " is full and moving entries out of it failed: " + st.message();
  last_error_ = st.IsNoSpace() ? Status::NoSpace(why) : Status::IOError(why);
  ++fail_gen_;
  spdlog::error("moving {} entries out of the {} tier failed: {}", entries, TierName(tier_->tier()),
                st.ToString());
}

namespace {
bool Evictable(const Entry* e) {
  return e->leases == 0 && !e->spilling && !e->loading && !e->erased;
}
}  // namespace

// The cheapest contiguous span of the pool that makes room for `need` bytes, from the
// kSpanCandidates coldest evictable entries (with kEvictClean, only those with a disk copy).
// An entry's cost: to evict it, its bytes weighted by its place from the cold end; to move
// it, its bytes (the copy). *order gets the coldest entries.
std::optional<PoolAllocator::Span> HostEvictor::SpanLocked(uint64_t need, SpanFor use,
                                                           std::vector<uint64_t>* order) {
  MemoryTier& pool = kd_->pool();
  *order = pool.Coldest(kSpanCandidates);
  std::vector<PoolAllocator::Candidate> candidates;
  for (size_t rank = 0; rank < order->size(); ++rank) {
    const Entry* e = reinterpret_cast<const Entry*>((*order)[rank]);
    if (!Evictable(e) || (use == SpanFor::kEvictClean && !e->disk)) continue;
    const double bytes = static_cast<double>(e->pool->length);
    candidates.push_back({*e->pool,
                          use == SpanFor::kMove ? bytes : static_cast<double>(rank + 1) * bytes,
                          (*order)[rank]});
  }
  return pool.CheapestSpan(std::move(candidates), need);
}

// Which entries to evict, in order: the coldest; or, for a waiting block that no free extent
// holds, the cheapest span that makes room for it, so that a large block does not take
// evicting cold entries all over the pool.
std::vector<uint64_t> HostEvictor::VictimsLocked() {
  if (need_bytes_ == 0 || kd_->pool().largest_free_extent() >= need_bytes_)
    return kd_->pool().Coldest(256);
  std::vector<uint64_t> order;
  auto span = SpanLocked(need_bytes_, SpanFor::kEvict, &order);
  return span ? span->ids : order;  // no run is long enough now (leases): the coldest, as before
}

// Near a full pool the free bytes are often there, only not in one piece. Makes one extent of
// `need` bytes by copying the entries in its way to free space elsewhere (the fewest bytes),
// instead of evicting entries that will be read back from disk: a copy runs at memory speed,
// a read back at the disk's. The span's free parts are held meanwhile, so nothing else lands
// there, and mu is let go for the copies. An entry leased, spilled, evicted or erased while it
// was copied keeps its old block (the copy is dropped). Needs twice `need` free in all.
bool HostEvictor::MoveAsideLocked(uint64_t need) {
  MemoryTier& pool = kd_->pool();
  if (pool.free_bytes() < 2 * need) return false;
  std::vector<uint64_t> order;
  auto span = SpanLocked(need, SpanFor::kMove, &order);
  if (!span || span->ids.empty()) return false;
  std::vector<PoolBlock> held = pool.TakeFreeWithin(span->range);
  struct Move {
    EntryPtr e;
    PoolBlock from, to;
  };
  std::vector<Move> moves;
  for (uint64_t id : span->ids) {
    Entry* e = reinterpret_cast<Entry*>(id);
    auto to = pool.Allocate(e->pool->length);  // outside the span: its free parts are held
    if (!to) break;
    moves.push_back({EntryPtr(e), *e->pool, *to});
  }
  if (moves.size() < span->ids.size()) {  // no room for them all elsewhere: undo
    for (const Move& m : moves) pool.Free(m.to);
    for (const PoolBlock& b : held) pool.Free(b);
    return false;
  }
  kd_->Unlock();  // never across a payload copy
  for (const Move& m : moves) std::memcpy(pool.Ptr(m.to), pool.Ptr(m.from), m.from.length);
  kd_->Relock();
  for (const Move& m : moves) {
    Entry* e = m.e.get();
    const bool same = e->pool && e->pool->offset == m.from.offset && Evictable(e);
    pool.Free(same ? m.from : m.to);
    if (same) kd_->MovePoolCopyLocked(e, m.to);
  }
  for (const PoolBlock& b : held) pool.Free(b);
  kd_->NotifySpace();
  return true;
}

// Evicts on demand: a span of clean entries (a disk copy each) leaves the pool at once, so a
// promotion or Put near a full pool need not wait for the evictor or read around the pool.
bool HostEvictor::FreeCleanLocked(uint64_t need) {
  std::vector<uint64_t> order;
  auto span = SpanLocked(need, SpanFor::kEvictClean, &order);
  if (!span) return false;
  for (uint64_t id : span->ids) {
    kd_->FreePoolLocked(reinterpret_cast<Entry*>(id));
    ++kd_->pool().counters().evictions;
  }
  return true;
}

bool HostEvictor::EvictSomeLocked() {
  bool freed = false;
  std::vector<EntryPtr> batch;
  uint64_t batch_bytes = 0;
  auto done = [&]()
                  REQUIRES(kd_->mu) { return kd_->pool().EvictionDone(need_bytes_, batch_bytes); };
  for (uint64_t id : VictimsLocked()) {
    Entry* e = reinterpret_cast<Entry*>(id);
    if (!Evictable(e)) continue;
    if (e->disk) {  // a clean copy: dropping the pool block costs no I/O
      kd_->FreePoolLocked(e);
      ++kd_->pool().counters().evictions;
      freed = true;
    } else {
      kd_->BeginSpillLocked(e);
      batch.push_back(EntryPtr(e));
      batch_bytes += e->pool->length;
    }
    if (done() || batch_bytes >= kSpillBatchBytes) break;
  }
  if (batch.empty()) return freed;
  return SpillUnlocked(batch, true).ok() || freed;
}

// SpillBatch with mu let go (never across I/O), then a compaction if one is due.
Status HostEvictor::SpillUnlocked(const std::vector<EntryPtr>& batch, bool drop_from_pool) {
  kd_->Unlock();
  Status st = SpillBatch(batch, drop_from_pool);
  kd_->durable().MaybeCompact();
  kd_->Relock();
  return st;
}

Status HostEvictor::SpillBatch(const std::vector<EntryPtr>& batch, bool drop_from_pool) {
  std::vector<DurableTier::SpillItem> items;
  std::vector<bool> hash;  // entries put from device memory are hashed here, once
  {
    Keydir::Lock l(kd_);
    for (const EntryPtr& e : batch) {
      items.push_back({e->id(), *e, kd_->pool().Ptr(*e->pool)});
      hash.push_back(!e->checksummed);
    }
  }
  for (size_t i = 0; i < items.size(); ++i)  // the pool copy of a spilling entry is fixed
    if (hash[i]) items[i].rec.checksum = PayloadChecksum(items[i].payload, items[i].rec.bytes);
  std::vector<Tombstone> tombs;
  std::vector<EntryPtr> dead;
  auto install = [&](const Status& st, const std::vector<DurableTier::SpillOutcome>& out) {
    Keydir::Lock l(kd_);
    for (size_t i = 0; i < batch.size(); ++i) {
      Entry* e = batch[i].get();
      if (hash[i]) kd_->SetChecksumLocked(e, items[i].rec.checksum);
      if (out[i].too_big) {
        DropUnspillableLocked(e, drop_from_pool);
      } else if (st.ok() && e->erased) {
        // Erased (or replaced) while its bytes were in flight: that record is dead. It stays
        // "spilling" until its tombstone is durable: the Erase or Put waiting on it returns
        // only then, so a crash cannot bring the old bytes back.
        tombs.push_back({e->ns, e->key, e->seq, out[i].loc->segment});
        dead.push_back(batch[i]);
      } else if (!st.ok()) {
        kd_->EndSpillLocked(e);
      } else {
        InstallSpilledLocked(e, *out[i].loc, drop_from_pool);
      }
    }
    NoteMoveResultLocked(st, batch.size());
    kd_->NotifySpace();
    kd_->NotifySpill();
  };
  Status st = kd_->durable().Spill(items, install);
  kd_->durable().WriteTombstones(std::move(tombs));
  if (!dead.empty()) {
    Keydir::Lock l(kd_);
    for (const EntryPtr& e : dead) kd_->EndSpillLocked(e.get());  // erased: blocks back
    kd_->NotifySpill();
  }
  return st;
}

void HostEvictor::QueueWriteBack(const EntryPtr& e) {
  Keydir::Lock l(kd_);
  if (write_back_) write_back_q_.push_back(e);
  NudgeLocked();
}

// Spills up to kSpillBatchBytes of queued entries that still have no disk copy, keeping their
// pool blocks. Making room then never waits on a write, and the pool's span choice
// (FreeCleanLocked) may take any entry. Measured (bench mixed, 1 GiB pool, pool watermarks
// 0.98/0.95): with only the spilled entries clean, the spans it could choose from made the
// pool read 3.4 MB/op back from disk; with every entry clean, 2.8 (the baseline's 2.9).
bool HostEvictor::DoBackgroundWorkLocked() {
  std::vector<EntryPtr> batch;
  uint64_t bytes = 0;
  while (!write_back_q_.empty() && bytes < kSpillBatchBytes) {
    EntryPtr e = std::move(write_back_q_.front());
    write_back_q_.pop_front();
    if (!e->pool || e->disk || e->spilling || e->erased) continue;  // moved on meanwhile
    kd_->BeginSpillLocked(e.get());
    bytes += e->bytes;
    batch.push_back(std::move(e));
  }
  if (batch.empty()) return false;
  return SpillUnlocked(batch, false).ok();
}

// An entry that cannot live on disk at all (larger than the quota): the cache drops it.
void HostEvictor::DropUnspillableLocked(Entry* e, bool drop_from_pool) {
  kd_->EndSpillLocked(e);  // an erased one's blocks go back (unless leased)
  if (!drop_from_pool) return;
  ++kd_->pool().counters().evictions;
  if (!e->erased) kd_->RemoveLocked(e);
}

// A spilled entry now has a durable copy at `loc`.
void HostEvictor::InstallSpilledLocked(Entry* e, const DiskLocation& loc, bool drop_from_pool) {
  kd_->SpilledLocked(e, loc);
  ++kd_->pool().counters().spills;
  if (drop_from_pool && e->leases == 0) {
    kd_->FreePoolLocked(e);
    ++kd_->pool().counters().evictions;
  }
}

// Entries the evictor is spilling right now are waited for, not skipped: its spill may yet
// fail (a full disk), and Flush promises they are durable when it returns -- the soak test
// lost acknowledged-durable entries to exactly that. One that failed is spilled here. Each
// entry is spilled once per call: when the pool and the disk together hold more than the
// quota, the quota gives up older disk copies for newer ones, and spilling those again
// would never end (the soak test saw a Flush write a thousand segments).
Status HostEvictor::Flush() {
  std::unordered_set<const Entry*> spilled;
  for (;;) {
    std::vector<EntryPtr> batch, in_flight;
    uint64_t bytes = 0;
    {
      Keydir::Lock l(kd_);
      if (kd_->closed()) return Status::Unavailable("store is closed");
      kd_->ForEachLocked([&](const EntryPtr& e) {
        if (!e->pool || e->disk || e->erased || spilled.count(e.get())) return true;
        if (e->spilling) {
          in_flight.push_back(e);
          return true;
        }
        batch.push_back(e);
        spilled.insert(e.get());
        bytes += e->bytes;
        return bytes < kSpillBatchBytes;
      });
      for (const EntryPtr& e : batch) kd_->BeginSpillLocked(e.get());
    }
    if (batch.empty() && in_flight.empty()) break;
    if (!batch.empty())
      EC_RETURN_IF_ERROR(SpillBatch(batch, false));
    else
      for (const EntryPtr& e : in_flight) kd_->AwaitSpill(e);
  }
  return kd_->durable().Flush();
}

Status HostEvictor::Promote(const EntryPtr& e, bool wait, uint8_t* tee,
                            std::optional<EntryInfo>* delivered) {
  std::vector<PromoteItem> one(1);
  one[0].e = e;
  one[0].tee = tee;
  PromoteMany(one, wait, PromoteFor::kRead);
  if (delivered) *delivered = std::move(one[0].delivered);
  return one[0].status;
}

void HostEvictor::PromoteMany(std::vector<PromoteItem>& items, bool wait, PromoteFor why,
                              const IoMeanwhile& meanwhile) {
  struct Started {
    size_t i;
    PoolBlock blk;
  };
  std::vector<Started> started;
  std::vector<DurableTier::ReadItem> reads;
  for (size_t i = 0; i < items.size(); ++i) {
    const EntryPtr& e = items[i].e;
    PoolBlock blk;
    items[i].status = Allocate(e->bytes, wait, &blk, why == PromoteFor::kRead);
    if (!items[i].status.ok()) continue;
    Keydir::Lock l(kd_);
    if (e->erased || e->pool || e->loading || !e->disk) {  // someone else's, or gone
      kd_->pool().Free(blk);
      kd_->NotifySpace();
      continue;
    }
    kd_->BeginLoadLocked(e.get());
    started.push_back({i, blk});
    uint8_t* at = kd_->pool().Ptr(blk);
    std::function<void(uint64_t)> landed;
    if (items[i].landed) landed = [fn = &items[i].landed, at](uint64_t n) { (*fn)(at, n); };
    reads.push_back({e.get(), *e->disk, at, blk.length, Status(), false, items[i].tee, false,
                     std::move(landed), false});
  }
  kd_->durable().ReadMany(reads, meanwhile);  // every read of the batch in flight together
  for (size_t k = 0; k < started.size(); ++k)
    items[started[k].i].status =
        FinishPromote(items[started[k].i], started[k].blk, reads[k], why == PromoteFor::kRead);
}

// Installs a promoted entry's pool block, or gives it back and handles what the read found.
Status HostEvictor::FinishPromote(PromoteItem& item, const PoolBlock& blk,
                                  const DurableTier::ReadItem& read, bool count_hit) {
  const EntryPtr& e = item.e;
  {
    Keydir::Lock l(kd_);
    if (read.status.ok() && !e->erased) {
      std::memset(kd_->pool().Ptr(blk) + e->bytes, 0, blk.length - e->bytes);
      kd_->EndLoadLocked(e.get(), blk);
      ++kd_->pool().counters().promotions;
      if (count_hit) kd_->durable().NoteHit();
      if (read.teed) {  // read as well: touched as a lease would touch it
        kd_->TouchLocked(e.get());
        kd_->pool().Touch(e->id());
        item.delivered = kd_->InfoLocked(*e);
      }
      if (item.lease) {
        item.leased = kd_->LeaseLocked(e, false, MemoryKind::kHost, Tier::kDisk);
        item.streamed = read.streamed;
      }
      return Status::Ok();
    }
    kd_->EndLoadLocked(e.get(), std::nullopt);
    kd_->pool().Free(blk);
    kd_->NotifySpace();
  }
  if (read.stale_row) return kd_->FixStaleRow(e, read.loc, read.status);
  if (read.status.IsCorruption()) return kd_->DropCorrupt(e, read.status);
  return read.status;
}

// Promotes the keys' disk-only entries in one batch; per key, Ok where there was nothing to do.
std::vector<Status> HostEvictor::PromoteKeys(std::string_view ns,
                                             const std::vector<std::string>& keys,
                                             const IoMeanwhile& meanwhile, KeyDelivery* get) {
  std::vector<Status> out(keys.size());
  std::vector<PromoteItem> items;
  std::vector<size_t> key_of;
  {
    Keydir::Lock l(kd_);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto found = kd_->FindLocked(ns, keys[i], false);
      if (!found.ok()) {
        if (kd_->closed()) out[i] = found.status();
        continue;
      }
      const EntryPtr& e = *found;
      if (e->pool || e->device || !e->disk) continue;
      const bool tee = get && i < get->dsts.size() && get->dsts[i].size() >= e->bytes;
      PromoteItem& item = items.emplace_back();
      item.e = e;
      item.tee = tee ? get->dsts[i].data() : nullptr;
      if (get && get->watch)
        item.landed = [w = get->watch, i](const uint8_t* at, uint64_t n) { (*w)(i, at, n); };
      item.lease = get && get->lease;
      key_of.push_back(i);
    }
  }
  PromoteMany(items, false, get ? PromoteFor::kRead : PromoteFor::kPrefetch, meanwhile);
  if (get) {
    get->promoted.assign(keys.size(), false);
    get->delivered.assign(keys.size(), std::nullopt);
    get->leased.resize(keys.size());
    get->streamed.assign(keys.size(), false);
  }
  for (size_t k = 0; k < items.size(); ++k) {
    out[key_of[k]] = items[k].status;
    if (!get) continue;
    get->promoted[key_of[k]] = items[k].status.ok();
    get->delivered[key_of[k]] = std::move(items[k].delivered);
    get->leased[key_of[k]] = std::move(items[k].leased);
    get->streamed[key_of[k]] = items[k].streamed;
  }
  return out;
}

}  // namespace ecstore
