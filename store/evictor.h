// Evictor: keeps one memory tier below its high watermark. A background thread takes the
// tier's coldest unleased entries and moves them down (EvictSomeLocked); Puts that find no
// block wait here (up to Options::put_wait) while it makes room. After a failed move it
// backs off, and Puts stop waiting once two moves in a row have failed.
//   HostEvictor (here): the host pool. An entry with a disk copy just leaves the pool; the
//     rest are spilled to the DurableTier in batches of up to 64 MiB (one append, one
//     fdatasync each). It also promotes disk entries back into the pool.
//   DeviceEvictor (store/device_tier.h): the GPU pool, demoting to the host pool.
// Thread rules: thread-safe; its state is guarded by the keydir's mu. Start once, Stop once
// (joins the thread); Allocate, SpillBatch and Flush never hold mu across their I/O.
#pragma once

#include <chrono>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "store/keydir.h"

namespace ecstore {

class Evictor {
 public:
  Evictor(Keydir* kd, MemoryTier* tier, std::chrono::milliseconds put_wait)
      : kd_(kd), tier_(tier), put_wait_(put_wait) {}
  virtual ~Evictor() = default;  // Stop before destroying

  void Start();
  void Stop() EXCLUDES(kd_->mu);

  // A block of `bytes` in the tier. With `wait`, waits up to put_wait for the evictor to
  // make room; without, Busy at once (the evictor is nudged either way). Near a full tier it
  // first makes room itself (moves entries aside, or evicts a span of clean ones); without
  // `may_evict` (a prefetch) it only moves, and nothing leaves the tier for it, then or later.
  // NoSpace when the block is larger than the whole tier.
  Status Allocate(uint64_t bytes, bool wait, PoolBlock* out, bool may_evict = true)
      EXCLUDES(kd_->mu);
  // Gives back a block Allocate made that never became an entry's copy (waiters told).
  void Free(const PoolBlock& blk) EXCLUDES(kd_->mu);
  // Wakes the evictor if the tier is above its watermark or a Put is waiting.
  void NudgeLocked() REQUIRES(kd_->mu);
  void Nudge() EXCLUDES(kd_->mu);
  uint64_t Errors() const EXCLUDES(kd_->mu);  // failed moves (spills, demotions)
  // The last move's error while moves keep failing (Ok once one succeeds again).
  Status Health() const EXCLUDES(kd_->mu);

 protected:
  MemoryTier& tier() const REQUIRES(kd_->mu) { return *tier_; }
  // Frees room in the tier (mu may be let go for I/O in between). False: nothing could move.
  virtual bool EvictSomeLocked() REQUIRES(kd_->mu) = 0;
  // Makes room for `need` bytes at once, with no I/O, where the tier allows it (HostEvictor:
  // entries with a disk copy just leave the pool). False: nothing was freed.
  virtual bool FreeCleanLocked(uint64_t /*need*/) REQUIRES(kd_->mu) { return false; }
  // Makes room for `need` bytes by moving entries, not evicting them, where the tier allows
  // it (mu is let go during the copies). False: nothing was moved.
  virtual bool MoveAsideLocked(uint64_t /*need*/) REQUIRES(kd_->mu) { return false; }
  // Background work besides eviction, done while the tier is below its watermark (HostEvictor:
  // writing new entries back to disk). Do*: false when nothing could be done.
  virtual bool HasBackgroundWorkLocked() const REQUIRES(kd_->mu) { return false; }
  virtual bool DoBackgroundWorkLocked() REQUIRES(kd_->mu) { return false; }
  void NoteMoveResultLocked(const Status& st, size_t entries) REQUIRES(kd_->mu);

  Keydir* const kd_;
  MemoryTier* const tier_;
  uint64_t need_bytes_ GUARDED_BY(kd_->mu) = 0;  // the largest block a waiting Put needs

 private:
  bool NeedsEvictionLocked() const REQUIRES(kd_->mu);
  bool EvictionDoneLocked() const REQUIRES(kd_->mu);
  void Loop();

  const std::chrono::milliseconds put_wait_;
  CondVar evict_cv_;  // the evictor: work may be needed
  uint64_t fail_gen_ GUARDED_BY(kd_->mu) = 0;
  int consecutive_failures_ GUARDED_BY(kd_->mu) = 0;  // Puts give up after two
  std::chrono::steady_clock::time_point retry_at_ GUARDED_BY(kd_->mu){};
  Status last_error_ GUARDED_BY(kd_->mu);
  uint64_t errors_ GUARDED_BY(kd_->mu) = 0;
  bool stop_ GUARDED_BY(kd_->mu) = false;
  std::thread thread_;
};

class HostEvictor : public Evictor {
 public:
  HostEvictor(Keydir* kd, std::chrono::milliseconds put_wait, bool write_back)
      : Evictor(kd, kd->host_tier(), put_wait), write_back_(write_back) {}
  // An entry that just came into the pool (a Put, a demotion from the device pool). With
  // write-back on, the evictor spills it in the background (unless it has a disk copy by
  // then) and keeps its pool block, so that when room is needed later it can leave at once,
  // wherever it lies. Nudges the evictor either way.
  void QueueWriteBack(const EntryPtr& e) EXCLUDES(kd_->mu);
  // Writes the entries (marked spilling by the caller) to disk. drop_from_pool: eviction
  // (their pool blocks go back once written); otherwise a Flush (they stay).
  Status SpillBatch(const std::vector<EntryPtr>& batch, bool drop_from_pool) EXCLUDES(kd_->mu);
  // Spills every host entry that has no disk copy yet, then commits the index.
  Status Flush() EXCLUDES(kd_->mu);
  // The other way: reads a disk-only entry into a fresh pool block (wait: for room, as a Put
  // does). Ok also when someone else promoted or erased it meanwhile; the caller looks again.
  // With a tee (at least e->bytes), a Get's destination: *delivered is set when the payload
  // landed there too, checked, as PromoteItem's.
  Status Promote(const EntryPtr& e, bool wait, uint8_t* tee = nullptr,
                 std::optional<EntryInfo>* delivered = nullptr) EXCLUDES(kd_->mu);
  // Several at once: their disk reads go out as one batch, all in flight together. With a
  // tee, an entry's payload is also copied there as its pieces land, and `delivered` is set
  // once it is checked (a reader's destination: the copy overlaps the rest of the batch's
  // reads instead of following them). A kPrefetch is not counted as a read and evicts
  // nothing to make room: it takes free room or none (Busy). What a prefetch evicts is often
  // what the step being fetched now is about to lease: prefetches that evicted read more
  // back from disk and ran slower in `bench mixed`.
  struct PromoteItem {
    EntryPtr e;
    uint8_t* tee = nullptr;  // at least e->bytes, or none
    Status status;
    std::optional<EntryInfo> delivered;  // the entry whose payload tee holds, counted as read
    // A watched read: told where the payload lands in the pool and how much has (in order,
    // unchecked) as the pieces land, on the promoting thread.
    std::function<void(const uint8_t* at, uint64_t landed)> landed = nullptr;
    // Leased as it is installed (no eviction between), not counted as a hit: AcquireMany's.
    // `streamed` then says the lease holds the bytes `landed` was told of, in place.
    bool lease = false;
    std::optional<ReadLease> leased = std::nullopt;
    bool streamed = false;
  };
  // `meanwhile` as DurableTier::ReadMany's.
  enum class PromoteFor { kRead, kPrefetch };
  void PromoteMany(std::vector<PromoteItem>& items, bool wait, PromoteFor why,
                   const IoMeanwhile& meanwhile = nullptr) EXCLUDES(kd_->mu);
  // GetMany's part in PromoteKeys: its destinations (a tee each, where large enough) and,
  // per key, what became of it.
  struct KeyDelivery {
    explicit KeyDelivery(const std::vector<std::span<uint8_t>>& d) : dsts(d) {}
    const std::vector<std::span<uint8_t>>& dsts;
    std::vector<bool> promoted;                       // into the pool
    std::vector<std::optional<EntryInfo>> delivered;  // and its bytes into dsts[i], checked
    // AcquireMany's part: each promoted entry leased as it is installed (into leased[i]),
    // and with `watch`, its pieces told as they land (Cache::LandingWatch); streamed[i]
    // as PromoteItem's.
    bool lease = false;
    const std::function<void(size_t key, const uint8_t* at, uint64_t landed)>* watch = nullptr;
    std::vector<std::optional<ReadLease>> leased;
    std::vector<bool> streamed;
  };
  // The keys' entries that are on disk only, promoted as one batch without waiting for room.
  // Per key; Ok where there was nothing to do. A prefetch (no `get`) is not counted as a
  // read; GetMany's promotions are disk hits.
  std::vector<Status> PromoteKeys(std::string_view ns, const std::vector<std::string>& keys,
                                  const IoMeanwhile& meanwhile = nullptr,
                                  KeyDelivery* get = nullptr) EXCLUDES(kd_->mu);

 private:
  bool EvictSomeLocked() override REQUIRES(kd_->mu);
  bool FreeCleanLocked(uint64_t need) override REQUIRES(kd_->mu);
  bool MoveAsideLocked(uint64_t need) override REQUIRES(kd_->mu);
  bool HasBackgroundWorkLocked() const override REQUIRES(kd_->mu) { return !write_back_q_.empty(); }
  bool DoBackgroundWorkLocked() override REQUIRES(kd_->mu);
  Status SpillUnlocked(const std::vector<EntryPtr>& batch, bool drop_from_pool) REQUIRES(kd_->mu);
  std::vector<uint64_t> VictimsLocked() REQUIRES(kd_->mu);
  enum class SpanFor { kEvict, kEvictClean, kMove };
  std::optional<PoolAllocator::Span> SpanLocked(uint64_t need, SpanFor use,
                                                std::vector<uint64_t>* order) REQUIRES(kd_->mu);
  void DropUnspillableLocked(Entry* e, bool drop_from_pool) REQUIRES(kd_->mu);
  Status FinishPromote(PromoteItem& item, const PoolBlock& blk, const DurableTier::ReadItem& read,
                       bool count_hit) EXCLUDES(kd_->mu);
  void InstallSpilledLocked(Entry* e, const DiskLocation& loc, bool drop_from_pool)
      REQUIRES(kd_->mu);

  const bool write_back_;
  std::deque<EntryPtr> write_back_q_ GUARDED_BY(kd_->mu);  // oldest first
};

}  // namespace ecstore
