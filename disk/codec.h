// Per-entry LZ4 compression. 16-bit floats compress far better once their high and low bytes
// are split into planes (exponents cluster; mantissas are noise), so that is tried first.
// A result is kept only if it saves at least `min_saving` of the raw size.
// Thread rules: pure functions.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "disk/aligned_buffer.h"
#include "disk/record.h"

namespace ecstore {

// Returns the codec used and fills `out` (aligned) with stored bytes, or kNone (out untouched)
// when compression does not pay for itself.
Codec CompressPayload(const uint8_t* raw, uint64_t raw_len, size_t elem_size, double min_saving,
                      AlignedBuffer* out, uint64_t* stored_len);
Status DecompressPayload(Codec codec, const uint8_t* stored, uint64_t stored_len, uint8_t* raw,
                         uint64_t raw_len, size_t elem_size);

}  // namespace ecstore
