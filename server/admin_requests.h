// The requests a server answers from its store alone, as free functions of the store: the
// administration of the whole store (STATS, VERIFY and COMPACT, run on the asking
// connection's thread; the client waits), and LOOKUP, ERASE and ERASE_MANY.
// Thread rules: any thread (the store's own rules apply).
#pragma once

#include <string>

#include "base/status.h"
#include "net/protocol.h"
#include "store/store.h"

namespace ecstore::net {

// The STATS_OK body (u32 length + JSON): the store's one schema, with the server's live
// connections and client leases, the transport of the asking connection and the server's,
// and where TLS is on, its JSON object (Gate::TlsJson) as "tls".
Result<std::string> AnswerStats(Store* store, uint64_t connections, uint64_t client_leases,
                                const std::string& transport, const std::string& server_transports,
                                const std::string& tls_json = "");
// The VERIFY_OK or COMPACT_OK body (u32 length + JSON) for `op`, logged as asked by `peer`.
Result<std::string> AnswerAdmin(Store* store, Op op, const std::string& peer);

// LOOKUP, ERASE and ERASE_MANY. A malformed body (a bad key) is the outer status: answer it,
// then close the connection.
Result<Answer> AnswerKeys(Store* store, Op op, BodyReader* r);

}  // namespace ecstore::net
