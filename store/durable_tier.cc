#include "store/durable_tier.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <iterator>
#include <mutex>
#include <optional>
#include <utility>

#include "disk/codec.h"
#include "store/recovery_scan.h"

namespace ecstore {
namespace {

constexpr uint64_t kAppendBatchBytes = 64ull << 20;  // compaction moves records in these

// Why a record's header does not belong to the entry an index row says it holds ("" = it does).
std::string RecordMismatch(const EntryRecord& e, const DiskLocation& loc,
                           const Result<RecordInfo>& h) {
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

Result<std::unique_ptr<DurableTier>> DurableTier::Open(const std::string& dir, Env* env,
                                                       const DurableOptions& options) {
  std::unique_ptr<DurableTier> t(new DurableTier(dir, env, options));
  t->index_path_ = dir + "/index.sqlite";
  t->index_existed_ = env->FileExists(t->index_path_);
  // SQLite makes the -wal and -shm with the database's mode: made first with the store's
  // (an empty file is an empty database), so that no file of the index is ever readable by
  // others, whatever the umask.
  if (!t->index_existed_ && !options.read_only)
    (void)env->OpenFile(t->index_path_, O_RDWR | O_CREAT, options.file_mode);
  auto index = Index::OpenOrReplace(t->index_path_, env, options.read_only, options.rebuild_index,
                                    &t->index_damaged_);
  if (!index.ok()) return index.status();
  t->index_ = std::move(index).value();
  DiskOptions dopt;
  dopt.file_mode = options.file_mode;
  // Segments of at most an eighth of the quota, so that compacting dead bytes away (which
  // works a sealed segment at a time) can keep the files within the quota.
  dopt.segment_bytes = std::min(options.segment_bytes,
                                std::max<uint64_t>(RoundUpBlock(options.quota_bytes / 8), 1 << 20));
  dopt.queue_depth = options.queue_depth;
  dopt.io_chunk_bytes = options.io_chunk_bytes;
  dopt.followed_read_window = options.io_read_window;
  auto disk = DiskTier::Open(dir + "/segments", env, dopt);
  if (!disk.ok()) return disk.status();
  t->disk_ = std::move(disk).value();
  if (!options.read_only) t->KeepPrivate();
  struct stat st {};
  if (::stat((dir + "/segments").c_str(), &st) == 0) {
    t->segments_dev_ = st.st_dev;
    t->segments_ino_ = st.st_ino;
  }
  return t;
}

// The store's modes on what it made, every open: a store made by a build that left the
// index's -wal and -shm or segments/ readable by others is closed to them from then on.
void DurableTier::KeepPrivate() const {
  const mode_t file = opt_.file_mode, dir = file | ((file & 0444) >> 2);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string path = index_path_ + suffix;
    if (::chmod(path.c_str(), file) != 0 && errno != ENOENT)
      spdlog::warn("could not set mode {:o} on {}: {}", file, path, std::strerror(errno));
  }
  if (::chmod((dir_ + "/segments").c_str(), dir) != 0 && errno != ENOENT)
    spdlog::warn("could not set mode {:o} on {}/segments: {}", dir, dir_, std::strerror(errno));
}

DurableTier::~DurableTier() {
  if (index_) FlushIndex();
}

Status DurableTier::CheckWritable() const {
  if (!opt_.read_only) return Status::Ok();
  return Status::NoSpace("store " + dir_ + " is open read-only (" + opt_.read_only_reason +
                         "); free disk space and open it again to write");
}

Status DurableTier::CheckDirectory() const {
  struct stat st {};
  const std::string seg = dir_ + "/segments";
  if (::stat(seg.c_str(), &st) != 0)
    return Status::Unavailable("store directory " + dir_ + " is gone (" + seg + ": " +
                               std::strerror(errno) +
                               "); nothing more can be made durable: restart the server");
  if (st.st_dev != segments_dev_ || st.st_ino != segments_ino_)
    return Status::Unavailable("store directory " + dir_ +
                               " was replaced since it was opened; restart the server");
  return Status::Ok();
}

// ---------------------------------------------------------------- recovery

Status DurableTier::Recover(Owner* owner) {
  owner_ = owner;
  if (opt_.read_only && opt_.rebuild_index)
    return Status::NoSpace("rebuilding the index of " + dir_ + " needs free disk space (" +
                           opt_.read_only_reason + ")");
  bool rebuild =
      opt_.rebuild_index || index_damaged_ || (!index_existed_ && !disk_->Segments().empty());
  if (!index_existed_ && rebuild && !opt_.rebuild_index)
    spdlog::warn("index {} is missing; rebuilding it from the segment files", index_path_);
  Status st = RecoverOnce(rebuild, owner);
  if (st.IsCorruption() && !rebuild) {  // a damaged page turned up while loading
    owner->RecoveryRestarts();
    acct_.Reset();
    index_.reset();
    EC_RETURN_IF_ERROR(Index::SetAside(index_path_, env_, st));
    auto index = Index::OpenOrReplace(index_path_, env_, false, false, &index_damaged_);
    if (!index.ok()) return index.status();
    index_ = std::move(index).value();
    st = RecoverOnce(true, owner);
  }
  return st;
}

Status DurableTier::RecoverOnce(bool rebuild, Owner* owner) {
  std::map<uint32_t, uint64_t> tails;
  if (rebuild) {
    EC_RETURN_IF_ERROR(index_->Reset());
  } else {
    auto t = index_->SegmentTails();
    if (!t.ok()) return t.status();
    tails = std::move(t).value();
  }
  std::vector<uint32_t> segs = disk_->Segments();
  RecoveryScan scan(disk_.get(), index_.get(), owner, opt_.read_only);
  if (!rebuild) EC_RETURN_IF_ERROR(scan.LoadIndex(segs));
  for (uint32_t seg : segs)
    EC_RETURN_IF_ERROR(scan.ScanTail(seg, tails.count(seg) ? tails[seg] : 0, rebuild));
  acct_.Corrupt(scan.corrupt());
  next_seq_ = scan.max_seq() + 1;
  if (scan.tail_clean() && !opt_.read_only) disk_->ReopenTail();  // the last segment ends whole
  FlushIndex();
  return Status::Ok();
}

// ---------------------------------------------------------------- accounting

void DurableTier::Adopt(const EntryRecord& rec, const DiskLocation& loc, bool spilled) {
  Track(rec.bytes, loc);
  if (spilled) acct_.Spilled();
  index_->EnqueuePut(IndexRow(rec, loc));
}

void DurableTier::Moved(const EntryRecord& rec, const DiskLocation& from, const DiskLocation& to) {
  acct_.Moved(from, to);
  index_->EnqueuePut(IndexRow(rec, to));
}

void DurableTier::SaveAccess(const EntryRecord& rec) {
  index_->EnqueueTouch(rec.ns, rec.key, rec.last_access_us, rec.hits);
}

void DurableTier::Forget(const EntryRecord& rec) {
  index_->EnqueueDelete(rec.ns, rec.key, rec.seq);
}

void DurableTier::FillStats(TierStats* disk, uint64_t* segments, uint64_t* compactions,
                            uint64_t* corrupt) const {
  acct_.Fill(disk, compactions, corrupt);
  disk->used = disk_->file_bytes();
  *segments = disk_->Segments().size();
}

// ---------------------------------------------------------------- reads

Status DurableTier::Read(const EntryRecord& e, const DiskLocation& loc, uint8_t* dst,
                         uint64_t dst_cap, bool* stale_row) {
  *stale_row = false;
  const bool direct = loc.codec == Codec::kNone &&
                      reinterpret_cast<uintptr_t>(dst) % kBlockSize == 0 &&
                      dst_cap >= RoundUpBlock(loc.stored_len);
  AlignedBuffer staging(direct ? 0 : loc.stored_len);
  Result<RecordInfo> header = Status::NotFound("header not read");
  // Straight into the destination when it is aligned, no staging copy, checksummed as its
  // pieces land.
  std::optional<PayloadHasher> hash;
  if (direct) hash.emplace(e.bytes);
  Status st =
      disk_->ReadStored(loc, direct ? dst : staging.data(), &header, hash ? &*hash : nullptr);
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
  return CheckPayload(e, loc, dst, hash ? &*hash : nullptr);
}

// Whether the payload read into dst is the one the entry's checksum describes; `hash` has it
// already when it was fed the whole payload as the read landed.
Status DurableTier::CheckPayload(const EntryRecord& e, const DiskLocation& loc, const uint8_t* dst,
                                 const PayloadHasher* hash) {
  const uint64_t sum = hash && hash->complete() ? hash->Digest() : PayloadChecksum(dst, e.bytes);
  if (sum != e.checksum)
    return Status::Corruption("checksum mismatch in segment " + std::to_string(loc.segment) +
                              " at offset " + std::to_string(loc.offset));
  return Status::Ok();
}

void DurableTier::ReadMany(std::vector<ReadItem>& items, const IoMeanwhile& meanwhile) {
  std::vector<DiskTier::StoredRead> batch;
  std::vector<size_t> in_batch;
  std::deque<PayloadHasher> hashes;
  for (size_t i = 0; i < items.size(); ++i) {
    const ReadItem& it = items[i];
    const bool direct = it.loc.codec == Codec::kNone &&
                        reinterpret_cast<uintptr_t>(it.dst) % kBlockSize == 0 &&
                        it.dst_cap >= RoundUpBlock(it.loc.stored_len);
    if (!direct || (items.size() == 1 && !meanwhile && !it.tee && !it.landed)) continue;
    DiskTier::StoredRead& r = batch.emplace_back();
    r = {it.loc,
         it.dst,
         Status::NotFound("not read"),
         &hashes.emplace_back(it.rec->bytes),
         it.tee,
         it.tee ? it.rec->bytes : 0,
         nullptr};
    if (it.landed)
      r.landed = [item = &items[i]](uint64_t n) {
        item->landed(std::min<uint64_t>(n, item->rec->bytes));
      };
    in_batch.push_back(i);
  }
  std::vector<bool> done(items.size());
  if (!batch.empty() && disk_->ReadStoredMany(batch, meanwhile).ok()) {
    for (size_t k = 0; k < batch.size(); ++k) {
      ReadItem& it = items[in_batch[k]];
      std::string why = RecordMismatch(*it.rec, it.loc, batch[k].header);
      if (!why.empty()) continue;  // read on its own below, which tells stale from failing
      done[in_batch[k]] = true;
      it.status = CheckPayload(*it.rec, it.loc, it.dst, batch[k].hash);
      it.teed = it.tee && it.status.ok();
      it.streamed = it.landed && it.status.ok();
    }
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (!done[i])
      items[i].status =
          Read(*items[i].rec, items[i].loc, items[i].dst, items[i].dst_cap, &items[i].stale_row);
}

std::optional<std::pair<RecordInfo, DiskLocation>> DurableTier::FindRecord(const EntryRecord& e,
                                                                           uint32_t segment) {
  std::optional<std::pair<RecordInfo, DiskLocation>> found;
  auto scan =
      disk_->Scan(segment, 0, false, [&](const RecordInfo& r, const DiskLocation& at, bool) {
        if (!r.tombstone() && r.ns == e.ns && r.key == e.key && r.seq == e.seq) found = {r, at};
      });
  if (!scan.ok()) return std::nullopt;
  return found;
}

void DurableTier::VerifyHeaders(std::vector<std::string>* corrupt,
                                std::vector<std::string>* errors) {
  for (uint32_t seg : disk_->Segments()) {
    auto scan = disk_->Scan(seg, 0, false, [](const RecordInfo&, const DiskLocation&, bool) {});
    if (!scan.ok()) {
      if (!scan.status().IsNotFound())  // NotFound: compacted away meanwhile
        errors->push_back("segment " + std::to_string(seg) + ": " + scan.status().ToString());
      continue;
    }
    if (scan->bad_headers > 0)
      corrupt->push_back("segment " + std::to_string(seg) + ": " +
                         std::to_string(scan->bad_headers) + " damaged record header(s), " +
                         std::to_string(scan->skipped_bytes) + " bytes unreadable");
  }
}

// ---------------------------------------------------------------- writes

DiskTier::WriteItem DurableTier::TombstoneItem(const Tombstone& t) {
  DiskTier::WriteItem it;
  it.info.flags = RecordInfo::kTombstone;
  it.info.seq = NextSeq();
  it.info.target_seq = t.target_seq;
  it.info.hides_segment = t.hides_segment;
  it.info.ns = t.ns;
  it.info.key = t.key;
  it.info.created_us = env_->NowMicros();
  return it;
}

std::vector<Tombstone> DurableTier::TakeUnwritten() {
  MutexLock l(&mu_);
  return std::exchange(unwritten_, {});
}

void DurableTier::KeepUnwritten(std::vector<Tombstone> tombs) {
  MutexLock l(&mu_);
  for (Tombstone& t : tombs) unwritten_.push_back(std::move(t));
}

Status DurableTier::WriteTombstones(std::vector<Tombstone> tombs) {
  if (tombs.empty()) {
    MutexLock l(&mu_);
    if (unwritten_.empty()) return Status::Ok();
  }
  EC_RETURN_IF_ERROR(CheckWritable());  // read-only: a dropped entry stays dropped in memory
  for (const Tombstone& t : tombs) index_->EnqueueDelete(t.ns, t.key, t.target_seq);
  std::vector<Tombstone> all = TakeUnwritten();
  const size_t owed = all.size();
  std::move(tombs.begin(), tombs.end(), std::back_inserter(all));
  std::vector<DiskTier::WriteItem> items;
  for (const Tombstone& t : all) items.push_back(TombstoneItem(t));
  std::vector<DiskLocation> locs;
  MutexLock append_lock(&append_mu_);
  // Within the quota where compaction can make room; written regardless where it cannot (an
  // erase must be durable: a few blocks over the quota are the lesser harm). With write-back
  // every replaced entry leaves a tombstone, and these appends alone once overran the quota.
  ReclaimFileSpace(items.size() * kBlockSize).ok();
  Status st = disk_->Append(items, &locs);
  if (st.ok()) {
    index_->EnqueueTail(locs.back().segment, locs.back().offset + locs.back().record_bytes());
    if (owed > 0) spdlog::info("wrote {} tombstone(s) a full disk had held back", owed);
    return Status::Ok();
  }
  if (tombstone_warnings_.Allow())
    spdlog::error(
        "could not write {} tombstone(s): {}; kept for the next write, a crash before "
        "then may bring the erased entries back",
        all.size(), st.ToString());
  KeepUnwritten(std::move(all));
  const std::string why = "erased, but not durably yet: the tombstone could not be written (" +
                          st.message() +
                          "); it goes with the next write that succeeds, a crash before then "
                          "may bring the entry back";
  return st.IsNoSpace() ? Status::NoSpace(why) : Status::IOError(why);
}

// Durable means in the segments: a change the index could not commit yet (a full disk) is
// kept and retried by the index, and never recorded as indexed past (Index::WriterLoop), so
// the next open reads it back from the segment files; it does not fail the flush.
Status DurableTier::Flush() {
  Status st = opt_.read_only ? Status::Ok() : WriteTombstones({});
  FlushIndex();
  return st;
}

void DurableTier::FlushIndex() {
  Status st = index_->Flush();
  if (!st.ok() && index_lag_warnings_.Allow())
    spdlog::warn(
        "the index lags the segment files ({}); what it lacks is read back from them "
        "at the next open",
        st.ToString());
}

// The records of a spill: straight from pool memory, or LZ4 output where it pays.
struct DurableTier::Plan {
  std::vector<DiskTier::WriteItem> items;  // one per written item
  std::vector<size_t> item_of;             // index into the spill's items
  std::vector<AlignedBuffer> compressed;   // payloads the items point into
  uint64_t bytes = 0;                      // record bytes of the items
};

DurableTier::Plan DurableTier::PlanSpill(const std::vector<SpillItem>& spill) {
  Plan plan;
  for (size_t i = 0; i < spill.size(); ++i) {
    const SpillItem& s = spill[i];
    DiskTier::WriteItem it;
    it.info = RecordInfo::Of(s.rec, DiskLocation{0, 0, s.rec.bytes, Codec::kNone});
    it.payload = s.payload;  // the pool is 4 KiB aligned: O_DIRECT straight from it
    if (opt_.compress) {
      AlignedBuffer out;
      uint64_t stored = 0;
      Codec c = CompressPayload(it.payload, s.rec.bytes, DTypeSize(s.rec.meta.dtype),
                                opt_.min_compression_saving, &out, &stored);
      if (c != Codec::kNone) {
        it.info.codec = c;
        it.info.stored_len = stored;
        it.payload = out.data();
        plan.compressed.push_back(std::move(out));
      }
    }
    if (it.info.record_bytes() > opt_.quota_bytes) continue;  // can never be durable
    plan.bytes += it.info.record_bytes();
    plan.items.push_back(std::move(it));
    plan.item_of.push_back(i);
  }
  return plan;
}

Status DurableTier::Spill(const std::vector<SpillItem>& spill, const InstallFn& install) {
  MutexLock append_lock(&append_mu_);
  Plan plan = PlanSpill(spill);
  std::vector<Tombstone> evicted = EnforceQuota(plan.bytes);
  for (const Tombstone& t : evicted) index_->EnqueueDelete(t.ns, t.key, t.target_seq);
  std::vector<Tombstone> owed = TakeUnwritten();
  const size_t tombs = owed.size() + evicted.size();
  Status reclaimed = ReclaimFileSpace(plan.bytes + tombs * kBlockSize);
  std::vector<DiskTier::WriteItem> all;
  for (const Tombstone& t : owed) all.push_back(TombstoneItem(t));
  for (const Tombstone& t : evicted) all.push_back(TombstoneItem(t));
  std::move(plan.items.begin(), plan.items.end(), std::back_inserter(all));
  std::vector<DiskLocation> locs;
  Status st = !reclaimed.ok() ? reclaimed : all.empty() ? Status::Ok() : disk_->Append(all, &locs);
  if (!st.ok()) {  // the quota's evictions stand; their tombstones wait for the next write
    std::move(evicted.begin(), evicted.end(), std::back_inserter(owed));
    KeepUnwritten(std::move(owed));
  }
  std::vector<SpillOutcome> outcome(spill.size());
  for (auto& o : outcome) o.too_big = true;
  for (size_t k = 0; k < plan.item_of.size(); ++k) {
    outcome[plan.item_of[k]].too_big = false;
    if (st.ok()) outcome[plan.item_of[k]].loc = locs[tombs + k];
  }
  install(st, outcome);
  // After the rows install enqueued: the index commits in order, so it never records the
  // segment as indexed past records whose rows it has not committed.
  if (st.ok() && !locs.empty())
    index_->EnqueueTail(locs.back().segment, locs.back().offset + locs.back().record_bytes());
  return st;
}

// Asks the owner to give up the coldest disk copies until live record bytes plus `incoming`
// fit the quota. Returns their tombstones, which the caller writes in its own append.
std::vector<Tombstone> DurableTier::EnforceQuota(uint64_t incoming) {
  std::vector<Tombstone> tombs;
  while (OverQuota(incoming) && owner_->YieldForQuota(incoming, &tombs)) {
  }
  acct_.Evicted(tombs.size());
  return tombs;
}

// ---------------------------------------------------------------- compaction

// The quota bounds the segment files, not only live bytes: while the files plus what is
// about to be written exceed it, the segment with the most dead bytes is compacted (the active
// one is sealed first). Runs before an append; an error means the append would overrun the
// quota and must not happen (a full disk once let every spill do so, each failed compaction
// leaving its copies behind: the soak test saw 250 MiB of files under a 128 MiB quota).
Status DurableTier::ReclaimFileSpace(uint64_t incoming) {
  // At most a few segments per append: with live bytes close to the quota each compaction
  // frees little, and 256 of them held the append lock (and a Flush behind it) for minutes.
  uint32_t newest = 0;  // segments written by this call's compactions are not candidates
  for (int round = 0; round < 8; ++round) {
    if (disk_->FileBytesAfter(incoming) <= opt_.quota_bytes) return Status::Ok();
    std::vector<uint32_t> segs = disk_->Segments();
    if (segs.empty()) break;
    if (round == 0) newest = segs.back();
    auto victim = MostDead(Uses(segs), newest);
    if (!victim) return Status::Ok();  // nothing dead: live bytes fit (EnforceQuota)
    const uint32_t best = victim->id;
    // Compaction copies the segment's live records before it frees anything. Without room
    // for them it cannot succeed, and a try that fails half way leaves the copies behind:
    // on a full disk each retry made the files larger (found by the soak test).
    const uint64_t live = victim->live;
    const uint64_t needed = live > 0 ? live + (1ull << 20) : 0;  // a dead one is only deleted
    auto free_bytes = env_->FreeBytes(dir_);
    if (free_bytes.ok() && *free_bytes < needed)
      return Status::NoSpace("the disk quota can only be kept by compacting, which needs " +
                             std::to_string(needed) + " bytes free where " + dir_ +
                             " lives; free disk space");
    if (best == disk_->active_segment()) disk_->SealActive();
    Status st = CompactSegment(best, best == segs.front());
    if (!st.ok()) {
      if (compaction_warnings_.Allow())
        spdlog::warn("compaction to keep the disk quota failed: {}", st.ToString());
      return st.IsNoSpace()
                 ? st
                 : Status::IOError("compaction to keep the disk quota failed: " + st.message());
    }
  }
  if (disk_->FileBytesAfter(incoming) <= opt_.quota_bytes) return Status::Ok();
  return Status::Busy("the disk quota is being reclaimed by compaction; the write is retried");
}

void DurableTier::MaybeCompact() {
  uint64_t files = disk_->file_bytes();
  const uint64_t live = acct_.live_bytes();
  // Compact once dead bytes exceed a segment's worth and half of what is live.
  if (files > live + opt_.segment_bytes && files - live > live / 2) {
    Status st = Compact(opt_.compact_live_ratio);
    if (!st.ok()) spdlog::warn("background compaction failed: {}", st.ToString());
  }
}

Status DurableTier::Compact(double threshold) {
  EC_RETURN_IF_ERROR(CheckWritable());
  MutexLock append_lock(&append_mu_);
  const std::vector<uint32_t> segs = disk_->Segments();
  for (uint32_t seg : BelowLiveRatio(Uses(segs), disk_->active_segment(), threshold))
    EC_RETURN_IF_ERROR(CompactSegment(seg, seg == segs.front()));
  return Status::Ok();
}

std::vector<SegmentUse> DurableTier::Uses(const std::vector<uint32_t>& segs) {
  std::vector<std::pair<uint32_t, uint64_t>> sizes;
  for (uint32_t seg : segs) sizes.emplace_back(seg, disk_->SegmentSize(seg));
  return acct_.Uses(sizes);
}

// Moves a segment's live records and still-needed tombstones to the tail, then deletes it.
Status DurableTier::CompactSegment(uint32_t seg, bool oldest) {
  std::vector<RecordInfo> tombs;
  std::vector<IndexRow> live = owner_->RecordsIn(seg);
  if (!oldest) {
    // A tombstone lives while the segment holding the record it kills does. Copying every
    // tombstone forward made a segment of them that compaction copied again and again,
    // freeing nothing (a SIGHUP flush waited behind that for minutes in the soak test).
    const std::vector<uint32_t> segs = disk_->Segments();
    auto needed = [&](const RecordInfo& t) {
      if (t.hides_segment == 0) return true;  // not known: kept until it is in the oldest
      return t.hides_segment != seg &&
             std::binary_search(segs.begin(), segs.end(), t.hides_segment);
    };
    auto scan = disk_->Scan(seg, 0, false, [&](const RecordInfo& info, const DiskLocation&, bool) {
      if (info.tombstone() && needed(info)) tombs.push_back(info);
    });
    if (!scan.ok()) return scan.status();
  }
  EC_RETURN_IF_ERROR(MoveRecords(live, tombs));
  index_->EnqueueDropSegment(seg);
  EC_RETURN_IF_ERROR(index_->Flush());
  EC_RETURN_IF_ERROR(disk_->DropSegment(seg));
  acct_.Compacted(seg);
  return Status::Ok();
}

// Live records move in batches of up to kAppendBatchBytes, one append (one fdatasync) each;
// the tombstones ride in the last batch.
Status DurableTier::MoveRecords(std::vector<IndexRow>& live, std::vector<RecordInfo>& tombs) {
  size_t next = 0;
  do {
    std::vector<AlignedBuffer> payloads;
    std::vector<DiskTier::WriteItem> items;
    std::vector<size_t> moved;  // index into live of each record item
    uint64_t bytes = 0;
    for (; next < live.size() && bytes < kAppendBatchBytes; ++next) {
      const IndexRow& row = live[next];
      AlignedBuffer stored(row.loc.stored_len);
      Status st = disk_->ReadStored(row.loc, stored.data());
      if (st.ok() && row.loc.codec == Codec::kNone &&
          PayloadChecksum(stored.data(), row.bytes) != row.checksum)
        st = Status::Corruption("checksum mismatch during compaction");
      if (st.IsCorruption()) {
        owner_->RecordCorrupt(row, row.loc, st);
        continue;
      }
      EC_RETURN_IF_ERROR(st);
      items.push_back({RecordInfo::Of(row, row.loc), stored.data()});
      payloads.push_back(std::move(stored));
      moved.push_back(next);
      bytes += row.loc.record_bytes();
    }
    if (next >= live.size())
      for (RecordInfo& t : tombs) items.push_back({std::move(t), nullptr});
    if (items.empty()) break;
    std::vector<DiskLocation> out;
    EC_RETURN_IF_ERROR(disk_->Append(items, &out));
    for (size_t k = 0; k < moved.size(); ++k)
      owner_->Relocate(live[moved[k]], live[moved[k]].loc, out[k]);
    index_->EnqueueTail(out.back().segment, out.back().offset + out.back().record_bytes());
  } while (next < live.size());
  return Status::Ok();
}

}  // namespace ecstore
