// The slot table behind a Ring's constant-time owner: keys are hashed to 2^bits slots and
// each slot's first kDepth choices in rendezvous order (the slot's own hash scored on every
// member, exactly as a Ring ranks a point) are kept, so a routed call reads its owner,
// replicas and fallback from one table entry instead of scoring every node. Because every
// entry is that slot's rendezvous order, the table keeps rendezvous hashing's promises at
// slot grain: a join moves only the slots whose first choice is the joiner, a leave only
// the leaver's, and a moved slot's next choice is where it lived before.
//
// Filling costs one score per member per slot. A table is filled from its predecessor when
// one is ready and at most a quarter of the members are new (each slot's kept choices and
// the joiners scored again, the few slots that lost a kept choice scored afresh: 0.1 s at
// 2^20 slots for one change), or else in a thread of its own, off the call path; until
// then Lookup says so and the caller scores directly, which gives the same answer.
//
//   SlotTable t(20, points, &previous);  // `previous` may be null
//   std::vector<size_t> first;
//   if (!t.Lookup(slot, 1, &first)) first = RankDirectly(...);
//
// Thread rules: Lookup from any thread at any time; the destructor stops a fill in progress.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace ecstore::cluster {

// A member as the table scores it.
struct ScoredMember {
  std::string id;
  uint64_t seed = 0;  // the id hashed
  double weight = 1.0;
};

// The rendezvous score of `point` (a key's hash or a slot number) on a member: -w / ln(u)
// with u uniform in (0, 1) from the point mixed with the member's seed, whose maximum picks
// each member with probability w / sum(w) (Schindelhauer and Schomaker's weighted HRW).
double RendezvousScore(uint64_t point, const ScoredMember& m);

// Whether member a ranks before member b for a point, given their scores: the higher score,
// and on a tie (never in practice) the smaller id, so every client orders alike.
inline bool RanksBefore(double score_a, const ScoredMember& a, double score_b,
                        const ScoredMember& b) {
  return score_a != score_b ? score_a > score_b : a.id < b.id;
}

class SlotTable {
 public:
  static constexpr size_t kDepth = 4;           // choices kept per slot
  static constexpr size_t kMaxMembers = 65535;  // a choice is a 16-bit member index
  static constexpr int kMaxBits = 24;

  // Fills the table for `members` (at most kMaxMembers) over 2^bits slots.
  SlotTable(int bits, std::vector<ScoredMember> members, const SlotTable* previous);
  ~SlotTable();
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  int bits() const { return bits_; }
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // Blocks until filled (tests and benches; never on a call's path).
  void Wait() const;
  // The slot's first n choices (member indices, best first) into *out when the table is
  // filled and n <= kDepth; false otherwise, and the caller ranks the slot itself.
  bool Lookup(uint32_t slot, size_t n, std::vector<size_t>* out) const;

 private:
  using Entry = std::array<uint16_t, kDepth>;
  static constexpr uint16_t kNone = 0xffff;

  void FillAll();                            // every slot scored on every member
  bool FillFrom(const SlotTable& previous);  // false where it cannot (other bits)
  void FillSlot(uint32_t slot);              // one slot scored on every member
  void Keep(uint32_t slot, std::vector<uint16_t>* candidates);  // the best kDepth of them

  const int bits_;
  const std::vector<ScoredMember> members_;
  std::vector<Entry> entries_;  // written before ready_ is set, read only after
  std::atomic<bool> ready_{false};
  std::atomic<bool> stop_{false};
  std::thread filler_;
};

}  // namespace ecstore::cluster
