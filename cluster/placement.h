// Placement of entries over a cluster's nodes without a directory: weighted rendezvous
// (highest-random-weight) hashing of (namespace, key), or of the slot it hashes to. Every client
// that sees the same members computes the same owner with no lookup, and a join or a leave moves
// only the keys whose first choice changed -- about a node's share of them -- so the hot set of the
// other nodes stays where it is. A key's later choices are where it lived before a join (the
// fallback a miss tries once) and where its replicas go.
//
// Ranking a key scores every node: at 1,000 nodes that is 10 us a call. With slots, a key
// is hashed to one of 2^bits slots and the slot is ranked instead, read from a table kept
// for the members (cluster/slot_table.h): the same promises at slot grain, in constant
// time. The two give different owners, so every client and node of a cluster must use the
// same (the members' records say which: Layout::Of).
//
//   Ring ring({{"node-a", 64e9}, {"node-b", 64e9}, {"node-c", 128e9}}, kSlotBits);
//   size_t owner = ring.Choices("vllm-qwen", mm_hash, 1)[0];  // an index into members()
//
// Thread rules: a Ring is immutable once built; share it between threads freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/slot_table.h"

namespace ecstore::cluster {

// The slots a node of this version places keys over: 2^20, about a thousand a node at 1,000
// nodes, so the slots' own unevenness stays near the keys' (docs/cluster.md#placement).
inline constexpr int kSlotBits = 20;

struct Member {
  std::string id;       // stable across restarts (never a pid or a time)
  double weight = 1.0;  // relative share of the keys, e.g. the node's capacity in bytes
};

class Ring {
 public:
  // slot_bits 0 ranks each key itself; 1 to 24 ranks the key's slot, from a table filled
  // from `previous` (the members' last ring) where it can be, else in the background.
  explicit Ring(std::vector<Member> members, int slot_bits = 0, const Ring* previous = nullptr);
  const std::vector<Member>& members() const { return members_; }
  bool empty() const { return members_.empty(); }
  int slot_bits() const { return slot_bits_; }
  // The first `n` nodes in the key's order of preference (indices into members()), best
  // first; fewer when the ring has fewer nodes.
  std::vector<size_t> Choices(std::string_view ns, std::string_view key, size_t n) const;
  // Whether Choices reads the slot table now (false without slots, and while it fills).
  bool table_ready() const;
  // Blocks until the slot table is filled (benches and tests, never on a call's path).
  void WaitForTable() const;

 private:
  std::vector<size_t> Rank(uint64_t point, size_t n) const;  // every member scored

  std::vector<Member> members_;
  std::vector<ScoredMember> scored_;  // members_ with their ids hashed: their scores' seeds
  int slot_bits_ = 0;
  std::shared_ptr<const SlotTable> table_;  // shared by the ring's copies
};

// Where a key's copies go and are looked for: its first `n` choices, a node on a host not
// chosen yet before a second node of one host (hosts[i] is members()[i]'s), so replicas land
// on distinct hosts while there are enough. Every client and every node computes the same
// list from the same members: a node keeps a key only while it is in this list.
std::vector<size_t> CopyOrder(const Ring& ring, const std::vector<std::string>& hosts,
                              std::string_view ns, std::string_view key, size_t n);

}  // namespace ecstore::cluster
