#include "server/list_cursor.h"

#include <algorithm>
#include <tuple>

#include "net/protocol.h"

namespace ecstore::net {

Result<std::string> ListCursor::Page(Cache* store, uint32_t offset, uint32_t limit,
                                     const std::function<bool(const std::string& ns)>& visible) {
  if (offset == 0 || snapshot_.empty()) {
    auto listing = store->List();
    if (!listing.ok()) return listing.status();
    snapshot_ = std::move(listing).value();
    std::erase_if(snapshot_, [&](const EntryInfo& e) { return !visible(e.ns); });
    std::sort(snapshot_.begin(), snapshot_.end(), [](const EntryInfo& a, const EntryInfo& b) {
      return std::tie(a.ns, a.key) < std::tie(b.ns, b.key);
    });
  }
  const size_t end = std::min<size_t>(snapshot_.size(), static_cast<size_t>(offset) + limit);
  BodyWriter w;
  w.U32(static_cast<uint32_t>(offset < end ? end - offset : 0));
  w.U8(end < snapshot_.size());
  for (size_t i = offset; i < end; ++i) {
    w.Str(snapshot_[i].ns);
    w.Str(snapshot_[i].key);
    WriteInfo(&w, snapshot_[i]);
  }
  if (end >= snapshot_.size()) snapshot_ = {};  // the last page
  return w.data();
}

}  // namespace ecstore::net
