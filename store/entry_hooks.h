// The store's two hooks into what holds it: Admission, asked before a new entry is
// installed, and EntryEvents, told each change of where an entry is held. Both run under the
// store's metadata lock (Keydir::mu), so they sit below store.h, which the keydir does not
// include.
// Thread rules: as each hook says; both are called with the keydir's lock held.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "base/status.h"
#include "cache/cache.h"

namespace ecstore {

// Whether a new entry of (ns, key) may be installed now: Ok, or the refusal its put returns.
// Asked under the store's metadata lock, once per put: it must be quick and call no Store
// method. A cluster node's says whether the key is at the node's places (cluster/node_guard.h).
using Admission = std::function<Status(std::string_view ns, std::string_view key)>;

// Where a store tells each change of where its entries are held: a copy stored in a medium
// (a put, a spill to disk, a promotion) or gone from it (an eviction, a demotion, an erase
// or replacement -- whose removals come before the new entry's Stored). Called under the
// store's metadata lock, in the order the changes happen: an implementation only queues.
class EntryEvents {
 public:
  virtual ~EntryEvents() = default;
  virtual void Stored(std::string_view ns, std::string_view key, Tier medium, uint64_t bytes) = 0;
  virtual void Removed(std::string_view ns, std::string_view key, Tier medium) = 0;
};

}  // namespace ecstore
