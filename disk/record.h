// The on-disk record: one 4 KiB self-describing header block, then the payload padded to
// 4 KiB. The header alone lets the index be rebuilt from the segment files.
//
// Header layout (little endian):
//   0  magic "ECSREC\0\1"     8  version u32        12 flags u32 (1 = tombstone)
//  16  seq u64               24  raw_len u64       32 stored_len u64
//  40  checksum u64 (xxh3 of the raw payload)      48 created_us u64
//  56  codec u32             60  dtype u32         64 ndim u32   68 key_len u32
//  72  ns_len u32            76  hides_segment u32 80 recompute_cost f64
//  88  shape i64[8]         152  target_seq u64 (tombstones: versions up to this die)
// 160  ns bytes, then key bytes                  4088 header checksum u64 (xxh3 of 0..4088)
// hides_segment (tombstones): the segment that held the record it kills; once that segment is
// gone the tombstone hides nothing and compaction drops it. 0: not known (written before the
// field existed): kept until its segment is the oldest.
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/entry_record.h"
#include "base/status.h"
#include "base/tensor_meta.h"
#include "disk/aligned_buffer.h"

namespace ecstore {

enum class Codec : uint32_t { kNone = 0, kLz4 = 1, kLz4BytePlanes = 2 };
const char* CodecName(Codec c);

// Where a record lives: its segment, the offset of its header block, and how its payload
// is stored.
struct DiskLocation {
  uint32_t segment = 0;
  uint64_t offset = 0;  // of the header block
  uint64_t stored_len = 0;
  Codec codec = Codec::kNone;
  uint64_t record_bytes() const { return kBlockSize + RoundUpBlock(stored_len); }
  bool operator==(const DiskLocation& o) const {
    return segment == o.segment && offset == o.offset;
  }
};

struct RecordInfo {
  static constexpr uint32_t kTombstone = 1;
  uint32_t flags = 0;
  uint64_t seq = 0;
  uint64_t target_seq = 0;
  uint32_t hides_segment = 0;  // tombstones: see the layout above
  std::string ns;
  std::string key;
  TensorMeta meta;
  uint64_t raw_len = 0;
  uint64_t stored_len = 0;
  uint64_t checksum = 0;
  uint64_t created_us = 0;
  Codec codec = Codec::kNone;
  bool tombstone() const { return flags & kTombstone; }
  uint64_t record_bytes() const { return kBlockSize + RoundUpBlock(stored_len); }
  // The header of an entry's record (its stored payload as `loc` says), and back: the entry
  // a record holds (never accessed yet: last access = creation).
  static RecordInfo Of(const EntryRecord& e, const DiskLocation& loc);
  EntryRecord entry() const;
};

void EncodeHeader(const RecordInfo& info, uint8_t* block /* kBlockSize bytes */);
// Corruption when the magic, version, header checksum or any field is wrong.
Result<RecordInfo> DecodeHeader(const uint8_t* block);
uint64_t PayloadChecksum(const uint8_t* data, uint64_t len);

// PayloadChecksum of a payload fed in order, piece by piece, as its reads complete, so the
// checksum overlaps the I/O instead of following it. Bytes fed past `len` (a read's block
// padding) are ignored. Digest() equals PayloadChecksum(payload, len) once complete().
class PayloadHasher {
 public:
  explicit PayloadHasher(uint64_t len);
  PayloadHasher(PayloadHasher&&) noexcept;
  PayloadHasher& operator=(PayloadHasher&&) noexcept;
  ~PayloadHasher();
  void Update(const uint8_t* data, uint64_t n);
  bool complete() const { return fed_ == len_; }
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  uint64_t len_ = 0;
  uint64_t fed_ = 0;
};

}  // namespace ecstore
