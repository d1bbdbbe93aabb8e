#include "disk/record.h"

#include <gtest/gtest.h>
#include <xxhash.h>  // the library's default (non-dispatching) XXH3, for reference

#include <cmath>
#include <random>

#include "base/embedding.h"
#include "base/test_util.h"
#include "disk/codec.h"

namespace ecstore {
namespace {

TEST(Record, HeaderRoundTrip) {
  RecordInfo r;
  r.seq = 77;
  r.ns = "qwen";
  r.key = std::string(256, 'k');
  r.meta = {DType::kBF16, {400, 3584}, 12.5};
  r.raw_len = r.stored_len = 400 * 3584 * 2;
  r.checksum = 0xdeadbeef;
  r.created_us = 123;
  AlignedBuffer b(kBlockSize);
  EncodeHeader(r, b.data());
  auto d = DecodeHeader(b.data());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->key, r.key);
  EXPECT_EQ(d->ns, "qwen");
  EXPECT_EQ(d->meta.shape, r.meta.shape);
  EXPECT_EQ(d->meta.recompute_cost, 12.5);
  EXPECT_EQ(d->checksum, r.checksum);
  EXPECT_EQ(d->seq, 77u);
  b.data()[200] ^= 1;
  EXPECT_TRUE(DecodeHeader(b.data()).status().IsCorruption());
}

TEST(Record, TombstoneSaysWhichSegmentItsRecordWasIn) {
  RecordInfo t;
  t.flags = RecordInfo::kTombstone;
  t.seq = 9;
  t.target_seq = 8;
  t.hides_segment = 41;
  t.ns = "ns";
  t.key = "k";
  AlignedBuffer b(kBlockSize);
  EncodeHeader(t, b.data());
  auto d = DecodeHeader(b.data());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->tombstone());
  EXPECT_EQ(d->target_seq, 8u);
  EXPECT_EQ(d->hides_segment, 41u);
  b.data()[76] ^= 1;
  EXPECT_TRUE(DecodeHeader(b.data()).status().IsCorruption());
}

// Payload checksums go through xxHash's AVX2/AVX-512 dispatch where the library has it: the
// digests must be the ones every other build computes (records on disk outlive builds), whole
// or fed in uneven pieces as a disk read lands.
TEST(Record, PayloadChecksumIsPlainXxh3WholeOrInPieces) {
  std::mt19937_64 rng(7);
  for (uint64_t len : {0ull, 1ull, 240ull, 4096ull, (1ull << 20) + 7, 12ull << 20}) {
    std::vector<uint8_t> data(len);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const uint64_t want = XXH3_64bits(data.data(), len);
    EXPECT_EQ(PayloadChecksum(data.data(), len), want) << len;
    PayloadHasher h(len);
    for (uint64_t at = 0, piece = 1; at < len; at += piece, piece = piece * 3 + 61)
      h.Update(data.data() + at, std::min(piece, len - at));
    ASSERT_TRUE(h.complete()) << len;
    EXPECT_EQ(h.Digest(), want) << len;
  }
}

TEST(Codec, BytePlanesRoundTripWhenTheyPay) {
  // Low-entropy bf16 (few distinct values) compresses; check a byte-exact round trip.
  std::vector<uint8_t> raw(1 << 20);
  for (size_t i = 0; i < raw.size(); i += 2) {
    raw[i] = static_cast<uint8_t>(i % 7);
    raw[i + 1] = 0x3f;
  }
  AlignedBuffer out;
  uint64_t stored = 0;
  Codec c = CompressPayload(raw.data(), raw.size(), 2, 0.10, &out, &stored);
  ASSERT_EQ(c, Codec::kLz4BytePlanes);
  EXPECT_LT(stored, raw.size() * 9 / 10);
  std::vector<uint8_t> back(raw.size());
  ASSERT_TRUE(DecompressPayload(c, out.data(), stored, back.data(), back.size(), 2).ok());
  EXPECT_EQ(back, raw);
  out.data()[3] ^= 0xff;
  std::vector<uint8_t> bad(raw.size());
  Status st = DecompressPayload(c, out.data(), stored, bad.data(), bad.size(), 2);
  EXPECT_TRUE(!st.ok() || bad != raw);
}

TEST(Codec, IncompressibleDataStaysRaw) {
  auto raw = testing::Payload(3, 1 << 20);
  AlignedBuffer out;
  uint64_t stored = 0;
  EXPECT_EQ(CompressPayload(raw.data(), raw.size(), 2, 0.10, &out, &stored), Codec::kNone);
  auto emb = SyntheticEmbedding(1 << 19, 5);
  Codec c = CompressPayload(emb.data(), emb.size(), 2, 0.10, &out, &stored);
  // Real-looking embeddings: whichever way it goes, the 10% rule must hold.
  if (c != Codec::kNone) {
    EXPECT_LE(stored, emb.size() * 9 / 10);
  }
}

}  // namespace
}  // namespace ecstore
