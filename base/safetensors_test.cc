#include "base/safetensors.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>

#include "base/test_util.h"

namespace ecstore::safetensors {
namespace {

std::string WithHeader(const std::string& json) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

TEST(Safetensors, RoundTrip) {
  testing::TempDir dir;
  TensorMeta m{DType::kBF16, {4, 8}};
  auto bytes = testing::Payload(1, 64);
  ASSERT_TRUE(SaveDurable(dir.sub("a.safetensors"), m, testing::Span(bytes)).ok());
  TensorMeta got;
  std::string data;
  ASSERT_TRUE(Load(dir.sub("a.safetensors"), &got, &data).ok());
  EXPECT_EQ(got.shape, m.shape);
  EXPECT_EQ(0, std::memcmp(data.data(), bytes.data(), 64));
}

// Hostile headers are refused quickly and without building a huge tree.
TEST(Safetensors, HostileHeadersAreRefusedCheaply) {
  testing::TempDir dir;
  const std::string path = dir.sub("evil.safetensors");
  {
    std::ofstream f(path, std::ios::binary);
    f << WithHeader(std::string(100 << 20, '['));  // 100 MiB of '['
  }
  auto start = std::chrono::steady_clock::now();
  TensorMeta m;
  std::string data;
  Status st = Load(path, &m, &data);
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_NE(st.message().find("larger than"), std::string::npos) << st.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Under the size cap, but nested: refused by depth.
  std::string nested = WithHeader(std::string(30000, '[') + std::string(30000, ']'));
  auto r =
      ParseHeader({reinterpret_cast<const uint8_t*>(nested.data()), nested.size()}, nested.size());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("deeper"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace ecstore::safetensors
