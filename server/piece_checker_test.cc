// PieceChecker: a TCP put's pieces checked on a helper thread while the next is received.
#include "server/piece_checker.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/test_util.h"
#include "base/units.h"
#include "disk/record.h"
#include "store/store_test_util.h"

namespace ecstore::net {
namespace {

using testing::Bf16;
using testing::Payload;
using testing::TempDir;

constexpr uint64_t kSize = 5 * kMiB + 124;  // six pieces, the last one short

std::unique_ptr<Store> OpenStore(const std::string& dir) {
  return testing::OpenWithPool(dir, 64 * kMiB);
}

// The entry under "k" reads back as `bytes`.
void ExpectHolds(Store* s, const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> got(bytes.size());
  ASSERT_TRUE(s->Get("ns", "k", {got.data(), got.size()}).ok());
  EXPECT_TRUE(got == bytes);
}

// Puts `bytes` as a server receives a PUT: a reservation filled piece by piece (a memcpy
// standing in for the socket read), each piece checked by `checker` (or inline), then
// committed. recv fails at the piece starting at `fail_at` (none where it is past the end).
Status PutInPieces(Store* s, PieceChecker* checker, const std::vector<uint8_t>& bytes,
                   uint64_t fail_at = ~0ull) {
  auto r = s->Reserve("ns", "k", Bf16(bytes.size()), bytes.size());
  if (!r.ok()) return r.status();
  uint8_t* const base = r->bytes().data();
  Status st = ReceivePieces(*r, 0, kMiB, checker, [&](uint8_t* dst, uint64_t n) {
    const uint64_t at = static_cast<uint64_t>(dst - base);
    if (at >= fail_at) return Status::IOError("the client hung up");
    std::memcpy(dst, bytes.data() + at, n);
    return Status::Ok();
  });
  if (!st.ok()) return st;  // the reservation is dropped unused
  return s->Commit(std::move(r).value());
}

TEST(PieceChecker, PiecesCheckedBehindGiveTheChecksumOfAWholePut) {
  TempDir dir;
  auto s = OpenStore(dir.path());
  ASSERT_TRUE(s);
  PieceChecker checker;
  const auto bytes = Payload(3, kSize);
  Status put = PutInPieces(s.get(), &checker, bytes);
  ASSERT_TRUE(put.ok()) << put.ToString();
  auto info = s->Lookup("ns", "k");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->checksum, PayloadChecksum(bytes.data(), kSize));
  ExpectHolds(s.get(), bytes);
  ASSERT_TRUE(s->Flush().ok());  // the disk copy's record checks out too
  ASSERT_TRUE(s->Close().ok());
  s = OpenStore(dir.path());
  ASSERT_TRUE(s);
  ExpectHolds(s.get(), bytes);
}

// The comparison with the entry the key holds runs on the helper too: the same bytes keep the
// entry, a last byte that differs replaces it.
TEST(PieceChecker, AReputIsComparedBehindAsItsPiecesLand) {
  TempDir dir;
  auto s = OpenStore(dir.path());
  ASSERT_TRUE(s);
  PieceChecker checker;  // one per connection, reused put after put
  const auto held = Payload(4, kSize);
  ASSERT_TRUE(PutInPieces(s.get(), &checker, held).ok());
  const auto first = s->Lookup("ns", "k");
  ASSERT_TRUE(PutInPieces(s.get(), &checker, held).ok());
  EXPECT_EQ(s->Lookup("ns", "k")->created_us, first->created_us);  // kept
  auto other = held;
  other.back() ^= 1;
  ASSERT_TRUE(PutInPieces(s.get(), &checker, other).ok());
  EXPECT_EQ(s->Lookup("ns", "k")->checksum, PayloadChecksum(other.data(), kSize));
  ExpectHolds(s.get(), other);
}

// A client that hangs up mid-put: the error is the answer, the entry the key held stays, and
// the connection's checker serves its next put.
TEST(PieceChecker, AFailedReceiveLeavesTheHeldEntryAndTheCheckerReusable) {
  TempDir dir;
  auto s = OpenStore(dir.path());
  ASSERT_TRUE(s);
  PieceChecker checker;
  const auto held = Payload(5, kSize), next = Payload(6, kSize);
  ASSERT_TRUE(PutInPieces(s.get(), &checker, held).ok());
  for (uint64_t fail_at : {uint64_t{0}, 3 * kMiB, 5 * kMiB}) {
    Status st = PutInPieces(s.get(), &checker, next, fail_at);
    EXPECT_TRUE(st.IsIOError()) << st.ToString();
    EXPECT_EQ(s->Lookup("ns", "k")->checksum, PayloadChecksum(held.data(), kSize));
  }
  EXPECT_EQ(s->Stats()->pool().entries, 1u);
  ASSERT_TRUE(PutInPieces(s.get(), &checker, next).ok());
  EXPECT_EQ(s->Lookup("ns", "k")->checksum, PayloadChecksum(next.data(), kSize));
  ExpectHolds(s.get(), next);
}

TEST(PieceChecker, AConnectionStartsOneForItsFirstPutOfSeveralPieces) {
  EXPECT_FALSE(CheckPiecesBehind(-1, 2));  // both cores busy with the transfer itself
  EXPECT_TRUE(CheckPiecesBehind(-1, 4));
  EXPECT_TRUE(CheckPiecesBehind(1, 1));
  EXPECT_FALSE(CheckPiecesBehind(0, 64));
  std::unique_ptr<PieceChecker> slot;
  EXPECT_EQ(CheckerFor(slot, false, 64 * kMiB, kMiB), nullptr);
  EXPECT_EQ(CheckerFor(slot, true, kMiB, kMiB), nullptr);  // one piece: nothing to overlap
  EXPECT_EQ(slot, nullptr);
  PieceChecker* first = CheckerFor(slot, true, 2 * kMiB, kMiB);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(CheckerFor(slot, true, 60 * kMiB, kMiB), first);
}

}  // namespace
}  // namespace ecstore::net
