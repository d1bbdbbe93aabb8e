// Entry: the keydir's full record of one entry in use -- its record, where its bytes are,
// its leases and in-flight flags -- and EntryPtr, a counted reference to one.
// Thread rules: an Entry's fields are guarded by Keydir::mu; EntryPtrs may be copied and
// dropped on any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>

#include "base/entry_record.h"
#include "disk/record.h"
#include "store/pool_allocator.h"

namespace ecstore {

// One entry: its record and where its bytes are (device block, host pool block, disk
// record: any of them). Fields are guarded by Keydir::mu. A lease pins every copy.
struct Entry : EntryRecord {
  std::optional<PoolBlock> device;  // in the GPU pool
  // False for an entry put from device memory until it is first spilled: its xxh3 is
  // computed then, where the disk (not PCIe) sets the pace. Until then checksum is 0.
  bool checksummed = true;
  std::optional<PoolBlock> pool;  // set once the bytes in the block are complete
  std::optional<DiskLocation> disk;
  int leases = 0;
  bool spilling = false;
  bool loading = false;
  bool erased = false;
  bool touched = false;        // access info changed since it was last indexed
  bool freeze_queued = false;  // in KeydirTable's queue of entries to turn into rows
  uint64_t id() const { return reinterpret_cast<uintptr_t>(this); }

 private:
  friend class EntryPtr;
  friend class KeydirSlot;
  std::atomic<uint32_t> refs_{0};  // EntryPtrs to it (the keydir's slot holds one)
};

// A counted reference to an Entry, the count inside the entry: 8 B, so the keydir's slot is a
// pointer and its hash, and an entry needs no separate control block (shared_ptr's cost 32 B
// an entry). Copies may be made and dropped on any thread.
class EntryPtr {
 public:
  EntryPtr() = default;
  explicit EntryPtr(Entry* e) : e_(e) {
    if (e_) e_->refs_.fetch_add(1, std::memory_order_relaxed);
  }
  EntryPtr(const EntryPtr& o) : EntryPtr(o.e_) {}
  EntryPtr(EntryPtr&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  EntryPtr& operator=(EntryPtr o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  ~EntryPtr() { reset(); }
  void reset() {
    Entry* e = std::exchange(e_, nullptr);
    if (e && e->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete e;
  }
  Entry* get() const { return e_; }
  Entry* operator->() const { return e_; }
  Entry& operator*() const { return *e_; }
  explicit operator bool() const { return e_ != nullptr; }
  bool operator==(const EntryPtr& o) const { return e_ == o.e_; }
  // References held now; 1 = only the holder asking (used under Keydir::mu, where no new
  // reference can be taken from the keydir).
  uint32_t use_count() const { return e_ ? e_->refs_.load(std::memory_order_acquire) : 0; }

 private:
  friend class KeydirSlot;  // holds a reference as a bare pointer
  Entry* e_ = nullptr;
};
inline EntryPtr NewEntry() { return EntryPtr(new Entry()); }

}  // namespace ecstore
