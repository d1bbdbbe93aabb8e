// The administration requests a server answers for its whole store, as free functions of the
// store: STATS, VERIFY and COMPACT (run on the asking connection's thread; the client waits).
// Thread rules: any thread (the store's own rules apply).
#pragma once

#include <string>

#include "base/status.h"
#include "net/protocol.h"
#include "store/store.h"

namespace ecstore::net {

// The STATS_OK body (u32 length + JSON): the store's one schema, with the server's live
// connections and client leases, and the transport of the asking connection and the server's.
Result<std::string> AnswerStats(Store* store, uint64_t connections, uint64_t client_leases,
                                const std::string& transport, const std::string& server_transports);
// The VERIFY_OK or COMPACT_OK body (u32 length + JSON) for `op`, logged as asked by `peer`.
Result<std::string> AnswerAdmin(Store* store, Op op, const std::string& peer);

}  // namespace ecstore::net
