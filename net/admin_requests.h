// The administration requests a server answers for its whole store, as free functions of the
// store: VERIFY and COMPACT (run on the asking connection's thread; the client waits).
// Thread rules: any thread (the store's own rules apply).
#pragma once

#include <string>

#include "base/status.h"
#include "net/protocol.h"
#include "store/store.h"

namespace ecstore::net {

// The VERIFY_OK or COMPACT_OK body (u32 length + JSON) for `op`, logged as asked by `peer`.
Result<std::string> AnswerAdmin(Store* store, Op op, const std::string& peer);

}  // namespace ecstore::net
