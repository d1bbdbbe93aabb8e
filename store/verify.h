// VerifyStore: the whole-store check behind Store::Verify. It reads every entry's copies
// through the keydir's public calls (a snapshot, quiet leases, the durable tier) and checks
// them against their checksums; a corrupt copy is dropped through the keydir, as a read that
// found it would. It keeps no state of its own between calls.
// Private to store/.
// Thread rules: runs on the caller's thread, beside requests and the evictors; it holds no
// keydir lock across a read.
#pragma once

#include <cstdint>
#include <functional>

#include "store/keydir.h"

namespace ecstore {

// progress(done, total) is called as entries are checked.
Result<VerifyReport> VerifyStore(Keydir* kd,
                                 const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace ecstore
