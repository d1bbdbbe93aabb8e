// Tensor metadata (dtype + shape) and key/namespace validation.
// Thread rules: pure functions and value types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ecstore {

enum class DType : uint32_t {
  kBF16 = 1,
  kF16 = 2,
  kF32 = 3,
  kF64 = 4,
  kI8 = 5,
  kU8 = 6,
  kI16 = 7,
  kI32 = 8,
  kI64 = 9,
  kBool = 10,
  kF8E4M3 = 11,
  kF8E5M2 = 12,
};

// Names are safetensors' spellings ("BF16", "F32", ...); parsing is case-insensitive.
Result<DType> ParseDType(std::string_view name);
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);
bool IsKnownDType(uint32_t raw);

struct TensorMeta {
  static constexpr size_t kMaxDims = 8;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  // Optional hint: what recomputing this entry costs (e.g. encoder milliseconds). 0 = unknown.
  double recompute_cost = 0;

  // Bytes the shape describes, or an error for negative dims / overflow / too many dims.
  Result<uint64_t> ByteSize() const;
  std::string ShapeString() const;  // "400,3584"
};

// Checks that meta is well formed and describes exactly `nbytes` bytes.
Status ValidateMeta(const TensorMeta& meta, uint64_t nbytes);
Result<std::vector<int64_t>> ParseShape(std::string_view text);  // "400,3584" or "400x3584"

constexpr size_t kMaxKeyBytes = 256;
constexpr size_t kMaxNamespaceBytes = 128;
// Keys are vLLM identifiers: 1..256 printable ASCII bytes. Reads accept any such key.
Status ValidateKey(std::string_view key);
// Namespaces (model/encoder id): 0..128 printable ASCII bytes; empty is the default namespace.
Status ValidateNamespace(std::string_view ns);
// What Put accepts -- the one alphabet of new entries: the above, and usable as one path
// component (vLLM's file layout names a directory after the key): no '/' or '\\', not "."
// or "..". mm_hashes, "lora:<hash>" and UUIDs all pass.
Status ValidateNewKey(std::string_view key);
Status ValidateNewNamespace(std::string_view ns);

}  // namespace ecstore
