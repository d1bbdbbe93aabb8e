#include "cluster/slot_table.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

namespace ecstore::cluster {

double RendezvousScore(uint64_t point, const ScoredMember& m) {
  const uint64_t mixed = XXH3_64bits_withSeed(&point, sizeof(point), m.seed);
  const double u = (static_cast<double>(mixed >> 11) + 0.5) / 9007199254740992.0;  // (0,1)
  return -m.weight / std::log(u);
}

SlotTable::SlotTable(int bits, std::vector<ScoredMember> members, const SlotTable* previous)
    : bits_(bits), members_(std::move(members)), entries_(size_t{1} << bits) {
  if (previous && previous->ready() && FillFrom(*previous)) {
    ready_.store(true, std::memory_order_release);
    return;
  }
  filler_ = std::thread([this] { FillAll(); });
}

SlotTable::~SlotTable() {
  stop_.store(true);
  if (filler_.joinable()) filler_.join();
}

void SlotTable::Wait() const { ready_.wait(false, std::memory_order_acquire); }

bool SlotTable::Lookup(uint32_t slot, size_t n, std::vector<size_t>* out) const {
  if (n > kDepth || !ready_.load(std::memory_order_acquire)) return false;
  out->clear();
  for (uint16_t i : entries_[slot]) {
    if (out->size() == n || i == kNone) break;
    out->push_back(i);
  }
  return true;
}

void SlotTable::FillAll() {
  for (uint32_t s = 0; s < entries_.size(); ++s) {
    // Checked at every slot: the last holder of a superseded ring may be a routed call,
    // which then waits for one slot's scores at most.
    if (stop_.load(std::memory_order_relaxed)) return;
    FillSlot(s);
  }
  ready_.store(true, std::memory_order_release);
  ready_.notify_all();
}

void SlotTable::FillSlot(uint32_t slot) {
  std::vector<uint16_t> all(members_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  Keep(slot, &all);
}

void SlotTable::Keep(uint32_t slot, std::vector<uint16_t>* candidates) {
  thread_local std::vector<std::pair<double, uint16_t>> scored;
  scored.clear();
  for (uint16_t i : *candidates) scored.emplace_back(RendezvousScore(slot, members_[i]), i);
  const size_t n = std::min(kDepth, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(n), scored.end(),
                    [&](const auto& a, const auto& b) {
                      return RanksBefore(a.first, members_[a.second], b.first, members_[b.second]);
                    });
  Entry& e = entries_[slot];
  e.fill(kNone);
  for (size_t i = 0; i < n; ++i) e[i] = scored[i].second;
}

// A slot's first kDepth choices among the new members are the best of its old choices that
// stayed and the members that joined -- unless a kept choice left while the old list was
// full: then the next old member, unknown here, may rank in, and the slot is scored afresh.
// A member whose weight changed counts as one that left and one that joined.
bool SlotTable::FillFrom(const SlotTable& previous) {
  if (previous.bits_ != bits_) return false;
  std::unordered_map<std::string_view, uint16_t> now;
  for (size_t i = 0; i < members_.size(); ++i) now.emplace(members_[i].id, i);
  std::vector<uint16_t> moved_to(previous.members_.size(), kNone);
  std::vector<bool> stayed(members_.size(), false);
  for (size_t i = 0; i < previous.members_.size(); ++i) {
    auto it = now.find(previous.members_[i].id);
    if (it == now.end() || members_[it->second].weight != previous.members_[i].weight) continue;
    moved_to[i] = it->second;
    stayed[it->second] = true;
  }
  std::vector<uint16_t> joined;
  for (size_t i = 0; i < members_.size(); ++i)
    if (!stayed[i]) joined.push_back(static_cast<uint16_t>(i));
  // Each slot scores its kept choices and every joiner: past a quarter of the members (a
  // cluster's first view) that nears a fill from nothing, which is left to the filling
  // thread, off the caller's path. A burst of returns (a tenth of the members) is filled
  // here, in about a tenth of that time.
  if (joined.size() * 4 > members_.size()) return false;
  std::vector<uint16_t> candidates;
  for (uint32_t s = 0; s < entries_.size(); ++s) {
    const Entry& old = previous.entries_[s];
    candidates.clear();
    bool lost = false;
    for (uint16_t i : old) {
      if (i == kNone) break;
      if (moved_to[i] == kNone)
        lost = true;
      else
        candidates.push_back(moved_to[i]);
    }
    if (lost && old[kDepth - 1] != kNone) {
      FillSlot(s);
      continue;
    }
    candidates.insert(candidates.end(), joined.begin(), joined.end());
    Keep(s, &candidates);
  }
  return true;
}

}  // namespace ecstore::cluster
