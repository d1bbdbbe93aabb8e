#include "base/log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/test_util.h"
#include "store/store.h"

namespace ecstore {
namespace {

// A line the store itself logs (an index rebuilt at open) reaches the host's sink, with its
// level; lines below the sink's level do not.
TEST(Log, TheStoresLinesReachTheHostsSink) {
  testing::TempDir dir;
  Options o;
  o.pool_bytes = 4 << 20;
  {
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto bytes = testing::Payload(1, 4096);
    ASSERT_TRUE(s.value()->Put("ns", "k", testing::Bf16(4096), testing::Span(bytes)).ok());
    ASSERT_TRUE(s.value()->Close().ok());
  }
  std::filesystem::remove(dir.path() + "/index.sqlite");
  Mutex mu;
  std::vector<std::pair<LogLevel, std::string>> lines;
  SetLogSink(
      [&](LogLevel level, std::string_view line) {
        MutexLock l(&mu);
        lines.emplace_back(level, std::string(line));
      },
      LogLevel::kWarn);
  {
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto held = s.value()->Contains("ns", "k");
    EXPECT_TRUE(held.ok() && *held);
    ASSERT_TRUE(s.value()->Close().ok());
  }
  SetLogSink(nullptr);
  MutexLock l(&mu);
  bool rebuilt = false;
  for (auto& [level, line] : lines) {
    EXPECT_GE(static_cast<int>(level), static_cast<int>(LogLevel::kWarn)) << line;
    rebuilt |= level == LogLevel::kWarn && line.find("rebuilding it") != std::string::npos;
  }
  EXPECT_TRUE(rebuilt) << lines.size() << " lines, none the rebuild's warning";
}

}  // namespace
}  // namespace ecstore
