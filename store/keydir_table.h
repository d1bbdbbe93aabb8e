// KeydirTable: the keydir's entries by (namespace, key), each either an Entry (in use: in a
// pool, leased, loading, spilling, or just touched) or a ColdRow (only on disk, idle: most
// of a large store). A row turns back into an Entry when a request finds it (Find); an
// Entry that may have gone idle is queued (QueueFreeze) and made a row again once nothing
// else holds it (FreezeSome). Recovery makes rows straight away. What the rows save: a
// 1 M-entry store's open kept 420 B of heap per entry as Entries (store/cold_row.h).
//
//   KeydirTable t;
//   t.AddRecovered(std::move(index_row));     // a row
//   EntryPtr e = t.Find(ns, key);             // the row becomes an Entry (null: absent)
//   t.QueueFreeze(e); e.reset(); t.FreezeSome(4);   // a row again, when idle
//
// Thread rules: not synchronized; the keydir calls it holding its mutex. KeydirSlot's
// references (an Entry's count, a row's count) may be dropped on any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/flat_set.h"
#include "cache/cache.h"
#include "index/index.h"
#include "store/cold_row.h"
#include "store/entry.h"

namespace ecstore {

// One entry in 8 bytes: an Entry or a ColdRow, with a reference to it. The table's slot owns
// one; a snapshot's copy keeps the entry (or the row's memory) alive, nothing more.
class KeydirSlot {
 public:
  KeydirSlot() = default;
  explicit KeydirSlot(const EntryPtr& e);
  explicit KeydirSlot(ColdRow* r) : v_(reinterpret_cast<uintptr_t>(r) | 1) {}  // takes its ref
  KeydirSlot(const KeydirSlot& o);
  KeydirSlot(KeydirSlot&& o) noexcept : v_(std::exchange(o.v_, 0)) {}
  KeydirSlot& operator=(KeydirSlot o) noexcept {
    std::swap(v_, o.v_);
    return *this;
  }
  ~KeydirSlot() { reset(); }
  void reset();

  explicit operator bool() const { return v_ != 0; }
  bool cold() const { return v_ & 1; }
  Entry* entry() const { return cold() ? nullptr : reinterpret_cast<Entry*>(v_); }
  ColdRow* row() const { return cold() ? reinterpret_cast<ColdRow*>(v_ & ~uintptr_t{1}) : nullptr; }
  EntryPtr entry_ptr() const { return EntryPtr(entry()); }

 private:
  uintptr_t v_ = 0;
};

// What an entry in use is: its record and the tiers holding its bytes.
EntryInfo EntryInfoOf(const Entry& e);

// The keydir's lookups go by (ns, key) views: no string is built for one.
struct EntryKey {
  std::string_view ns, key;
};

class KeydirTable {
 public:
  KeydirTable() : set_(SlotHash{&names_}, SlotEq{&names_}) {}

  size_t size() const { return set_.size(); }
  uint64_t rows() const { return rows_; }  // entries kept as ColdRows
  void reserve(size_t n) { set_.reserve(n); }
  void clear();

  // ---- lookups
  const KeydirSlot* Peek(std::string_view ns, std::string_view key) const;  // null: absent
  // The key's Entry, a row turned into one (and queued to freeze again); null: absent.
  EntryPtr Find(std::string_view ns, std::string_view key);
  // What a slot holds now, without turning a row into an Entry. A row that left the table
  // after a snapshot took it is looked up again by its key (nullopt: gone).
  std::optional<EntryInfo> Info(const KeydirSlot& s) const;
  // The Entry a snapshot's slot stands for now (a row turned into one); null: gone.
  EntryPtr EntryOf(const KeydirSlot& s);
  EntryRecord RecordOf(const ColdRow& r) const;
  std::string_view NamespaceOf(const ColdRow& r) const { return names_.Name(r.ns); }

  // ---- changes
  // Adds e; returns the entry it replaced (a row turned into one), or null.
  EntryPtr Insert(const EntryPtr& e);
  // Takes e out, if the table holds e itself (not a newer entry of its key).
  bool Erase(const Entry& e);
  // Takes the key's row or entry out.
  void Erase(std::string_view ns, std::string_view key);
  // A recovered record, as a row (or an Entry, if it cannot be one); replaces the key's.
  void AddRecovered(IndexRow&& row);

  // ---- rows
  // e may be idle soon (its pool copy went, its last lease ended): make it a row once it is.
  void QueueFreeze(const EntryPtr& e);
  // Looks at up to `max` queued entries: makes the idle ones rows, keeps those still held.
  void FreezeSome(size_t max);

  // Every slot: for (const KeydirSlot& s : table.slots()). Invalidated by any change.
  const auto& slots() const { return set_; }
  // A slot at random (`r`: a random number): the disk quota's sampling.
  const KeydirSlot& Sample(uint64_t r) const { return *set_.from_slot(r); }

 private:
  struct SlotHash {
    const NamespaceTable* names;
    size_t operator()(const EntryKey& k) const;
    size_t operator()(const KeydirSlot& s) const;
  };
  struct SlotEq {
    const NamespaceTable* names;
    bool operator()(const KeydirSlot& s, const EntryKey& k) const;
    bool operator()(const KeydirSlot& a, const KeydirSlot& b) const;
  };
  using Set = FlatSet<KeydirSlot, SlotHash, SlotEq>;
  // The key a slot holds (a hex-packed row's written to buf, kMaxKeyBytes).
  EntryKey KeyOf(const KeydirSlot& s, char* buf) const;
  EntryPtr Thaw(Set::iterator it);
  bool Freezable(const EntryPtr& e) const;  // idle, disk-only, held by the table and the queue
  void Freeze(const EntryPtr& e);
  void Drop(const KeydirSlot& s);  // bookkeeping for a slot leaving the table

  NamespaceTable names_;
  Set set_;
  uint64_t rows_ = 0;
  std::deque<EntryPtr> freeze_queue_;
};

}  // namespace ecstore
