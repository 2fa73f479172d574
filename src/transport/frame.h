// The wire frame every transport carries: a 64-byte header and a payload.
//
// The header holds the fingerprint of the operation the frame belongs to, so a receiver can tell that the
// sender is in the same operation. The op-kind and algorithm codes below are part of the wire format (the
// transport compares them; only core and algo give them meaning). Fields are in host byte order; Chorus
// supports little-endian hosts only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "chorus/types.h"

namespace chorus::transport {

inline constexpr uint32_t kFrameMagic = 0x31524843;  // "CHR1"

enum class FrameKind : uint8_t { Data = 1, Goodbye = 2, Abort = 3 };

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
