// The frame header every transport puts before a payload: its checksum catches any change to the bytes it
// covers, and make_header / tag_of / same_operation agree with each other.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "transport/frame.h"

namespace chorus::transport {
namespace {

MessageTag random_tag(std::mt19937_64& rng) {
  MessageTag t;
  t.op = static_cast<OpKind>(1 + rng() % 6);
  t.dtype = static_cast<DataType>(rng() % 4);
  t.has_reduce_op = rng() % 2 == 0;
  t.reduce_op = t.has_reduce_op ? static_cast<ReduceOp>(rng() % 4) : ReduceOp::Sum;
  t.algo = static_cast<AlgoId>(1 + rng() % 4);
  t.root = static_cast<int32_t>(rng() % 64) - 1;
  t.seq = rng();
  t.count = rng() >> 20;
  t.step = static_cast<uint32_t>(rng());
  return t;
}

TEST(FrameHeader, ChecksumCatchesEveryOneBitChangeToTheBytesItCovers) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 50; ++trial) {
    const FrameHeader h = make_header(FrameKind::Data, random_tag(rng), rng() >> 16, rng(), trial);
    ASSERT_TRUE(header_intact(h));
    for (size_t bit = 0; bit < 60 * 8; ++bit) {
      FrameHeader bad = h;
      reinterpret_cast<unsigned char*>(&bad)[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      EXPECT_FALSE(header_intact(bad)) << "trial " << trial << ", bit " << bit;
    }
    // The checksum field itself.
    FrameHeader bad = h;
    bad.checksum ^= 1;
    EXPECT_FALSE(header_intact(bad));
  }
}

TEST(FrameHeader, ChecksumCatchesSwappedWords) {
  // Two lanes hash even and odd words: a swap of two words within one lane, or across lanes, still shows.
  std::mt19937_64 rng(7);
  const FrameHeader h = make_header(FrameKind::Data, random_tag(rng), 4096, rng(), 3);
  uint64_t w[7];
  std::memcpy(w, &h, sizeof(w));
  for (int i = 0; i < 7; ++i) {
    for (int j = i + 1; j < 7; ++j) {
      if (w[i] == w[j]) continue;
      FrameHeader bad = h;
      uint64_t v[7];
      std::memcpy(v, w, sizeof(v));
      std::swap(v[i], v[j]);
      std::memcpy(&bad, v, sizeof(v));
      EXPECT_FALSE(header_intact(bad)) << "words " << i << " and " << j;
    }
  }
}

TEST(FrameHeader, TagSurvivesTheHeader) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 200; ++i) {
    const MessageTag t = random_tag(rng);
    const FrameHeader h = make_header(FrameKind::Data, t, 123, 456, 7);
    EXPECT_TRUE(same_operation(h, t));
    EXPECT_TRUE(same_operation(h, tag_of(h)));
    EXPECT_EQ(h.length, 123u);
    EXPECT_EQ(h.comm_tag, 456u);
    EXPECT_EQ(h.src_rank, 7);
    MessageTag other = t;
    ++other.step;
    EXPECT_FALSE(same_operation(h, other));
  }
}

}  // namespace
}  // namespace chorus::transport
