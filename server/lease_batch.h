// Lease batches: a same-host reader's GET_SHM_MANY and GET_SHM_STREAM, answered from the
// store as a free function of it, as the administration and key requests are
// (server/admin_requests.h).
//
// GET_SHM_MANY leases a step's entries together: Store::AcquireMany reads the disk-only ones
// in one batch, and each key is answered as GET_SHM answers it, or with its own error.
// GET_SHM_STREAM does the same and tells the reader, as they come, where each entry's bytes
// are and how much of them is there (GET_SHM_LANDED frames): a pool hit at once, whole; a
// disk read piece by piece as the pieces land (the store's LandingWatch). The reader copies
// each piece out of its mapping of the pool while the disk reads the rest, so a step's
// copies follow its reads by one piece instead of by the whole batch -- what an embedded
// GetMany does with its tee (store/batch_reads.h). The frames tell of bytes not yet checked;
// only the reply says which leases hold exactly the bytes told (kLeaseStreamed), every one
// of them checked, and only those copies count.
//
// Thread rules: a connection's thread, on its own socket and lease table (the store's own
// rules apply).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/status.h"
#include "net/protocol.h"
#include "server/lease_table.h"
#include "store/store.h"

namespace ecstore::net {

// Sends one GET_SHM_LANDED frame of the request being answered, with this body.
using TellLanded = std::function<Status(const std::string& body)>;
// What a batch came to, for the request's metrics and log line.
struct LeaseBatchTally {
  uint64_t bytes_out = 0;  // leased
  uint32_t keys = 0;
  uint32_t not_found = 0;
  bool failed = false;              // an item failed other than as not found
  std::optional<Tier> served_from;  // the last leased item's tier before it was served
  std::string ns, first_key;        // the request's namespace and first key, for its log line
};
// Answers GET_SHM_MANY or GET_SHM_STREAM (op) with the GET_SHM_MANY_OK to send; the leases
// go into *leases (an item answers Busy when the table is full). A stream's GET_SHM_LANDED
// frames go out through `tell` meanwhile; once one fails no more are sent (the reply's send
// then fails too, and the connection closes, its leases with it). A malformed body is the
// outer status: answer it, then close the connection.
Result<Answer> AnswerLeaseBatch(Store* store, LeaseTable* leases, Op op, BodyReader* r,
                                const TellLanded& tell, LeaseBatchTally* tally);

}  // namespace ecstore::net
