#include <algorithm>
#include <cstring>
#include <utility>

#include "disk/record.h"
#include "store/store.h"

namespace ecstore {

PutReservation::PutReservation(Owner* o, void* token, uint8_t* d, uint64_t n)
    : owner_(o), token_(token), data_(d), size_(n) {}
PutReservation::PutReservation(PutReservation&& o) noexcept { *this = std::move(o); }
PutReservation& PutReservation::operator=(PutReservation&& o) noexcept {
  if (this != &o) {
    Reset();
    owner_ = std::exchange(o.owner_, nullptr);
    token_ = std::exchange(o.token_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    hasher_ = std::move(o.hasher_);
    hashed_ = std::exchange(o.hashed_, 0);
    checksum_when_spilled_ = std::exchange(o.checksum_when_spilled_, false);
    same_ = std::move(o.same_);
    o.same_.reset();
  }
  return *this;
}
PutReservation::~PutReservation() { Reset(); }
void PutReservation::Reset() {
  if (owner_ && token_) owner_->Abandon(token_);
  owner_ = nullptr;
  token_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  hasher_.reset();
  hashed_ = 0;
  checksum_when_spilled_ = false;
  same_.reset();
}
void PutReservation::Filled(uint64_t n) {
  n = std::min(n, size_);
  if (n <= hashed_) return;
  if (!hasher_) hasher_ = std::make_unique<PayloadHasher>(size_);
  hasher_->Update(data_ + hashed_, n - hashed_);
  if (same_ && std::memcmp(data_ + hashed_, same_->data() + hashed_, n - hashed_) != 0)
    same_.reset();
  hashed_ = n;
}
uint64_t PutReservation::Checksum() {
  if (!hasher_ && !same_) return PayloadChecksum(data_, size_);
  // With an entry to compare against, the rest goes in pieces: each is hashed and compared
  // while it is in cache.
  constexpr uint64_t kPiece = 256 << 10;
  for (uint64_t at = hashed_; at < size_;) Filled(at = std::min(size_, at + kPiece));
  if (!hasher_) hasher_ = std::make_unique<PayloadHasher>(size_);  // 0 bytes
  return hasher_->Digest();
}
}  // namespace ecstore
