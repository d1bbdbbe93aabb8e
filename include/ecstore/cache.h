// <ecstore/cache.h>: the one consumer interface (ecstore::Cache, EntryInfo, ReadLease) --
// store/cache.h. Thread rules: as the header it includes says.
#pragma once

#include "store/cache.h"
