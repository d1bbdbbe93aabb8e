// <ecstore/client.h>: a daemon's client (ecstore::net::Client, ClientOptions) -- net/client.h.
// Thread rules: as the header it includes says.
#pragma once

#include "net/client.h"
