// The frame header every transport puts before a payload: its checksum catches any change to the bytes it
// covers, make_header / tag_of / same_operation agree with each other, the header composed in registers
// (encode_header) is the field-by-field layout, and the per-peer frame numbers of the step primitives restart
// per operation.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "algo/primitives.h"
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

// The reference: the struct filled one field at a time (padding zero), the checksum over the result.
FrameHeader field_by_field(FrameKind kind, const MessageTag& t, uint64_t length, uint64_t comm_tag, int src) {
  FrameHeader h;
  std::memset(&h, 0, sizeof(h));
  h.magic = kFrameMagic;
  h.kind = static_cast<uint8_t>(kind);
  h.op = static_cast<uint8_t>(t.op);
  h.dtype = static_cast<uint8_t>(t.dtype);
  h.reduce_op = t.has_reduce_op ? static_cast<uint8_t>(t.reduce_op) : 0;
  h.algo = static_cast<uint8_t>(t.algo);
  h.flags = t.has_reduce_op ? 1 : 0;
  h.root = t.root;
  h.step = t.step;
  h.src_rank = src;
  h.seq = t.seq;
  h.count = t.count;
  h.length = length;
  h.comm_tag = comm_tag;
  h.checksum = header_checksum(h);
  return h;
}

TEST(FrameHeader, EncodedInPlaceEqualsTheFieldByFieldLayout) {
  std::mt19937_64 rng(2026);
  alignas(64) unsigned char slot[128];
  for (int i = 0; i < 500; ++i) {
    const MessageTag t = random_tag(rng);
    const uint64_t length = rng() >> 8, comm = rng();
    const int src = static_cast<int>(rng() % 1000) - 1;
    const auto kind = static_cast<FrameKind>(1 + rng() % 3);
    std::memset(slot, 0xAB, sizeof(slot));
    encode_header(slot + 64 * (i % 2), kind, t, length, comm, src);
    const FrameHeader want = field_by_field(kind, t, length, comm, src);
    ASSERT_EQ(std::memcmp(slot + 64 * (i % 2), &want, sizeof(want)), 0) << "trial " << i;
    FrameHeader got;
    std::memcpy(&got, slot + 64 * (i % 2), sizeof(got));
    EXPECT_TRUE(header_intact(got));
    // Nothing outside the 64 bytes is touched.
    const unsigned char* other = slot + 64 * (1 - i % 2);
    for (int b = 0; b < 64; ++b) ASSERT_EQ(other[b], 0xAB);
  }
}

TEST(StepNumbers, RestartPerOperationAndContinueWithinOne) {
  algo::Scratch scratch;
  scratch.ensure_ranks(4);
  // Operation 7: two frames to rank 1, one to rank 3, one from rank 2.
  EXPECT_EQ(scratch.next_send_step(1, 7), 0u);
  EXPECT_EQ(scratch.next_send_step(1, 7), 1u);
  EXPECT_EQ(scratch.next_send_step(3, 7), 0u);
  EXPECT_EQ(scratch.next_recv_step(2, 7), 0u);
  // A second stage of the same operation numbers on; the directions are separate.
  EXPECT_EQ(scratch.next_send_step(1, 7), 2u);
  EXPECT_EQ(scratch.next_recv_step(1, 7), 0u);
  // The next operation starts every counter it touches at 0, whatever the previous one left.
  EXPECT_EQ(scratch.next_send_step(1, 8), 0u);
  EXPECT_EQ(scratch.next_send_step(3, 9), 0u);
  EXPECT_EQ(scratch.next_recv_step(2, 9), 0u);
  EXPECT_EQ(scratch.next_recv_step(2, 9), 1u);
  // Growing keeps the counters that exist.
  scratch.ensure_ranks(8);
  EXPECT_EQ(scratch.next_recv_step(2, 9), 2u);
  EXPECT_EQ(scratch.next_send_step(7, 9), 0u);
  // Sequence number 0 (a communicator's first collective) counts from 0 on a fresh scratch.
  algo::Scratch fresh;
  fresh.ensure_ranks(2);
  EXPECT_EQ(fresh.next_send_step(1, 0), 0u);
  EXPECT_EQ(fresh.next_send_step(1, 0), 1u);
}

}  // namespace
}  // namespace chorus::transport
