// The safetensors file format for one tensor: what vLLM's file connector writes
// (<dir>/<mm_hash>/encoder_cache.safetensors, tensor name "ec_cache").
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"
#include "base/tensor_meta.h"

namespace ecstore::safetensors {

inline constexpr const char* kTensorName = "ec_cache";

struct Layout {
  TensorMeta meta;
  std::string tensor_name;
  uint64_t data_offset = 0;  // from the start of the file
  uint64_t data_bytes = 0;
};

// Parses the header of a safetensors file of `file_size` bytes whose first bytes are `head`
// (at least 8 bytes; the whole header when the length says so). Requires exactly one tensor.
Result<Layout> ParseHeader(std::span<const uint8_t> head, uint64_t file_size);
// How many leading bytes ParseHeader needs, read from the first 8 bytes.
Result<uint64_t> HeaderBytes(std::span<const uint8_t> first8, uint64_t file_size);
// The header (length prefix + JSON padded to 8 bytes) for one tensor of `meta`.
std::string MakeHeader(const TensorMeta& meta, const std::string& tensor_name = kTensorName);

Result<std::string> ReadFile(const std::string& path);  // whole file
// Reads a one-tensor safetensors file: meta and the tensor bytes.
Status Load(const std::string& path, TensorMeta* meta, std::string* bytes);
// Writes header + bytes with buffered I/O (the baseline's way).
Status Save(const std::string& path, const TensorMeta& meta, std::span<const uint8_t> bytes);
// The same, all or nothing: a temporary name beside `path`, fsync, rename, fsync of the
// directory. A reader never sees a truncated file at `path`, even after a crash.
Status SaveDurable(const std::string& path, const TensorMeta& meta, std::span<const uint8_t> bytes);

}  // namespace ecstore::safetensors
