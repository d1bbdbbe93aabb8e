// EntryRecord: what the store knows about one entry, whichever tier holds its bytes -- the
// one metadata record. The keydir's Entry and the index's IndexRow are EntryRecords with a
// place attached; the on-disk header (RecordInfo::Of / RecordInfo::entry) and the public
// EntryInfo (EntryInfo::Of) convert from it in one place each.
// Thread rules: a plain value.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/tensor_meta.h"

namespace ecstore {

// The hash of an entry's (namespace, key): the keydir's table and the pools' request counts.
inline uint64_t EntryKeyHash(std::string_view ns, std::string_view key) {
  const std::hash<std::string_view> h;
  return h(key) ^ (h(ns) * 0x9e3779b97f4a7c15ull);
}

struct EntryRecord {
  std::string ns;
  std::string key;
  uint64_t seq = 0;  // the version: a newer Put of the key, or a tombstone, has a higher one
  TensorMeta meta;
  uint64_t bytes = 0;     // raw payload length
  uint64_t checksum = 0;  // xxh3 of the raw payload
  uint64_t created_us = 0;
  uint64_t last_access_us = 0;
  uint64_t hits = 0;
};

}  // namespace ecstore
