// <ecstore/device_load.h>: a step's entries into device memory (GetManyToDevice) --
// cache/device_load.h. Thread rules: as the header it includes says.
#pragma once

#include "cache/device_load.h"
