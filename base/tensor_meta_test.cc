#include "base/tensor_meta.h"

#include <gtest/gtest.h>

#include "base/safetensors.h"
#include "base/test_util.h"

namespace ecstore {
namespace {

TEST(TensorMeta, ParsesDTypesCaseInsensitively) {
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("F32"), DType::kF32);
  Status st = ParseDType("bf17").status();
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_NE(st.message().find("BF16"), std::string::npos) << "message lists valid dtypes";
}

TEST(TensorMeta, ByteCountMustMatchShape) {
  TensorMeta m{DType::kBF16, {400, 3584}};
  EXPECT_TRUE(ValidateMeta(m, 400 * 3584 * 2).ok());
  Status st = ValidateMeta(m, 400 * 3584 * 2 - 1);
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_NE(st.message().find("2867200"), std::string::npos);
  EXPECT_TRUE(ValidateMeta({DType::kBF16, {-1, 4}}, 0).IsInvalidArgument());
  EXPECT_TRUE(ValidateMeta({DType::kBF16, std::vector<int64_t>(9, 1)}, 2).IsInvalidArgument());
}

TEST(TensorMeta, ParsesShapes) {
  EXPECT_EQ(*ParseShape("400,3584"), (std::vector<int64_t>{400, 3584}));
  EXPECT_EQ(*ParseShape("2x3"), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(ParseShape("4,,5").ok());
  EXPECT_FALSE(ParseShape("a,b").ok());
  EXPECT_FALSE(ParseShape("").ok());
}

TEST(TensorMeta, ValidatesKeys) {
  EXPECT_TRUE(ValidateKey(std::string(64, 'a')).ok());
  EXPECT_TRUE(ValidateKey("lora:abc123").ok());
  EXPECT_TRUE(ValidateKey("").IsInvalidArgument());
  EXPECT_TRUE(ValidateKey(std::string(257, 'a')).IsInvalidArgument());
  EXPECT_TRUE(ValidateKey(std::string("a\nb")).IsInvalidArgument());
  EXPECT_TRUE(ValidateNamespace("qwen2.5-vl-7b").ok());
  EXPECT_TRUE(ValidateNamespace(std::string("q\x01")).IsInvalidArgument());
  // New entries: one alphabet that is also a safe path component.
  for (const char* good : {"0123abcdef", "lora:abc", "123e4567-e89b-12d3-a456-426614174000", "a.b"})
    EXPECT_TRUE(ValidateNewKey(good).ok()) << good;
  for (const char* bad : {"a/b", "..", ".", "a\\b", "/abs", ""})
    EXPECT_TRUE(ValidateNewKey(bad).IsInvalidArgument()) << bad;
  EXPECT_TRUE(ValidateNewNamespace("m/x").IsInvalidArgument());
  EXPECT_TRUE(ValidateNewNamespace("").ok());
}

TEST(Safetensors, RoundTripsAndRejectsTruncation) {
  testing::TempDir dir;
  TensorMeta m{DType::kBF16, {16, 32}};
  auto bytes = testing::Payload(1, 16 * 32 * 2);
  std::string path = dir.sub("x.safetensors");
  ASSERT_TRUE(safetensors::Save(path, m, testing::Span(bytes)).ok());
  TensorMeta got;
  std::string data;
  ASSERT_TRUE(safetensors::Load(path, &got, &data).ok());
  EXPECT_EQ(got.shape, m.shape);
  EXPECT_EQ(got.dtype, DType::kBF16);
  EXPECT_EQ(0, std::memcmp(data.data(), bytes.data(), bytes.size()));

  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  Status st = safetensors::Load(path, &got, &data);
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_NE(st.message().find("truncated"), std::string::npos) << st.ToString();
  std::filesystem::resize_file(path, 5);
  EXPECT_TRUE(safetensors::Load(path, &got, &data).IsInvalidArgument());
}

}  // namespace
}  // namespace ecstore
