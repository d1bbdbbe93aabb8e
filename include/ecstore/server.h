// <ecstore/server.h>: serving a store from this process (ecstore::net::Server) -- server/server.h.
// Thread rules: as the header it includes says.
#pragma once

#include "server/server.h"
