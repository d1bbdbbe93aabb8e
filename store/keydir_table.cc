#include "store/keydir_table.h"

#include <algorithm>

namespace ecstore {

KeydirSlot::KeydirSlot(const EntryPtr& e) {
  EntryPtr copy(e);
  v_ = reinterpret_cast<uintptr_t>(std::exchange(copy.e_, nullptr));
}

KeydirSlot::KeydirSlot(const KeydirSlot& o) : v_(o.v_) {
  if (ColdRow* r = row())
    r->refs.fetch_add(1, std::memory_order_relaxed);
  else if (Entry* e = entry())
    e->refs_.fetch_add(1, std::memory_order_relaxed);
}

void KeydirSlot::reset() {
  if (ColdRow* r = row()) {
    if (r->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) ColdRow::Free(r);
  } else if (Entry* e = entry()) {
    EntryPtr adopt;
    adopt.e_ = e;  // dropped here
  }
  v_ = 0;
}

EntryInfo EntryInfoOf(const Entry& e) {
  TierSet tiers;
  if (e.device) tiers.add(Tier::kDevice);
  if (e.pool) tiers.add(Tier::kPool);
  if (e.disk) tiers.add(Tier::kDisk);
  return EntryInfo::Of(e, tiers);
}

size_t KeydirTable::SlotHash::operator()(const EntryKey& k) const {
  return EntryKeyHash(k.ns, k.key);
}

size_t KeydirTable::SlotHash::operator()(const KeydirSlot& s) const {
  if (const Entry* e = s.entry()) return (*this)(EntryKey{e->ns, e->key});
  char buf[kMaxKeyBytes];
  return (*this)(EntryKey{names->Name(s.row()->ns), s.row()->KeyInto(buf)});
}

bool KeydirTable::SlotEq::operator()(const KeydirSlot& s, const EntryKey& k) const {
  if (const Entry* e = s.entry()) return e->key == k.key && e->ns == k.ns;
  return s.row()->KeyEquals(k.key) && names->Name(s.row()->ns) == k.ns;
}

bool KeydirTable::SlotEq::operator()(const KeydirSlot& a, const KeydirSlot& b) const {
  char buf[kMaxKeyBytes];
  if (const Entry* e = b.entry()) return (*this)(a, EntryKey{e->ns, e->key});
  return (*this)(a, EntryKey{names->Name(b.row()->ns), b.row()->KeyInto(buf)});
}

EntryKey KeydirTable::KeyOf(const KeydirSlot& s, char* buf) const {
  if (const Entry* e = s.entry()) return {e->ns, e->key};
  return {names_.Name(s.row()->ns), s.row()->KeyInto(buf)};
}

void KeydirTable::clear() {
  set_.clear();
  rows_ = 0;
  freeze_queue_.clear();
}

const KeydirSlot* KeydirTable::Peek(std::string_view ns, std::string_view key) const {
  auto it = set_.find(EntryKey{ns, key});
  return it == set_.end() ? nullptr : &*it;
}

EntryPtr KeydirTable::Find(std::string_view ns, std::string_view key) {
  auto it = set_.find(EntryKey{ns, key});
  if (it == set_.end()) return {};
  if (!it->cold()) return it->entry_ptr();
  return Thaw(it);
}

EntryRecord KeydirTable::RecordOf(const ColdRow& r) const {
  EntryRecord rec;
  r.FillRecord(&rec, names_.Name(r.ns));
  return rec;
}

std::optional<EntryInfo> KeydirTable::Info(const KeydirSlot& s) const {
  if (const Entry* e = s.entry()) return EntryInfoOf(*e);
  const ColdRow& r = *s.row();
  if (r.flags & ColdRow::kDetached) {  // thawed or erased since the snapshot
    char buf[kMaxKeyBytes];
    const KeydirSlot* now = Peek(names_.Name(r.ns), r.KeyInto(buf));
    return now ? Info(*now) : std::nullopt;
  }
  EntryInfo i;  // straight from the row: Lookup's path, one string per field
  i.ns = names_.Name(r.ns);
  i.key = r.Key();
  i.tiers.add(Tier::kDisk);
  i.bytes = r.bytes;
  i.meta = r.meta();
  i.created_us = r.created_us;
  i.last_access_us = r.last_access_us;
  i.hits = r.hits;
  i.checksum = r.checksum;
  return i;
}

EntryPtr KeydirTable::EntryOf(const KeydirSlot& s) {
  if (!s.cold()) return s.entry_ptr();
  char buf[kMaxKeyBytes];
  return Find(names_.Name(s.row()->ns), s.row()->KeyInto(buf));
}

// The row becomes an Entry in the same slot (the key, so the hash, is the same).
EntryPtr KeydirTable::Thaw(Set::iterator it) {
  ColdRow* r = it->row();
  EntryPtr e = NewEntry();
  r->FillRecord(e.get(), names_.Name(r->ns));
  e->disk = r->loc();
  e->touched = r->flags & ColdRow::kTouched;
  Drop(*it);
  set_.replace(it, KeydirSlot(e));
  QueueFreeze(e);
  return e;
}

void KeydirTable::Drop(const KeydirSlot& s) {
  if (ColdRow* r = s.row()) {
    r->flags |= ColdRow::kDetached;  // for a snapshot that still holds it
    --rows_;
  }
}

bool KeydirTable::Freezable(const EntryPtr& e) const {
  return e->disk && !e->pool && !e->device && e->leases == 0 && !e->spilling && !e->loading &&
         !e->erased && e->checksummed && e.use_count() == 2;  // the table's and the queue's
}

void KeydirTable::Freeze(const EntryPtr& e) {
  auto it = set_.find(EntryKey{e->ns, e->key});
  if (it == set_.end() || it->entry() != e.get()) return;  // taken out without an erase flag
  auto ns = names_.Intern(e->ns);
  if (!ns) return;
  ColdRow* r = ColdRow::Make(*e, *e->disk, *ns);
  if (!r) return;
  if (e->touched) r->flags |= ColdRow::kTouched;
  set_.replace(it, KeydirSlot(r));
  ++rows_;
}

void KeydirTable::QueueFreeze(const EntryPtr& e) {
  if (e->freeze_queued) return;
  e->freeze_queued = true;
  freeze_queue_.push_back(e);
}

void KeydirTable::FreezeSome(size_t max) {
  for (size_t n = std::min(max, freeze_queue_.size()); n > 0; --n) {
    EntryPtr e = std::move(freeze_queue_.front());
    freeze_queue_.pop_front();
    if (Freezable(e)) {
      e->freeze_queued = false;
      Freeze(e);
      continue;
    }
    // Only held a while longer (a request's reference, a lease): look again later. Anything
    // else (a pool copy, an erase) changes again before it can be idle, and queues it then.
    const bool held = e->disk && !e->pool && !e->device && !e->erased && e->checksummed &&
                      !e->spilling && !e->loading;
    if (held)
      freeze_queue_.push_back(std::move(e));
    else
      e->freeze_queued = false;
  }
}

EntryPtr KeydirTable::Insert(const EntryPtr& e) {
  auto [it, added] = set_.insert(KeydirSlot(e));
  if (added) return {};
  EntryPtr old = it->cold() ? Thaw(it) : it->entry_ptr();
  set_.replace(it, KeydirSlot(e));
  return old;
}

bool KeydirTable::Erase(const Entry& e) {
  auto it = set_.find(EntryKey{e.ns, e.key});
  if (it == set_.end() || it->entry() != &e) return false;
  set_.erase(it);
  return true;
}

void KeydirTable::Erase(std::string_view ns, std::string_view key) {
  auto it = set_.find(EntryKey{ns, key});
  if (it == set_.end()) return;
  Drop(*it);
  set_.erase(it);
}

void KeydirTable::AddRecovered(IndexRow&& row) {
  KeydirSlot slot;
  auto ns = names_.Intern(row.ns);
  if (ColdRow* r = ns ? ColdRow::Make(row, row.loc, *ns) : nullptr) {
    slot = KeydirSlot(r);
    ++rows_;
  } else {
    EntryPtr e = NewEntry();
    const DiskLocation loc = row.loc;
    static_cast<EntryRecord&>(*e) = std::move(row);
    e->disk = loc;
    slot = KeydirSlot(e);
  }
  auto [it, added] = set_.insert(std::move(slot));  // one probe: the key is almost always new
  if (added) return;
  Drop(*it);  // a newer record of the key: it replaces the older
  set_.replace(it, std::move(slot));
}

}  // namespace ecstore
