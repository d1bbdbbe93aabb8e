// EventRing: the entry events between the store and the publisher's thread -- a bounded
// queue of fixed slots made once, so that telling an event costs no allocation, no lock and
// no system call under the store's metadata lock, where the store tells them. A full ring
// counts what it could not take (lost()): the publisher then tells subscribers to forget the
// node and take a snapshot, so a lost event costs misses, never a wrong holder.
//
//   EventRing ring(4096);
//   ring.Push(true, Tier::kPool, bytes, ns, key);   // any thread
//   EventRing::Event e;
//   while (ring.Pop(&e)) Send(e);                    // one thread
//
// Thread rules: Push from any number of threads; Pop from one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "base/tensor_meta.h"
#include "cache/cache.h"

namespace ecstore::events {

class EventRing {
 public:
  struct Event {
    bool stored = false;
    Tier medium = Tier::kPool;
    uint64_t bytes = 0;
    std::string ns, key;
  };
  // `slots` is rounded up to a power of two.
  explicit EventRing(size_t slots) : mask_(RoundUp(slots) - 1), slots_(new Slot[mask_ + 1]) {
    for (size_t i = 0; i <= mask_; ++i) slots_[i].turn.store(i, std::memory_order_relaxed);
  }
  // False (and counted lost) where the ring is full or a name is longer than any the store
  // takes. (Bounded multi-producer queue: each slot's turn says whose write or read is next.)
  bool Push(bool stored, Tier medium, uint64_t bytes, std::string_view ns, std::string_view key) {
    if (ns.size() > kMaxNamespaceBytes || key.size() > kMaxKeyBytes) return Lose();
    uint64_t at = head_.load(std::memory_order_relaxed);
    for (;;) {
      Slot& s = slots_[at & mask_];
      const int64_t ahead = static_cast<int64_t>(s.turn.load(std::memory_order_acquire) - at);
      if (ahead == 0) {
        if (head_.compare_exchange_weak(at, at + 1, std::memory_order_relaxed)) break;
      } else if (ahead < 0) {
        return Lose();  // the consumer has not taken this slot's last event yet
      } else {
        at = head_.load(std::memory_order_relaxed);
      }
    }
    Slot& s = slots_[at & mask_];
    s.stored = stored, s.medium = medium, s.bytes = bytes;
    s.ns_len = static_cast<uint16_t>(ns.size()), s.key_len = static_cast<uint16_t>(key.size());
    std::memcpy(s.ns, ns.data(), ns.size());
    std::memcpy(s.key, key.data(), key.size());
    s.turn.store(at + 1, std::memory_order_release);
    return true;
  }
  // The oldest event into *e; false where none is ready.
  bool Pop(Event* e) {
    Slot& s = slots_[tail_ & mask_];
    if (s.turn.load(std::memory_order_acquire) != tail_ + 1) return false;
    e->stored = s.stored, e->medium = s.medium, e->bytes = s.bytes;
    e->ns.assign(s.ns, s.ns_len);
    e->key.assign(s.key, s.key_len);
    s.turn.store(tail_ + mask_ + 1, std::memory_order_release);
    ++tail_;
    return true;
  }
  // Events not taken since the last call (and reset).
  uint64_t TakeLost() { return lost_.exchange(0, std::memory_order_relaxed); }
  size_t capacity() const { return mask_ + 1; }

 private:
  struct Slot {
    std::atomic<uint64_t> turn{0};
    bool stored = false;
    Tier medium = Tier::kPool;
    uint64_t bytes = 0;
    uint16_t ns_len = 0, key_len = 0;
    char ns[kMaxNamespaceBytes];
    char key[kMaxKeyBytes];
  };
  static size_t RoundUp(size_t n) {
    size_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }
  bool Lose() {
    lost_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) uint64_t tail_ = 0;  // the consumer's
  std::atomic<uint64_t> lost_{0};
};

}  // namespace ecstore::events
