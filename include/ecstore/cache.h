// <ecstore/cache.h>: the one consumer interface (ecstore::Cache, EntryInfo, ReadLease) --
// store/cache.h -- batches of entries in pieces of the caller's memory (GetIntoParts,
// PutFromParts) -- store/cache_parts.h -- and gets and puts of host or device memory
// (GetIntoBuffers, PutFromBuffer) -- store/buffer_io.h. Thread rules: as the headers it includes
// say.
#pragma once

#include "store/buffer_io.h"
#include "store/cache.h"
#include "store/cache_parts.h"
