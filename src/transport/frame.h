// The wire frame every transport carries: a 64-byte header and a payload.
//
// The header holds the fingerprint of the operation the frame belongs to, so a receiver can tell that the
// sender is in the same operation. The op-kind and algorithm codes below are part of the wire format (the
// transport compares them; only core and algo give them meaning). Fields are in host byte order; Chorus
// supports little-endian hosts only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "chorus/types.h"

namespace chorus::transport {

inline constexpr uint32_t kFrameMagic = 0x31524843;  // "CHR1"

// Pad: the shared-memory transport's filler from where a producer stopped to the end of its ring, when it goes
// back to the ring's start (a header, then `length` bytes that were never written).
enum class FrameKind : uint8_t { Data = 1, Goodbye = 2, Abort = 3, Pad = 4 };

// Which operation a frame belongs to.
enum class OpKind : uint8_t {
  None = 0,
  AllReduce = 1,
  Broadcast = 2,
  Reduce = 3,
  AllGather = 4,
  ReduceScatter = 5,
  AllToAll = 6,
  Gather = 7,
  Scatter = 8,
  Barrier = 9,
  SendRecv = 10,
};
const char* op_kind_name(OpKind kind) noexcept;

// Which algorithm produced a frame (ranks running different algorithms for one call is a mismatch).
enum class AlgoId : uint8_t {
  None = 0,
  Ring = 1,
  Binomial = 2,
  Pairwise = 3,
  Dissemination = 4,
  Linear = 5,
  Direct = 6,
  Tree = 7,
  RecursiveDoubling = 8,
  Rabenseifner = 9,
  ReduceBroadcast = 10,
  Bruck = 11,
  RecursiveHalving = 12,
  ScatterAllgather = 13,
  Chain = 14,
  ReduceScatterGather = 15,
  Hierarchical = 16,
};
const char* algo_name(AlgoId algo) noexcept;

// What a receiver expects, and what a sender stamps, for one frame.
struct MessageTag {
  OpKind op = OpKind::None;
  DataType dtype = DataType::UInt8;
  ReduceOp reduce_op = ReduceOp::Sum;
  AlgoId algo = AlgoId::None;
  int32_t root = -1;
  uint64_t seq = 0;    // collective sequence number, or the per-peer send/recv counter
  uint64_t count = 0;  // the count argument of the call
  uint32_t step = 0;   // index of this frame among the frames between one pair of ranks in this operation
  bool has_reduce_op = false;
  // This rank's call is in its collective's in-place form (core::CollCall::in_place: all_reduce send == recv,
  // reduce_scatter recv == send + rank * count, ...; false for the rooted collectives). Not in the frame: the
  // shm transport chooses the way of an in-place all_reduce's frames apart (ShmTransport::path_class).
  bool in_place = false;
};

struct FrameHeader {
  uint32_t magic;
  uint8_t kind;
  uint8_t op;
  uint8_t dtype;
  uint8_t reduce_op;
  uint8_t algo;
  uint8_t flags;  // bit 0: reduce_op is meaningful
  uint16_t reserved0;
  int32_t root;
  uint32_t step;
  int32_t src_rank;
  uint64_t seq;
  uint64_t count;
  uint64_t length;
  uint64_t comm_tag;
  uint32_t reserved1;
  uint32_t checksum;
};
static_assert(sizeof(FrameHeader) == 64, "the frame header is 64 bytes on the wire");

// The header checksum over its first seven words and the next four bytes: a multiply-xor hash, eight bytes
// at a time, in two independent lanes (even and odd words) so the CPU runs them side by side, half the
// latency of one chain, which every small frame pays twice (sender and receiver). Each step is a bijection of
// its lane's 64-bit state, and so is the merge for either lane with the other fixed, so any change to one word
// changes the merged state; the final fold keeps 32 bits. About twenty times cheaper than a byte-wise FNV-1a,
// which took a quarter of a small all_reduce's CPU time (callgrind).
inline uint32_t header_hash(const uint64_t* w, uint32_t tail) noexcept {  // w: seven words
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
  auto step = [](uint64_t x, uint64_t v) {
    x = (x ^ v) * kMul;
    return x ^ (x >> 29);
  };
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  a = step(a, w[0]);
  b = step(b, w[1]);
  a = step(a, w[2]);
  b = step(b, w[3]);
  a = step(a, w[4]);
  b = step(b, w[5]);
  a = step(a, w[6]);
  b = step(b, tail);
  uint64_t x = (a ^ ((b << 31) | (b >> 33))) * kMul;
  x ^= x >> 32;
  return static_cast<uint32_t>(x);
}

// Writes a complete header (checksum included) to dst: composed in registers and stored once, eight words, so
// a transport can build it in place where it goes (a ring slot) instead of building it and copying it.
// `reserved1` is the transport's own word (covered by the checksum; 0 unless a transport gives it a meaning).
inline void encode_header(void* dst, FrameKind kind, const MessageTag& tag, uint64_t length, uint64_t comm_tag,
                          int src_rank, uint32_t reserved1 = 0) noexcept {
  static_assert(offsetof(FrameHeader, kind) == 4 && offsetof(FrameHeader, algo) == 8 &&
                    offsetof(FrameHeader, root) == 12 && offsetof(FrameHeader, step) == 16 &&
                    offsetof(FrameHeader, src_rank) == 20 && offsetof(FrameHeader, seq) == 24 &&
                    offsetof(FrameHeader, count) == 32 && offsetof(FrameHeader, length) == 40 &&
                    offsetof(FrameHeader, comm_tag) == 48 && offsetof(FrameHeader, reserved1) == 56,
                "encode_header composes the little-endian words of this layout");
  const uint64_t rop = tag.has_reduce_op ? static_cast<uint8_t>(tag.reduce_op) : 0;
  uint64_t w[8];
  w[0] = kFrameMagic | (uint64_t{static_cast<uint8_t>(kind)} << 32) | (uint64_t{static_cast<uint8_t>(tag.op)} << 40) |
         (uint64_t{static_cast<uint8_t>(tag.dtype)} << 48) | (rop << 56);
  w[1] = uint64_t{static_cast<uint8_t>(tag.algo)} | (uint64_t{tag.has_reduce_op ? 1u : 0u} << 8) |
         (uint64_t{static_cast<uint32_t>(tag.root)} << 32);
  w[2] = uint64_t{tag.step} | (uint64_t{static_cast<uint32_t>(src_rank)} << 32);
  w[3] = tag.seq;
  w[4] = tag.count;
  w[5] = length;
  w[6] = comm_tag;
  w[7] = (uint64_t{header_hash(w, reserved1)} << 32) | reserved1;  // reserved1, checksum
  std::memcpy(dst, w, sizeof(w));
}

FrameHeader make_header(FrameKind kind, const MessageTag& tag, uint64_t length, uint64_t comm_tag, int src_rank);
uint32_t header_checksum(const FrameHeader& h) noexcept;
inline bool header_intact(const FrameHeader& h) noexcept {
  return h.magic == kFrameMagic && h.checksum == header_checksum(h);
}
MessageTag tag_of(const FrameHeader& h) noexcept;
// True when the frame's fingerprint (op, dtype, reduce op, algo, root, seq, count, step) equals `tag`.
bool same_operation(const FrameHeader& h, const MessageTag& tag) noexcept;

// "all_reduce #12 (count 1024, float, sum, ring, step 3)" for error messages.
std::string describe(const MessageTag& tag);
// The operation alone, without sequence number or step: "all_reduce (count 1024, float, sum, ring)".
std::string describe_operation(const MessageTag& tag);

// The payload of an Abort frame: an ErrorCode, the rank at fault and the message.
std::string encode_abort(int code, int culprit, const std::string& message);
bool decode_abort(const char* data, size_t len, int* code, int* culprit, std::string* message);

}  // namespace chorus::transport
