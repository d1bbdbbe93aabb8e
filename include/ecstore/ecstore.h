// <ecstore/ecstore.h>: all of the public API -- the embedded store, the Cache interface, a
// daemon's client and server, a cluster of daemons, device loads and the log sink.
// Thread rules: as each header it includes says.
#pragma once

#include "ecstore/cache.h"
#include "ecstore/client.h"
#include "ecstore/cluster.h"
#include "ecstore/device_load.h"
#include "ecstore/log.h"
#include "ecstore/server.h"
#include "ecstore/store.h"
