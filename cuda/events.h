// Events on a stream the caller owns (a cudaStream_t as an integer): a mark after the work
// queued there so far, waited for on its own -- so that a copy can be cut in pieces, all
// enqueued at once, and each piece used as soon as it has landed.
// Thread rules: an event is recorded on one thread and waited for once, on any thread.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace ecstore::cuda {

// Recorded on `stream` after the work queued there; WaitEvent waits for it and frees it.
// Every recorded event must be waited for once.
Result<uintptr_t> RecordEvent(int device, uintptr_t stream);
Status WaitEvent(int device, uintptr_t event);

}  // namespace ecstore::cuda
