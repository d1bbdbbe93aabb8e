// The file-based baseline, as vLLM's ECExampleConnector does it: one safetensors file per key
// at <dir>/<mm_hash>/encoder_cache.safetensors, written with buffered I/O (no fsync), checked
// with stat, read back whole and parsed.
// Thread rules: one thread per instance.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/tensor_meta.h"

namespace ecstore::bench {

class FileBaseline {
 public:
  explicit FileBaseline(std::string dir) : dir_(std::move(dir)) {}
  Status Save(const std::string& key, const TensorMeta& meta, std::span<const uint8_t> bytes);
  bool Exists(const std::string& key);
  // Reads the whole file and parses it; the tensor is then in *file at *offset (what
  // safetensors' load_file hands to torch before the device copy).
  Status Load(const std::string& key, std::vector<uint8_t>* file, uint64_t* offset,
              TensorMeta* meta);
  // Drops the file's pages from the page cache (after writing back dirty ones).
  void DropCache(const std::string& key);
  void DropAllCaches();
  // Holds the page-cache footprint of the files this instance touched under `budget` bytes,
  // dropping least recently used files first: the same memory budget ec-store's pool has.
  void SetBudget(uint64_t budget) { budget_ = budget; }
  std::string PathOf(const std::string& key) const;

 private:
  void Touch(const std::string& key, uint64_t bytes);
  std::string dir_;
  uint64_t budget_ = 0;
  uint64_t cached_ = 0;
  std::list<std::pair<std::string, uint64_t>> lru_;  // front = most recent
  std::unordered_map<std::string, std::list<std::pair<std::string, uint64_t>>::iterator> where_;
};

}  // namespace ecstore::bench
