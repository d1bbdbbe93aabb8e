// Helpers shared by the tests that open a store. Test-only.
//
// Thread rules: call from a test's body.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "store/store.h"

namespace ecstore::testing {

// A store over `dir` with a pool of `pool_bytes` and the other options at their defaults;
// nullptr (and a test failure saying why) where it cannot open.
inline std::unique_ptr<Store> OpenWithPool(const std::string& dir, uint64_t pool_bytes) {
  Options o;
  o.pool_bytes = pool_bytes;
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

}  // namespace ecstore::testing
