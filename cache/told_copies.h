// ToldCopies: a Cache::LandingWatch that turns what AcquireMany tells into copies into the
// reader's buffers, for readers that copy each piece out as it lands (a same-host client's
// GetMany and Get into host memory, GetManyToDevice to the GPU). Each key's new bytes
// [copied, landed) go to `copy` once, from the start again where a read was redone at
// another place, never past the key's buffer; batch_end is passed through. Afterwards
// Whole(i, lease) says whether buffer i got every byte of that lease as told, so that the
// lease need not be copied again.
//
//   ToldCopies told(dsts, [&](void* d, const uint8_t* s, uint64_t n) { ...; return true; },
//                   [&] { /* finish what was handed over */ });
//   auto leases = cache.AcquireMany(ns, keys, told.watch());
//   for (i) if (!told.Whole(i, *leases[i])) /* copy the lease whole */;
//
// Thread rules: used on one thread, the one AcquireMany tells on (its caller's).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "cache/cache.h"

namespace ecstore {

class ToldCopies {
 public:
  // copy(dst, src, n): hands one piece over; false where it could not (that key's buffer is
  // then not Whole). dsts must outlive this.
  using CopyFn = std::function<bool(void* dst, const uint8_t* src, uint64_t n)>;
  ToldCopies(const std::vector<std::span<uint8_t>>& dsts, CopyFn copy,
             std::function<void()> batch_end);
  Cache::LandingWatch* watch() { return &watch_; }
  bool Whole(size_t i, const ReadLease& lease) const {
    return i < watch_.streamed.size() && watch_.streamed[i] && told_[i].copied == lease.size();
  }

 private:
  struct Told {
    const uint8_t* at = nullptr;  // where the bytes told lie
    uint64_t copied = 0;          // [0, copied) handed over
  };
  void Landed(size_t k, const uint8_t* at, uint64_t landed);

  const std::vector<std::span<uint8_t>>& dsts_;
  CopyFn copy_;
  std::vector<Told> told_;
  Cache::LandingWatch watch_;
};

}  // namespace ecstore
