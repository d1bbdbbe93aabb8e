// <ecstore/cache.h>: the one consumer interface (ecstore::Cache, EntryInfo, ReadLease) --
// cache/cache.h -- batches of entries in pieces of the caller's memory (GetIntoParts,
// PutFromParts) -- cache/cache_parts.h -- and gets and puts of host or device memory
// (GetIntoBuffers, PutFromBuffer) -- cache/buffer_io.h. Thread rules: as the headers it includes
// say.
#pragma once

#include "cache/buffer_io.h"
#include "cache/cache.h"
#include "cache/cache_parts.h"
