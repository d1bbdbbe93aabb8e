// GetIntoParts / PutFromParts on an embedded store: entries in one part and in several,
// absent keys and wrong sizes in the same batch.
#include "cache/cache_parts.h"

#include <gtest/gtest.h>

#include "base/test_util.h"
#include "store/store.h"

namespace ecstore {
namespace {

using testing::Payload;
using testing::TempDir;

std::unique_ptr<Store> Open(const TempDir& dir) {
  Options o;
  o.pool_bytes = 16 << 20;
  auto s = Store::Open(dir.path(), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// Splits buf into pieces of the given sizes, in order.
Parts Split(std::vector<uint8_t>& buf, const std::vector<size_t>& sizes) {
  Parts p;
  size_t at = 0;
  for (size_t n : sizes) {
    p.emplace_back(buf.data() + at, n);
    at += n;
  }
  return p;
}

TEST(CacheParts, PiecesPutTogetherComeBackInOtherPieces) {
  TempDir dir;
  auto s = Open(dir);
  std::vector<uint8_t> a = Payload(1, 300000), b = Payload(2, 4096 * 3 + 7);
  std::vector<Status> put =
      PutFromParts(*s, "sgl", {"a", "b"}, {Split(a, {100000, 200000}), Split(b, {b.size()})});
  for (const Status& st : put) ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s->Lookup("sgl", "a")->meta.dtype, DType::kU8);
  EXPECT_EQ(s->Lookup("sgl", "a")->bytes, a.size());

  // a read whole, b in three pieces of other sizes than it was written in.
  std::vector<uint8_t> ga(a.size()), gb(b.size());
  std::vector<Status> got =
      GetIntoParts(*s, "sgl", {"a", "b"}, {Split(ga, {ga.size()}), Split(gb, {5, 8192, 4098})});
  for (const Status& st : got) ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ga, a);
  EXPECT_EQ(gb, b);
}

TEST(CacheParts, AbsentAndWrongSizedEntriesFailAloneAndSayWhy) {
  TempDir dir;
  auto s = Open(dir);
  std::vector<uint8_t> a = Payload(3, 8192);
  ASSERT_TRUE(PutFromParts(*s, "sgl", {"a"}, {Split(a, {a.size()})})[0].ok());

  std::vector<uint8_t> small(4096), big(10000), pieced(8192), whole(8192), gone(64);
  std::vector<Status> got =
      GetIntoParts(*s, "sgl", {"a", "a", "a", "a", "gone"},
                   {Split(small, {4096}), Split(big, {9000, 1000}), Split(pieced, {4000, 4192}),
                    Split(whole, {8192}), Split(gone, {64})});
  EXPECT_TRUE(got[0].IsInvalidArgument()) << got[0].ToString();
  EXPECT_TRUE(got[1].IsInvalidArgument()) << got[1].ToString();
  EXPECT_NE(got[1].message().find("8192 bytes but its buffers hold 10000"), std::string::npos)
      << got[1].message();
  EXPECT_TRUE(got[2].ok()) << got[2].ToString();
  EXPECT_TRUE(got[3].ok()) << got[3].ToString();
  EXPECT_TRUE(got[4].IsNotFound()) << got[4].ToString();
  EXPECT_EQ(pieced, a);
  EXPECT_EQ(whole, a);
  EXPECT_EQ(s->Lookup("sgl", "a")->bytes, a.size()) << "a failed read changes nothing stored";
}

TEST(CacheParts, GivenMetasDescribeTheEntriesAndMismatchedListsAreRefused) {
  TempDir dir;
  auto s = Open(dir);
  std::vector<uint8_t> a = Payload(4, 4096);
  TensorMeta meta{DType::kBF16, {16, 128}};
  ASSERT_TRUE(PutFromParts(*s, "sgl", {"a"}, {Split(a, {1024, 3072})}, {meta})[0].ok());
  EXPECT_EQ(s->Lookup("sgl", "a")->meta.shape, (std::vector<int64_t>{16, 128}));

  std::vector<Status> bad = GetIntoParts(*s, "sgl", {"a", "b"}, {Split(a, {4096})});
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_TRUE(bad[0].IsInvalidArgument());
  EXPECT_TRUE(
      PutFromParts(*s, "sgl", {"a"}, {Split(a, {4096})}, {meta, meta})[0].IsInvalidArgument());
}

}  // namespace
}  // namespace ecstore
