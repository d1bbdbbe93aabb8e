#include "base/tensor_meta.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace ecstore {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kBF16, "BF16", 2}, {DType::kF16, "F16", 2},        {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},   {DType::kI8, "I8", 1},          {DType::kU8, "U8", 1},
    {DType::kI16, "I16", 2},   {DType::kI32, "I32", 4},        {DType::kI64, "I64", 8},
    {DType::kBool, "BOOL", 1}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
};

const DTypeInfo* Find(DType d) {
  for (const auto& info : kDTypes)
    if (info.dtype == d) return &info;
  return nullptr;
}

std::string AllDTypeNames() {
  std::string out;
  for (const auto& info : kDTypes) {
    if (!out.empty()) out += ", ";
    out += info.name;
  }
  return out;
}

Status ValidatePrintable(std::string_view s, size_t max, const char* what) {
  if (s.size() > max)
    return Status::InvalidArgument(std::string(what) + " is " + std::to_string(s.size()) +
                                   " bytes; the limit is " + std::to_string(max));
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c > 0x7e)
      return Status::InvalidArgument(std::string(what) + " has a non-printable byte (0x" +
                                     "0123456789abcdef"[c >> 4] + "0123456789abcdef"[c & 15] +
                                     ") at offset " + std::to_string(i) +
                                     "; use printable ASCII only");
  }
  return Status::Ok();
}

}  // namespace

Result<DType> ParseDType(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  if (upper == "BFLOAT16") upper = "BF16";
  if (upper == "FLOAT16" || upper == "HALF") upper = "F16";
  if (upper == "FLOAT32" || upper == "FLOAT") upper = "F32";
  for (const auto& info : kDTypes)
    if (upper == info.name) return info.dtype;
  return Status::InvalidArgument("unknown dtype '" + std::string(name) + "'; use one of " +
                                 AllDTypeNames());
}

const char* DTypeName(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info ? info->name : "UNKNOWN";
}

size_t DTypeSize(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info ? info->size : 0;
}

bool IsKnownDType(uint32_t raw) { return Find(static_cast<DType>(raw)) != nullptr; }

Result<uint64_t> TensorMeta::ByteSize() const {
  if (!Find(dtype)) return Status::InvalidArgument("unknown dtype code");
  if (shape.size() > kMaxDims)
    return Status::InvalidArgument("shape has " + std::to_string(shape.size()) +
                                   " dimensions; at most " + std::to_string(kMaxDims) +
                                   " are supported");
  unsigned __int128 n = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0) return Status::InvalidArgument("shape has a negative dimension " + ShapeString());
    n *= static_cast<uint64_t>(d);
    if (n > (static_cast<unsigned __int128>(1) << 62))
      return Status::InvalidArgument("shape " + ShapeString() + " is too large");
  }
  return static_cast<uint64_t>(n);
}

std::string TensorMeta::ShapeString() const {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(shape[i]);
  }
  return out;
}

Status ValidateMeta(const TensorMeta& meta, uint64_t nbytes) {
  Result<uint64_t> expected = meta.ByteSize();
  if (!expected.ok()) return expected.status();
  if (*expected != nbytes)
    return Status::InvalidArgument("dtype " + std::string(DTypeName(meta.dtype)) + " shape [" +
                                   meta.ShapeString() + "] describes " + std::to_string(*expected) +
                                   " bytes but " + std::to_string(nbytes) +
                                   " were given; fix the TensorMeta shape/dtype to match the data");
  if (meta.recompute_cost < 0) return Status::InvalidArgument("recompute cost must be >= 0");
  return Status::Ok();
}

Result<std::vector<int64_t>> ParseShape(std::string_view text) {
  std::vector<int64_t> shape;
  if (text.empty()) return Status::InvalidArgument("empty shape; give it as ROWS,COLS");
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find_first_of(",x", pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(pos, end - pos);
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size() || v < 0)
      return Status::InvalidArgument("bad shape '" + std::string(text) +
                                     "': dimensions must be non-negative integers, as 400,3584");
    shape.push_back(v);
    pos = end + 1;
  }
  if (shape.size() > TensorMeta::kMaxDims)
    return Status::InvalidArgument("shape has more than 8 dimensions");
  return shape;
}

Status ValidateKey(std::string_view key) {
  if (key.empty()) return Status::InvalidArgument("key is empty; give the entry's mm_hash");
  return ValidatePrintable(key, kMaxKeyBytes, "key");
}

Status ValidateNamespace(std::string_view ns) {
  return ValidatePrintable(ns, kMaxNamespaceBytes, "namespace");
}

namespace {
Status ValidatePathComponent(std::string_view s, const char* what) {
  if (s == "." || s == "..")
    return Status::InvalidArgument(std::string(what) + " '" + std::string(s) +
                                   "' is reserved (it names a directory); choose another");
  size_t bad = s.find_first_of("/\\");
  if (bad != std::string_view::npos)
    return Status::InvalidArgument(std::string(what) + " '" + std::string(s) + "' contains '" +
                                   s[bad] + "' at offset " + std::to_string(bad) +
                                   "; keys and namespaces cannot contain '/' or '\\'");
  return Status::Ok();
}
}  // namespace

Status ValidateNewKey(std::string_view key) {
  EC_RETURN_IF_ERROR(ValidateKey(key));
  return ValidatePathComponent(key, "key");
}

Status ValidateNewNamespace(std::string_view ns) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  return ValidatePathComponent(ns, "namespace");
}

}  // namespace ecstore
