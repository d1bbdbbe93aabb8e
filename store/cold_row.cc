#include "store/cold_row.h"

#include <cstring>
#include <new>

namespace ecstore {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case too: it would not come back the same
}

bool IsHexKey(std::string_view key) {
  if (key.empty() || key.size() % 2 != 0) return false;
  for (char c : key)
    if (HexDigit(c) < 0) return false;
  return true;
}

}  // namespace

ColdRow* ColdRow::Make(const EntryRecord& rec, const DiskLocation& loc, uint16_t ns_id) {
  if (rec.meta.shape.size() > 255 || rec.key.size() > kMaxKeyBytes) return nullptr;
  const bool hex = IsHexKey(rec.key);
  const size_t key_bytes = hex ? rec.key.size() / 2 : rec.key.size();
  const size_t shape_bytes = rec.meta.shape.size() * sizeof(int64_t);
  void* mem = ::operator new(sizeof(ColdRow) + shape_bytes + key_bytes);
  auto* r = new (mem) ColdRow;
  r->seq = rec.seq;
  r->bytes = rec.bytes;
  r->checksum = rec.checksum;
  r->created_us = rec.created_us;
  r->last_access_us = rec.last_access_us;
  r->hits = rec.hits;
  r->recompute_cost = rec.meta.recompute_cost;
  r->ns = ns_id;
  r->key_len = static_cast<uint16_t>(rec.key.size());
  r->dtype = static_cast<uint8_t>(rec.meta.dtype);
  r->ndims = static_cast<uint8_t>(rec.meta.shape.size());
  r->flags = hex ? kHexKey : 0;
  r->refs.store(1, std::memory_order_relaxed);
  r->set_loc(loc);
  auto* shape = reinterpret_cast<int64_t*>(r + 1);
  if (shape_bytes) std::memcpy(shape, rec.meta.shape.data(), shape_bytes);
  auto* key = reinterpret_cast<uint8_t*>(shape + r->ndims);
  if (hex) {
    for (size_t i = 0; i < key_bytes; ++i)
      key[i] = static_cast<uint8_t>(HexDigit(rec.key[2 * i]) << 4 | HexDigit(rec.key[2 * i + 1]));
  } else {
    std::memcpy(key, rec.key.data(), key_bytes);
  }
  return r;
}

void ColdRow::Free(ColdRow* r) {
  r->~ColdRow();
  ::operator delete(r);
}

void ColdRow::set_loc(const DiskLocation& l) {
  segment = l.segment;
  offset = l.offset;
  stored_len = l.stored_len;
  codec = static_cast<uint8_t>(l.codec);
}

std::string_view ColdRow::KeyInto(char* buf) const {
  const uint8_t* k = stored_key();
  if (!(flags & kHexKey)) return {reinterpret_cast<const char*>(k), key_len};
  static constexpr char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < key_len / 2u; ++i) {
    buf[2 * i] = kDigits[k[i] >> 4];
    buf[2 * i + 1] = kDigits[k[i] & 15];
  }
  return {buf, key_len};
}

std::string ColdRow::Key() const {
  std::string key(key_len, '\0');
  if (flags & kHexKey)
    KeyInto(key.data());
  else
    std::memcpy(key.data(), stored_key(), key_len);
  return key;
}

bool ColdRow::KeyEquals(std::string_view key) const {
  if (key.size() != key_len) return false;
  const uint8_t* k = stored_key();
  if (!(flags & kHexKey)) return std::memcmp(k, key.data(), key_len) == 0;
  for (size_t i = 0; i < key_len / 2u; ++i) {
    const int hi = HexDigit(key[2 * i]), lo = HexDigit(key[2 * i + 1]);
    if (hi < 0 || lo < 0 || (hi << 4 | lo) != k[i]) return false;
  }
  return true;
}

void ColdRow::FillRecord(EntryRecord* rec, std::string ns_name) const {
  rec->ns = std::move(ns_name);
  rec->key = Key();
  rec->seq = seq;
  rec->meta = meta();
  rec->bytes = bytes;
  rec->checksum = checksum;
  rec->created_us = created_us;
  rec->last_access_us = last_access_us;
  rec->hits = hits;
}

TensorMeta ColdRow::meta() const {
  return {static_cast<DType>(dtype), {shape(), shape() + ndims}, recompute_cost};
}

std::optional<uint16_t> NamespaceTable::Intern(std::string_view ns) {
  auto it = ids_.find(ns);
  if (it != ids_.end()) return it->second;
  if (names_.size() > UINT16_MAX) return std::nullopt;
  const auto id = static_cast<uint16_t>(names_.size());
  names_.emplace_back(ns);
  ids_.emplace(names_.back(), id);
  return id;
}

}  // namespace ecstore
