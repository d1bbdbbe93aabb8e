// <ecstore/store.h>: the embedded store (ecstore::Store, Options) -- store/store.h.
// Thread rules: as the header it includes says.
#pragma once

#include "store/store.h"
