// FlatSet: an open-addressing hash set of owning handles (shared_ptr, unique_ptr, the
// keydir's KeydirSlot) found by a key their pointees carry -- the keydir's table. One array
// of slots (the handle and its hash), linear probing, deletion by backward shift (no
// tombstones), growth by doubling past 7/8 full. Against std::unordered_set it saves a node
// allocation and a pointer chase per entry: inserting 1 M entries at open was 30% of the
// open in a perf profile, most of it the cache misses of bucket-then-node. Hash and Eq may
// carry state (the keydir's read its namespace table).
//
//   FlatSet<std::unique_ptr<Item>, ItemHash, ItemEq> set;
//   set.insert(std::move(p));               // {iterator, inserted}; p kept if not inserted
//   auto it = set.find(key);                // Hash/Eq take the key type and the handle
//   if (it != set.end()) set.erase(it);
//   set.replace(it, std::move(q));          // q has the same key: its hash is kept
//
// Iterators are invalidated by insert and erase. Thread rules: not synchronized (the keydir
// guards it with its mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ecstore {

template <typename P, typename Hash, typename Eq>
class FlatSet {
  struct Slot {
    P p;  // empty: a free slot
    size_t hash = 0;
  };

 public:
  explicit FlatSet(Hash hash = Hash(), Eq eq = Eq()) : hash_(std::move(hash)), eq_(std::move(eq)) {}

  class iterator {
   public:
    iterator(Slot* s, Slot* end) : s_(s), end_(end) { Skip(); }
    const P& operator*() const { return s_->p; }
    const P* operator->() const { return &s_->p; }
    iterator& operator++() {
      ++s_;
      Skip();
      return *this;
    }
    bool operator==(const iterator& o) const { return s_ == o.s_; }
    bool operator!=(const iterator& o) const { return s_ != o.s_; }

   private:
    friend class FlatSet;
    void Skip() {
      while (s_ != end_ && !s_->p) ++s_;
    }
    Slot* s_;
    Slot* end_;
  };

  iterator begin() const { return {Data(), Data() + slots_.size()}; }
  iterator end() const { return {Data() + slots_.size(), Data() + slots_.size()}; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t slot_count() const { return slots_.size(); }
  // The first element at or after slot i (any i; wraps around): for sampling at random.
  iterator from_slot(size_t i) const {
    if (slots_.empty()) return end();
    auto it = At(i & Mask());
    return it == end() ? begin() : it;
  }

  // Room for n entries without growing.
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap * 7 / 8 < n) cap *= 2;
    if (cap > slots_.size()) Rehash(cap);
  }
  void clear() {
    slots_.clear();
    size_ = 0;
  }

  template <typename K>
  iterator find(const K& k) const {
    if (slots_.empty()) return end();
    const size_t h = hash_(k);
    for (size_t i = h & Mask();; i = (i + 1) & Mask()) {
      Slot& s = Data()[i];
      if (!s.p) return end();
      if (s.hash == h && eq_(s.p, k)) return At(i);
    }
  }

  // Adds p unless an equal one is there (then p is left as it was); returns where the set's
  // one is.
  template <typename Q>
  std::pair<iterator, bool> insert(Q&& p) {
    if ((size_ + 1) > slots_.size() * 7 / 8) Rehash(slots_.empty() ? 16 : slots_.size() * 2);
    const size_t h = hash_(p);
    for (size_t i = h & Mask();; i = (i + 1) & Mask()) {
      Slot& s = slots_[i];
      if (!s.p) {
        s.p = std::forward<Q>(p);
        s.hash = h;
        ++size_;
        return {At(i), true};
      }
      if (s.hash == h && eq_(s.p, p)) return {At(i), false};
    }
  }

  // Puts p in its place: p must be equal to it (the same key), as its hash is kept.
  void replace(iterator it, P p) { it.s_->p = std::move(p); }

  void erase(iterator it) {
    size_t i = static_cast<size_t>(it.s_ - Data());
    slots_[i].p = P();
    --size_;
    // Backward shift: pull later entries of the probe run into the hole where their probe
    // would reach it, so a lookup never stops short at it.
    for (size_t j = (i + 1) & Mask(); slots_[j].p; j = (j + 1) & Mask()) {
      const size_t home = slots_[j].hash & Mask();
      const bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
      if (!movable) continue;
      slots_[i] = std::move(slots_[j]);
      slots_[j].p = P();
      i = j;
    }
  }
  template <typename K>
  size_t erase(const K& k) {
    auto it = find(k);
    if (it == end()) return 0;
    erase(it);
    return 1;
  }

 private:
  Slot* Data() const { return const_cast<Slot*>(slots_.data()); }
  size_t Mask() const { return slots_.size() - 1; }
  iterator At(size_t i) const { return {Data() + i, Data() + slots_.size()}; }
  void Rehash(size_t cap) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.resize(cap);
    for (Slot& s : old) {
      if (!s.p) continue;
      size_t i = s.hash & Mask();
      while (slots_[i].p) i = (i + 1) & Mask();
      slots_[i] = std::move(s);
    }
  }

  Hash hash_;
  Eq eq_;
  std::vector<Slot> slots_;  // a power of two of them, or none
  size_t size_ = 0;
};

}  // namespace ecstore
