// ColdRow: how the keydir keeps an entry that only the disk holds and nothing uses -- most
// entries of a large store. One allocation of 88 B plus its shape and key, where an Entry
// is a ~270 B object with a heap key and a heap shape: a 1 M-entry store's index took
// 420 B of heap per entry with Entries alone. A key of lowercase hex digits (vLLM's
// mm_hash, 64 of them) is kept as the bytes they spell, half its length; a namespace is
// kept as a number (NamespaceTable). The keydir turns a row back into an Entry when the
// entry is used (KeydirTable, store/keydir_table.h).
//
//   ColdRow* r = ColdRow::Make(entry, ns_id);   // nullptr: the entry cannot be a row
//   r->KeyEquals("3fa2...");  r->Key();  r->FillRecord(&rec, ns_name);  ColdRow::Free(r);
//
// Thread rules: plain data; the keydir's mutex guards its rows.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/entry_record.h"
#include "disk/record.h"

namespace ecstore {

struct ColdRow {
  static constexpr uint8_t kHexKey = 1;    // the key is stored as the bytes its digits spell
  static constexpr uint8_t kTouched = 2;   // access info changed since it was last indexed
  static constexpr uint8_t kDetached = 4;  // out of the keydir, kept for a snapshot's pin

  uint64_t seq, bytes, checksum, created_us, last_access_us, hits;
  double recompute_cost;
  uint64_t offset, stored_len;  // the record on disk (DiskLocation)
  uint32_t segment;
  uint16_t ns;       // NamespaceTable id
  uint16_t key_len;  // of the key, not of what is stored
  uint8_t dtype, ndims, codec, flags;
  std::atomic<uint32_t> refs;  // the keydir's slot and snapshots (KeydirSlot)
  // Followed by int64_t shape[ndims], then the key's stored bytes.

  // A row of `rec` at `loc`; nullptr if it cannot be one (a shape of more than 255 dims, a
  // key longer than kMaxKeyBytes).
  // Its one reference is the caller's.
  static ColdRow* Make(const EntryRecord& rec, const DiskLocation& loc, uint16_t ns_id);
  static void Free(ColdRow* r);

  DiskLocation loc() const { return {segment, offset, stored_len, static_cast<Codec>(codec)}; }
  void set_loc(const DiskLocation& l);
  std::string Key() const;
  // The key, written to `buf` (kMaxKeyBytes): for hashing and comparing without allocating.
  std::string_view KeyInto(char* buf) const;
  bool KeyEquals(std::string_view key) const;
  // Every field but ns and key (which the caller has) -- or with them: FillRecord.
  void FillRecord(EntryRecord* rec, std::string ns) const;
  TensorMeta meta() const;

 private:
  const int64_t* shape() const { return reinterpret_cast<const int64_t*>(this + 1); }
  const uint8_t* stored_key() const { return reinterpret_cast<const uint8_t*>(shape() + ndims); }
  size_t stored_key_len() const { return flags & kHexKey ? key_len / 2u : key_len; }
};
static_assert(sizeof(ColdRow) == 88, "a row's fixed part is part of the memory budget");

// Namespaces by number: a store has a few (one per model or encoder), its entries millions.
// Ids are never reused; past 65535 names Intern fails and such entries stay Entries.
class NamespaceTable {
 public:
  std::optional<uint16_t> Intern(std::string_view ns);
  const std::string& Name(uint16_t id) const { return names_[id]; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint16_t, Hash, std::equal_to<>> ids_;
};

}  // namespace ecstore
