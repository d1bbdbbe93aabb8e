#include "disk/codec.h"

#include <lz4.h>

#include <vector>

namespace ecstore {
namespace {

void SplitPlanes(const uint8_t* src, uint64_t n, uint8_t* dst) {
  uint64_t half = n / 2;
  for (uint64_t i = 0; i < half; ++i) {
    dst[i] = src[2 * i];
    dst[half + i] = src[2 * i + 1];
  }
}

void JoinPlanes(const uint8_t* src, uint64_t n, uint8_t* dst) {
  uint64_t half = n / 2;
  for (uint64_t i = 0; i < half; ++i) {
    dst[2 * i] = src[i];
    dst[2 * i + 1] = src[half + i];
  }
}

}  // namespace

Codec CompressPayload(const uint8_t* raw, uint64_t raw_len, size_t elem_size, double min_saving,
                      AlignedBuffer* out, uint64_t* stored_len) {
  if (raw_len < 4096 || raw_len > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE)) return Codec::kNone;
  const uint64_t keep_below =
      static_cast<uint64_t>(static_cast<double>(raw_len) * (1 - min_saving));
  int bound = LZ4_compressBound(static_cast<int>(raw_len));
  AlignedBuffer buf(static_cast<size_t>(bound));
  Codec codec = Codec::kLz4;
  const uint8_t* src = raw;
  std::vector<uint8_t> planes;
  if (elem_size == 2 && raw_len % 2 == 0) {
    planes.resize(raw_len);
    SplitPlanes(raw, raw_len, planes.data());
    src = planes.data();
    codec = Codec::kLz4BytePlanes;
  }
  int n =
      LZ4_compress_default(reinterpret_cast<const char*>(src), reinterpret_cast<char*>(buf.data()),
                           static_cast<int>(raw_len), bound);
  if (n <= 0 || static_cast<uint64_t>(n) > keep_below) return Codec::kNone;
  *stored_len = static_cast<uint64_t>(n);
  *out = std::move(buf);
  return codec;
}

Status DecompressPayload(Codec codec, const uint8_t* stored, uint64_t stored_len, uint8_t* raw,
                         uint64_t raw_len, size_t /*elem_size*/) {
  if (codec == Codec::kNone) return Status::Ok();
  std::vector<uint8_t> planes;
  uint8_t* dst = raw;
  if (codec == Codec::kLz4BytePlanes) {
    planes.resize(raw_len);
    dst = planes.data();
  }
  int n = LZ4_decompress_safe(reinterpret_cast<const char*>(stored), reinterpret_cast<char*>(dst),
                              static_cast<int>(stored_len), static_cast<int>(raw_len));
  if (n < 0 || static_cast<uint64_t>(n) != raw_len)
    return Status::Corruption("LZ4 payload does not decompress to its recorded length");
  if (codec == Codec::kLz4BytePlanes) JoinPlanes(planes.data(), raw_len, raw);
  return Status::Ok();
}

}  // namespace ecstore
