#include "cache/told_copies.h"

#include <algorithm>

namespace ecstore {

ToldCopies::ToldCopies(const std::vector<std::span<uint8_t>>& dsts, CopyFn copy,
                       std::function<void()> batch_end)
    : dsts_(dsts), copy_(std::move(copy)), told_(dsts.size()) {
  watch_.landed = [this](size_t k, const uint8_t* at, uint64_t landed) { Landed(k, at, landed); };
  watch_.batch_end = std::move(batch_end);
}

void ToldCopies::Landed(size_t k, const uint8_t* at, uint64_t landed) {
  if (k >= told_.size()) return;
  Told& t = told_[k];
  if (t.at != at) t = {at, 0};  // read again elsewhere: from the start
  const uint64_t upto = std::min<uint64_t>(landed, dsts_[k].size());
  if (upto <= t.copied) return;
  if (copy_(dsts_[k].data() + t.copied, at + t.copied, upto - t.copied)) t.copied = upto;
}

}  // namespace ecstore
