// ListCursor: one connection's LIST in progress. The first page (offset 0) takes one sorted
// snapshot of the store's entries, and later pages are cut from it -- not a copy and a sort
// of the whole keydir for every page.
// Thread rules: owned by one connection's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cache/cache.h"

namespace ecstore::net {

class ListCursor {
 public:
  // The LIST_OK body for `limit` entries from `offset` (ordered by namespace, then key):
  // n, more, n x (ns, key, info). The snapshot (of the namespaces `visible` says the reader
  // may see) is let go with the last page.
  Result<std::string> Page(Cache* store, uint32_t offset, uint32_t limit,
                           const std::function<bool(const std::string& ns)>& visible);

 private:
  std::vector<EntryInfo> snapshot_;
};

}  // namespace ecstore::net
