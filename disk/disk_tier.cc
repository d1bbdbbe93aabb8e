#include "disk/disk_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "base/mutex.h"
#include "disk/codec.h"

namespace ecstore {

namespace {
bool ParseSegmentName(const std::string& name, uint32_t* id) {
  unsigned v = 0;
  char tail[8] = {0};
  if (std::sscanf(name.c_str(), "seg-%08u.%4s", &v, tail) != 2 || std::strcmp(tail, "ecs") != 0)
    return false;
  *id = v;
  return true;
}
}  // namespace

std::string DiskTier::SegmentPath(uint32_t id) const {
  char name[32];
  std::snprintf(name, sizeof(name), "seg-%08u.ecs", id);
  return dir_ + "/" + name;
}

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const std::string& dir, Env* env,
                                                 const DiskOptions& options) {
  EC_RETURN_IF_ERROR(env->CreateDirs(dir));
  std::unique_ptr<DiskTier> t(new DiskTier(dir, env, options));
  auto io = IoService::Start(env, options.queue_depth, options.io_chunk_bytes,
                             options.followed_read_window);
  if (!io.ok()) return io.status();
  t->io_ = std::move(io).value();
  auto names = env->ListDir(dir);
  if (!names.ok()) return names.status();
  MutexLock l(&t->mu_);  // no other thread sees t yet; the analysis wants it held
  for (const std::string& n : *names) {
    uint32_t id;
    if (!ParseSegmentName(n, &id)) continue;
    auto seg = t->OpenSegment(id, false);
    if (!seg.ok()) return seg.status();
    t->segments_[id] = *seg;
    t->active_ = std::max(t->active_, id);
  }
  // Appends go to a fresh segment after every open: an old tail may be torn.
  t->sealed_ = true;
  return t;
}

DiskTier::~DiskTier() {
  io_.reset();
  MutexLock append_lock(&append_mu_);
  SealActiveLocked();  // a clean close gives the preallocated space back
}

// O_DIRECT appends that extend a file are the slow kind on ext4 (each waits for the inode's
// size update; they do not overlap): fio, 1 MiB x QD32, writes about half as fast into a
// growing file as into a preallocated one. So a segment's blocks are allocated
// when it becomes the append target, and what it did not use is given back when it stops
// being one (Release). A crash leaves the zeros past the last record; the recovery scan finds
// nothing valid there and cuts them off like a torn tail.
// Not on a nearly full disk: a preallocation that fails takes every free block until it is
// given back, and the index's commit beside it then fails for want of space.
void DiskTier::Preallocate(Segment& seg) {
  if (seg.size >= opt_.segment_bytes) return;
  auto free_bytes = env_->FreeBytes(dir_);
  Status st = free_bytes.ok() && *free_bytes < 2 * (opt_.segment_bytes - seg.size)
                  ? Status::NoSpace(std::to_string(*free_bytes) + " bytes free")
                  : env_->Preallocate(seg.fd.get(), opt_.segment_bytes);
  if (st.ok()) seg.preallocated = opt_.segment_bytes;
  if (!st.ok() && !prealloc_warned_.exchange(true))
    spdlog::info("{}: segments are not preallocated ({}); appends extend them as they go", dir_,
                 st.ToString());
}

void DiskTier::Release(Segment& seg) {
  auto len = env_->FileSize(seg.fd.get());
  if (len.ok() && *len > seg.size) env_->Truncate(seg.fd.get(), seg.size);
  seg.preallocated = 0;
}

Result<std::shared_ptr<DiskTier::Segment>> DiskTier::OpenSegment(uint32_t id, bool create) {
  auto seg = std::make_shared<Segment>();
  seg->id = id;
  seg->path = SegmentPath(id);
  int flags = O_RDWR | O_DIRECT | (create ? O_CREAT | O_EXCL : 0);
  auto fd = env_->OpenFile(seg->path, flags, opt_.file_mode);
  if (!fd.ok() && create) {
    // Some filesystems (tmpfs, several FUSE ones) refuse O_DIRECT: fall back to buffered
    // I/O rather than refuse to store. The page cache then holds spilled entries too.
    env_->RemoveFile(seg->path);
    fd = env_->OpenFile(seg->path, flags & ~O_DIRECT, opt_.file_mode);
    if (fd.ok()) spdlog::warn("{}: O_DIRECT is not supported here; using buffered I/O", dir_);
  } else if (!fd.ok()) {
    fd = env_->OpenFile(seg->path, flags & ~O_DIRECT, opt_.file_mode);
  }
  if (!fd.ok()) return fd.status();
  seg->fd = std::move(fd).value();
  auto size = env_->FileSize(seg->fd.get());
  if (!size.ok()) return size.status();
  seg->size = *size;
  return seg;
}

std::shared_ptr<DiskTier::Segment> DiskTier::Find(uint32_t id) const {
  MutexLock l(&mu_);
  auto it = segments_.find(id);
  return it == segments_.end() ? nullptr : it->second;
}

Status DiskTier::Append(const std::vector<WriteItem>& items, std::vector<DiskLocation>* locs) {
  MutexLock append_lock(&append_mu_);
  locs->clear();
  uint64_t total = 0;
  for (const auto& it : items) total += it.info.record_bytes();
  std::shared_ptr<Segment> seg, prev;
  {
    MutexLock l(&mu_);
    auto cur = segments_.find(active_);
    if (!sealed_ && cur != segments_.end() &&
        (cur->second->size == 0 || cur->second->size + total <= opt_.segment_bytes)) {
      seg = cur->second;
    } else if (cur != segments_.end()) {
      prev = cur->second;
    }
  }
  if (!seg) {
    if (prev) Release(*prev);
    uint32_t id;
    {
      MutexLock l(&mu_);
      id = active_ + 1;
    }
    auto created = OpenSegment(id, true);
    if (!created.ok()) return created.status();
    seg = *created;
    Preallocate(*seg);
    MutexLock l(&mu_);
    segments_[id] = seg;
    active_ = id;
    sealed_ = false;
  }
  const uint64_t start = seg->size;
  AlignedBuffer headers(kBlockSize * items.size());
  std::vector<IoRequest> batch;
  uint64_t off = start;
  for (size_t i = 0; i < items.size(); ++i) {
    const RecordInfo& info = items[i].info;
    uint8_t* h = headers.data() + i * kBlockSize;
    EncodeHeader(info, h);
    batch.push_back({IoOp::kWrite, seg->fd.get(), h, kBlockSize, off, 0});
    if (info.stored_len > 0)
      batch.push_back({IoOp::kWrite, seg->fd.get(), const_cast<uint8_t*>(items[i].payload),
                       RoundUpBlock(info.stored_len), off + kBlockSize, 0});
    locs->push_back({seg->id, off, info.stored_len, info.codec});
    off += info.record_bytes();
  }
  batch.push_back({IoOp::kSync, seg->fd.get(), nullptr, 0, 0, 0});
  Status st = io_->Run(batch);
  if (!st.ok()) {
    // Cut the partial batch off so the segment ends on a whole record, and keep appending
    // to it: sealing it instead left one more small segment (and descriptor) per failed
    // spill -- 200 of them after a few seconds of a full disk, found by the soak test. Only
    // a segment that cannot be cut back is sealed.
    if (!env_->Truncate(seg->fd.get(), start).ok()) SealActiveLocked();
    locs->clear();
    return st;
  }
  seg->size = off;
  return Status::Ok();
}

Status DiskTier::ReadStored(const DiskLocation& loc, uint8_t* dst, Result<RecordInfo>* header,
                            PayloadHasher* hash) {
  StoredRead one{loc, dst, Status::NotFound("not read"), hash};
  std::vector<StoredRead> reads;
  reads.push_back(std::move(one));
  EC_RETURN_IF_ERROR(ReadMany(reads, header != nullptr));
  if (header) *header = std::move(reads[0].header);
  return Status::Ok();
}

Status DiskTier::ReadStoredMany(std::vector<StoredRead>& reads, const IoMeanwhile& meanwhile) {
  return ReadMany(reads, true, meanwhile);
}

// One batch for every read: each record's header block (with_headers) and stored payload, in
// flight together; a payload with a hasher is fed to it as its pieces land.
Status DiskTier::ReadMany(std::vector<StoredRead>& reads, bool with_headers,
                          const IoMeanwhile& meanwhile) {
  std::vector<IoRequest> batch;
  std::vector<size_t> payload_of;  // per request: its read, or SIZE_MAX for a header
  AlignedBuffer headers(with_headers ? reads.size() * kBlockSize : 0);
  std::vector<std::shared_ptr<Segment>> keep;  // open while the batch runs
  bool watching = false;                       // a hash or a tee wants the pieces as they land
  for (size_t i = 0; i < reads.size(); ++i) {
    auto seg = Find(reads[i].loc.segment);
    if (!seg)
      return Status::NotFound("segment " + std::to_string(reads[i].loc.segment) + " is gone");
    const DiskLocation& loc = reads[i].loc;
    if (with_headers) {
      batch.push_back(
          {IoOp::kRead, seg->fd.get(), headers.data() + i * kBlockSize, kBlockSize, loc.offset, 0});
      payload_of.push_back(SIZE_MAX);
    }
    if (loc.stored_len > 0) {
      batch.push_back({IoOp::kRead, seg->fd.get(), reads[i].dst, RoundUpBlock(loc.stored_len),
                       loc.offset + kBlockSize, 0});
      payload_of.push_back(i);
      watching |= reads[i].hash != nullptr || reads[i].tee != nullptr || reads[i].landed;
    }
    keep.push_back(std::move(seg));
  }
  if (batch.empty()) return Status::Ok();
  IoProgress progress;
  if (watching)
    progress = [&](size_t req, uint64_t from, uint64_t n) {
      if (payload_of[req] == SIZE_MAX) return;
      StoredRead& r = reads[payload_of[req]];
      if (r.hash) r.hash->Update(r.dst + from, n);
      if (r.tee && from < r.tee_len)
        std::memcpy(r.tee + from, r.dst + from, std::min(n, r.tee_len - from));
      if (r.landed) r.landed(from + n);
    };
  EC_RETURN_IF_ERROR(io_->Run(batch, progress, meanwhile));
  if (with_headers)
    for (size_t i = 0; i < reads.size(); ++i)
      reads[i].header = DecodeHeader(headers.data() + i * kBlockSize);
  return Status::Ok();
}

Result<RecordInfo> DiskTier::ReadHeader(uint32_t segment, uint64_t offset) {
  auto seg = Find(segment);
  if (!seg) return Status::NotFound("segment " + std::to_string(segment) + " is gone");
  AlignedBuffer h(kBlockSize);
  EC_RETURN_IF_ERROR(io_->Run({{IoOp::kRead, seg->fd.get(), h.data(), kBlockSize, offset, 0}}));
  return DecodeHeader(h.data());
}

Result<DiskTier::ScanResult> DiskTier::Scan(uint32_t segment, uint64_t from, bool verify_payload,
                                            const ScanFn& fn) {
  auto seg = Find(segment);
  if (!seg) return Status::NotFound("segment " + std::to_string(segment) + " is gone");
  const uint64_t size = seg->size;  // the file's length at open; then the appends' end
  ScanResult res;
  res.end = from;
  AlignedBuffer payload;
  while (res.end + kBlockSize <= size) {
    auto info = ReadHeader(segment, res.end);
    if (!info.ok() || res.end + info->record_bytes() > size) {
      // A damaged header mid-file is not a torn tail: go on at the next whole record.
      auto next = FindNextHeader(*seg, res.end + kBlockSize, size);
      if (!next.ok()) return next.status();
      if (*next == 0) {
        res.torn_tail = true;
        break;
      }
      spdlog::error(
          "segment {}: no valid record header at offset {}; skipped {} bytes to the "
          "next valid record at {}",
          segment, res.end, *next - res.end, *next);
      ++res.bad_headers;
      res.skipped_bytes += *next - res.end;
      res.end = *next;
      continue;
    }
    DiskLocation loc{segment, res.end, info->stored_len, info->codec};
    bool good = true;
    if (verify_payload && !info->tombstone() && info->stored_len > 0) {
      if (payload.size() < RoundUpBlock(info->stored_len))
        payload = AlignedBuffer(info->stored_len);
      good = ReadStored(loc, payload.data()).ok();
      if (good && info->codec == Codec::kNone)
        good = PayloadChecksum(payload.data(), info->raw_len) == info->checksum;
      if (good && info->codec != Codec::kNone) {
        AlignedBuffer raw(info->raw_len);
        good = DecompressPayload(info->codec, payload.data(), info->stored_len, raw.data(),
                                 info->raw_len, DTypeSize(info->meta.dtype))
                   .ok() &&
               PayloadChecksum(raw.data(), info->raw_len) == info->checksum;
      }
      if (!good) ++res.corrupt;
    }
    fn(*info, loc, good);
    res.end += info->record_bytes();
    ++res.records;
  }
  if (res.end < size) res.torn_tail = true;
  return res;
}

// The offset of the first block at or after `from` that holds a valid header whose record
// fits in the file, or 0 when there is none (what follows is a torn tail). Reads 1 MiB at a
// time; this runs only after a damaged header.
Result<uint64_t> DiskTier::FindNextHeader(const Segment& seg, uint64_t from, uint64_t size) {
  constexpr uint64_t kChunk = 1ull << 20;
  AlignedBuffer buf(kChunk);
  for (uint64_t at = from; at + kBlockSize <= size;) {
    uint64_t n = std::min(kChunk, (size - at) / kBlockSize * kBlockSize);
    EC_RETURN_IF_ERROR(io_->Run({{IoOp::kRead, seg.fd.get(), buf.data(), n, at, 0}}));
    for (uint64_t b = 0; b < n; b += kBlockSize) {
      auto info = DecodeHeader(buf.data() + b);
      if (info.ok() && at + b + info->record_bytes() <= size) return at + b;
    }
    at += n;
  }
  return uint64_t{0};
}

std::vector<uint32_t> DiskTier::Segments() const {
  MutexLock l(&mu_);
  std::vector<uint32_t> ids;
  for (const auto& [id, _] : segments_) ids.push_back(id);
  return ids;
}

uint32_t DiskTier::active_segment() const {
  MutexLock l(&mu_);
  return sealed_ ? 0 : active_;
}

uint64_t DiskTier::SegmentSize(uint32_t id) const {
  auto seg = Find(id);
  return seg ? seg->size.load() : 0;
}

uint64_t DiskTier::file_bytes() const {
  MutexLock l(&mu_);
  uint64_t n = 0;
  for (const auto& [_, s] : segments_) n += s->size;
  return n;
}

uint64_t DiskTier::FileBytesAfter(uint64_t incoming) const {
  MutexLock l(&mu_);
  uint64_t now = 0;
  for (const auto& [_, s] : segments_) now += std::max(s->size.load(), s->preallocated.load());
  auto cur = segments_.find(active_);
  if (cur == segments_.end()) return now + std::max(incoming, opt_.segment_bytes);
  const Segment& s = *cur->second;
  const uint64_t taken = std::max(s.size.load(), s.preallocated.load());
  if (!sealed_ && (s.size == 0 || s.size + incoming <= opt_.segment_bytes))
    return now + (s.size + incoming > taken ? s.size + incoming - taken : 0);
  return now - (taken - s.size) + std::max(incoming, opt_.segment_bytes);
}

Status DiskTier::DropSegment(uint32_t id) {
  std::shared_ptr<Segment> seg;
  {
    MutexLock l(&mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) return Status::Ok();
    seg = it->second;
    segments_.erase(it);
    if (id == active_) sealed_ = true;
  }
  return env_->RemoveFile(seg->path);
}

Status DiskTier::TruncateSegment(uint32_t id, uint64_t size) {
  auto seg = Find(id);
  if (!seg) return Status::Ok();
  EC_RETURN_IF_ERROR(env_->Truncate(seg->fd.get(), size));
  seg->size = size;
  return env_->SyncData(seg->fd.get());
}

void DiskTier::ReopenTail() {
  MutexLock append_lock(&append_mu_);
  std::shared_ptr<Segment> tail;
  {
    MutexLock l(&mu_);
    auto it = segments_.find(active_);
    if (it != segments_.end() && it->second->size < opt_.segment_bytes &&
        it->second->size % kBlockSize == 0) {
      sealed_ = false;
      tail = it->second;
    }
  }
  if (tail) Preallocate(*tail);
}

// Under append_mu_: giving back the preallocated space truncates the file to the appended
// bytes, which must not race an append that wrote past them and has not yet said so.
void DiskTier::SealActive() {
  MutexLock append_lock(&append_mu_);
  SealActiveLocked();
}

void DiskTier::SealActiveLocked() {
  std::shared_ptr<Segment> was;
  {
    MutexLock l(&mu_);
    if (!sealed_)
      if (auto it = segments_.find(active_); it != segments_.end()) was = it->second;
    sealed_ = true;
  }
  if (was) Release(*was);
}

}  // namespace ecstore
