// <ecstore/log.h>: routing the library's log lines (SetLogSink) -- base/log.h.
// Thread rules: as the header it includes says.
#pragma once

#include "base/log.h"
