// <ecstore/cache.h>: the one consumer interface (ecstore::Cache, EntryInfo, ReadLease) --
// store/cache.h -- and batches of entries in pieces of the caller's memory (GetIntoParts,
// PutFromParts) -- store/cache_parts.h. Thread rules: as the headers it includes say.
#pragma once

#include "store/cache.h"
#include "store/cache_parts.h"
