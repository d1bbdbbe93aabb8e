// REQUIRE_GPU(): the tests that need a GPU skip without one (or, under EC_REQUIRE_GPU=1 --
// `make test-gpu` -- fail), saying why.
//
// Thread rules: call from a test's body.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/test_util.h"
#include "cuda/cuda.h"

#define REQUIRE_GPU()                                                 \
  do {                                                                \
    std::string why;                                                  \
    if (::ecstore::cuda::DeviceCount(&why) == 0) {                    \
      if (std::getenv("EC_REQUIRE_GPU")) FAIL() << "no GPU: " << why; \
      GTEST_SKIP() << "GPU test skipped: " << why;                    \
    }                                                                 \
  } while (0)
