// Placement of entries over a cluster's nodes without a directory: weighted rendezvous
// (highest-random-weight) hashing of (namespace, key). Every client that sees the same
// members computes the same owner with no lookup, and a join or a leave moves only the keys
// whose first choice changed -- about a node's share of them -- so the hot set of the other
// nodes stays where it is. A key's later choices are where it lived before a join (the
// fallback a miss tries once) and where its replicas go.
//
//   Ring ring({{"node-a", 64e9}, {"node-b", 64e9}, {"node-c", 128e9}});  // weight: capacity
//   size_t owner = ring.Choices("vllm-qwen", mm_hash, 1)[0];             // an index into nodes()
//
// Thread rules: a Ring is immutable once built; share it between threads freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ecstore::cluster {

struct Member {
  std::string id;       // stable across restarts (never a pid or a time)
  double weight = 1.0;  // relative share of the keys, e.g. the node's capacity in bytes
};

class Ring {
 public:
  explicit Ring(std::vector<Member> members);
  const std::vector<Member>& members() const { return members_; }
  bool empty() const { return members_.empty(); }
  // The first `n` nodes in the key's order of preference (indices into members()), best
  // first; fewer when the ring has fewer nodes.
  std::vector<size_t> Choices(std::string_view ns, std::string_view key, size_t n) const;

 private:
  std::vector<Member> members_;
  std::vector<uint64_t> seeds_;  // each member's id hashed: the seed of its scores
};

// Where a key's copies go and are looked for: its first `n` choices, a node on a host not
// chosen yet before a second node of one host (hosts[i] is members()[i]'s), so replicas land
// on distinct hosts while there are enough. Every client and every node computes the same
// list from the same members: a node keeps a key only while it is in this list.
std::vector<size_t> CopyOrder(const Ring& ring, const std::vector<std::string>& hosts,
                              std::string_view ns, std::string_view key, size_t n);

}  // namespace ecstore::cluster
