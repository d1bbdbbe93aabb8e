// DiskTier: append-only segment files of self-describing records, written and read with
// O_DIRECT through the io_uring IoService at queue depth.
// Thread rules: all methods are thread-safe. Appends are serialized (one segment tail);
// reads run concurrently with appends and with each other. A dropped segment's file is
// unlinked at once, but readers that already hold it finish on the open descriptor.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/mutex.h"
#include "disk/io_queue.h"
#include "disk/record.h"

namespace ecstore {

struct DiskOptions {
  uint64_t segment_bytes = 256ull << 20;
  unsigned file_mode = 0600;  // of new segment files
  unsigned queue_depth = 32;
  uint64_t io_chunk_bytes = 1ull << 20;
  unsigned followed_read_window = 12;  // IoService::Start's followed_window
};

class DiskTier {
 public:
  static Result<std::unique_ptr<DiskTier>> Open(const std::string& dir, Env* env,
                                                const DiskOptions& options);
  ~DiskTier();

  struct WriteItem {
    RecordInfo info;
    const uint8_t* payload = nullptr;  // aligned, readable up to RoundUpBlock(stored_len)
  };
  // Appends the records and makes them durable (fdatasync) before returning their locations.
  // On failure nothing of the batch remains in the segment (the tail is cut back).
  Status Append(const std::vector<WriteItem>& items, std::vector<DiskLocation>* locations);
  // Reads a record's stored payload into dst (aligned, >= RoundUpBlock(stored_len) bytes);
  // with `header`, the record's header too, in the same batch, decoded into *header; with
  // `hash`, the payload is fed to it as its pieces land, overlapping the checksum with the
  // read (meaningful for an uncompressed record, whose stored bytes are the payload).
  Status ReadStored(const DiskLocation& loc, uint8_t* dst, Result<RecordInfo>* header = nullptr,
                    PayloadHasher* hash = nullptr);
  Result<RecordInfo> ReadHeader(uint32_t segment, uint64_t offset);
  // Several records' headers and stored payloads in one batch, all in flight together
  // (dst: aligned, >= RoundUpBlock(stored_len) each). A failure fails the batch.
  struct StoredRead {
    DiskLocation loc;
    uint8_t* dst = nullptr;
    Result<RecordInfo> header = Status::NotFound("not read");
    PayloadHasher* hash = nullptr;  // as ReadStored's
    // Where the payload's first tee_len bytes are copied too, piece by piece as they land
    // (the copy overlaps the rest of the batch's reads). Meaningful, as `hash`, for an
    // uncompressed record; what it holds is only checked once the whole read is.
    uint8_t* tee = nullptr;
    uint64_t tee_len = 0;
    // Told, on the same thread, how much of the payload has landed (after `hash` took it):
    // [0, landed) of dst, in order, each call a larger figure. Unchecked, as the tee.
    std::function<void(uint64_t landed)> landed = nullptr;
  };
  Status ReadStoredMany(std::vector<StoredRead>& reads, const IoMeanwhile& meanwhile = nullptr);

  // payload_ok is false when verify_payload found a checksum mismatch (the header was sound,
  // so the scan goes on to the next record).
  using ScanFn = std::function<void(const RecordInfo&, const DiskLocation&, bool payload_ok)>;
  struct ScanResult {
    uint64_t end = 0;  // offset after the last valid record
    uint64_t records = 0;
    uint64_t corrupt = 0;        // payloads failing verify_payload
    uint64_t bad_headers = 0;    // damaged headers skipped over
    uint64_t skipped_bytes = 0;  // bytes skipped with them
    bool torn_tail = false;      // something invalid follows `end` and nothing valid after it
  };
  // Walks records from `from`. A damaged header mid-file is skipped: the walk resynchronises
  // on the next 4 KiB block holding a valid header. Only when nothing valid follows is the
  // rest a torn tail. With verify_payload each payload is read and its checksum checked.
  Result<ScanResult> Scan(uint32_t segment, uint64_t from, bool verify_payload, const ScanFn& fn);

  std::vector<uint32_t> Segments() const;
  uint32_t active_segment() const;
  uint64_t SegmentSize(uint32_t segment) const;
  uint64_t file_bytes() const;  // the bytes appended to the segment files
  // What the segment files will take (preallocated blocks included) after an Append of
  // `incoming` record bytes: one that starts a new segment gives back the old one's unused
  // blocks and preallocates the new one. The disk quota bounds this.
  uint64_t FileBytesAfter(uint64_t incoming) const;
  Status DropSegment(uint32_t segment);
  Status TruncateSegment(uint32_t segment, uint64_t size);
  // The next Append starts a new segment (used after an error, and by compaction).
  void SealActive();
  // After Open every append goes to a new segment, since the old tail may be torn. Once
  // recovery has checked the last segment (and cut a torn tail), this lets appends go on
  // at its end instead: one-shot processes then do not leave a file each.
  void ReopenTail();
  std::string SegmentPath(uint32_t segment) const;

 private:
  struct Segment {
    uint32_t id;
    std::string path;
    UniqueFd fd;
    // Written by the appender (under append_mu_), read by stats and compaction without it.
    std::atomic<uint64_t> size{0};
    // The file's length while it is preallocated as the append target (0 otherwise): its
    // blocks are taken, so the quota counts them.
    std::atomic<uint64_t> preallocated{0};
  };
  DiskTier(std::string dir, Env* env, DiskOptions o) : dir_(std::move(dir)), env_(env), opt_(o) {}
  Result<std::shared_ptr<Segment>> OpenSegment(uint32_t id, bool create);
  std::shared_ptr<Segment> Find(uint32_t id) const;
  Result<uint64_t> FindNextHeader(const Segment& seg, uint64_t from, uint64_t size);
  Status ReadMany(std::vector<StoredRead>& reads, bool with_headers,
                  const IoMeanwhile& meanwhile = nullptr);
  // Both under append_mu_ (Release truncates the file to the bytes appended so far).
  void Preallocate(Segment& seg) REQUIRES(append_mu_);  // its blocks, up to segment_bytes
  void Release(Segment& seg) REQUIRES(append_mu_);      // gives back what it did not use
  void SealActiveLocked() REQUIRES(append_mu_);

  std::string dir_;
  Env* env_;
  DiskOptions opt_;
  std::unique_ptr<IoService> io_;
  Mutex append_mu_;  // serializes appends (one tail)
  mutable Mutex mu_ ACQUIRED_AFTER(append_mu_);
  std::map<uint32_t, std::shared_ptr<Segment>> segments_ GUARDED_BY(mu_);
  uint32_t active_ GUARDED_BY(mu_) = 0;
  bool sealed_ GUARDED_BY(mu_) = false;
  std::atomic<bool> prealloc_warned_{false};
};

}  // namespace ecstore
