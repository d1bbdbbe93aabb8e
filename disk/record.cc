#include "disk/record.h"

#include <xxhash.h>
#ifdef EC_XXH3_DISPATCH
#include <xxh_x86dispatch.h>  // XXH3_64bits* -> the library's AVX2/AVX-512 dispatch
#endif

#include <algorithm>
#include <cstring>

namespace ecstore {
namespace {

constexpr char kMagic[8] = {'E', 'C', 'S', 'R', 'E', 'C', 0, 1};
constexpr uint32_t kVersion = 1;
constexpr size_t kNamesAt = 160;
constexpr size_t kChecksumAt = kBlockSize - 8;

template <typename T>
void Put(uint8_t* b, size_t at, T v) {
  std::memcpy(b + at, &v, sizeof(T));
}
template <typename T>
T Get(const uint8_t* b, size_t at) {
  T v;
  std::memcpy(&v, b + at, sizeof(T));
  return v;
}

}  // namespace

const char* CodecName(Codec c) {
  switch (c) {
    case Codec::kNone:
      return "none";
    case Codec::kLz4:
      return "lz4";
    case Codec::kLz4BytePlanes:
      return "lz4-planes";
  }
  return "unknown";
}

uint64_t PayloadChecksum(const uint8_t* data, uint64_t len) { return XXH3_64bits(data, len); }

struct PayloadHasher::State {
  State() : xxh(XXH3_createState()) {}
  ~State() { XXH3_freeState(xxh); }
  XXH3_state_t* xxh;
};

PayloadHasher::PayloadHasher(uint64_t len) : state_(std::make_unique<State>()), len_(len) {
  XXH3_64bits_reset(state_->xxh);
}
PayloadHasher::PayloadHasher(PayloadHasher&&) noexcept = default;
PayloadHasher& PayloadHasher::operator=(PayloadHasher&&) noexcept = default;
PayloadHasher::~PayloadHasher() = default;

void PayloadHasher::Update(const uint8_t* data, uint64_t n) {
  n = std::min(n, len_ - fed_);
  if (n == 0) return;
  XXH3_64bits_update(state_->xxh, data, n);
  fed_ += n;
}

uint64_t PayloadHasher::Digest() const { return XXH3_64bits_digest(state_->xxh); }

RecordInfo RecordInfo::Of(const EntryRecord& e, const DiskLocation& loc) {
  RecordInfo r;
  r.seq = e.seq;
  r.ns = e.ns;
  r.key = e.key;
  r.meta = e.meta;
  r.raw_len = e.bytes;
  r.stored_len = loc.stored_len;
  r.codec = loc.codec;
  r.checksum = e.checksum;
  r.created_us = e.created_us;
  return r;
}

EntryRecord RecordInfo::entry() const {
  EntryRecord e;
  e.ns = ns;
  e.key = key;
  e.seq = seq;
  e.meta = meta;
  e.bytes = raw_len;
  e.checksum = checksum;
  e.created_us = e.last_access_us = created_us;
  return e;
}

void EncodeHeader(const RecordInfo& r, uint8_t* b) {
  std::memset(b, 0, kBlockSize);
  std::memcpy(b, kMagic, 8);
  Put<uint32_t>(b, 8, kVersion);
  Put<uint32_t>(b, 12, r.flags);
  Put<uint64_t>(b, 16, r.seq);
  Put<uint64_t>(b, 24, r.raw_len);
  Put<uint64_t>(b, 32, r.stored_len);
  Put<uint64_t>(b, 40, r.checksum);
  Put<uint64_t>(b, 48, r.created_us);
  Put<uint32_t>(b, 56, static_cast<uint32_t>(r.codec));
  Put<uint32_t>(b, 60, static_cast<uint32_t>(r.meta.dtype));
  Put<uint32_t>(b, 64, static_cast<uint32_t>(r.meta.shape.size()));
  Put<uint32_t>(b, 68, static_cast<uint32_t>(r.key.size()));
  Put<uint32_t>(b, 72, static_cast<uint32_t>(r.ns.size()));
  Put<uint32_t>(b, 76, r.hides_segment);
  Put<double>(b, 80, r.meta.recompute_cost);
  for (size_t i = 0; i < r.meta.shape.size() && i < TensorMeta::kMaxDims; ++i)
    Put<int64_t>(b, 88 + 8 * i, r.meta.shape[i]);
  Put<uint64_t>(b, 152, r.target_seq);
  std::memcpy(b + kNamesAt, r.ns.data(), r.ns.size());
  std::memcpy(b + kNamesAt + r.ns.size(), r.key.data(), r.key.size());
  Put<uint64_t>(b, kChecksumAt, XXH3_64bits(b, kChecksumAt));
}

Result<RecordInfo> DecodeHeader(const uint8_t* b) {
  if (std::memcmp(b, kMagic, 8) != 0) return Status::Corruption("bad record magic");
  if (Get<uint64_t>(b, kChecksumAt) != XXH3_64bits(b, kChecksumAt))
    return Status::Corruption("record header checksum mismatch");
  if (Get<uint32_t>(b, 8) != kVersion)
    return Status::Corruption("record version " + std::to_string(Get<uint32_t>(b, 8)) +
                              " is not supported by this build");
  RecordInfo r;
  r.flags = Get<uint32_t>(b, 12);
  r.seq = Get<uint64_t>(b, 16);
  r.raw_len = Get<uint64_t>(b, 24);
  r.stored_len = Get<uint64_t>(b, 32);
  r.checksum = Get<uint64_t>(b, 40);
  r.created_us = Get<uint64_t>(b, 48);
  r.codec = static_cast<Codec>(Get<uint32_t>(b, 56));
  uint32_t dtype = Get<uint32_t>(b, 60);
  uint32_t ndim = Get<uint32_t>(b, 64);
  uint32_t key_len = Get<uint32_t>(b, 68);
  uint32_t ns_len = Get<uint32_t>(b, 72);
  r.hides_segment = Get<uint32_t>(b, 76);
  if (ndim > TensorMeta::kMaxDims || key_len > kMaxKeyBytes || ns_len > kMaxNamespaceBytes ||
      static_cast<uint32_t>(r.codec) > 2 || (!r.tombstone() && !IsKnownDType(dtype)))
    return Status::Corruption("record header has out-of-range fields");
  r.meta.dtype = static_cast<DType>(dtype);
  r.meta.recompute_cost = Get<double>(b, 80);
  for (uint32_t i = 0; i < ndim; ++i) r.meta.shape.push_back(Get<int64_t>(b, 88 + 8 * i));
  r.target_seq = Get<uint64_t>(b, 152);
  r.ns.assign(reinterpret_cast<const char*>(b + kNamesAt), ns_len);
  r.key.assign(reinterpret_cast<const char*>(b + kNamesAt + ns_len), key_len);
  return r;
}

}  // namespace ecstore
