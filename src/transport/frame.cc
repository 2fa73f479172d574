#include "transport/frame.h"

#include <cstring>

#include <fmt/format.h>

namespace chorus::transport {

const char* op_kind_name(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::None: return "none";
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Reduce: return "reduce";
    case OpKind::AllGather: return "all_gather";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllToAll: return "all_to_all";
    case OpKind::Gather: return "gather";
    case OpKind::Scatter: return "scatter";
    case OpKind::Barrier: return "barrier";
    case OpKind::SendRecv: return "send/recv";
  }
  return "unknown-op";
}

const char* algo_name(AlgoId algo) noexcept {
  switch (algo) {
    case AlgoId::None: return "none";
    case AlgoId::Ring: return "ring";
    case AlgoId::Binomial: return "binomial";
    case AlgoId::Pairwise: return "pairwise";
    case AlgoId::Dissemination: return "dissemination";
    case AlgoId::Linear: return "linear";
    case AlgoId::Direct: return "direct";
    case AlgoId::Tree: return "tree";
    case AlgoId::RecursiveDoubling: return "recursive_doubling";
    case AlgoId::Rabenseifner: return "rabenseifner";
    case AlgoId::ReduceBroadcast: return "reduce_broadcast";
    case AlgoId::Bruck: return "bruck";
    case AlgoId::RecursiveHalving: return "recursive_halving";
    case AlgoId::ScatterAllgather: return "scatter_allgather";
    case AlgoId::Chain: return "chain";
    case AlgoId::ReduceScatterGather: return "reduce_scatter_gather";
    case AlgoId::Hierarchical: return "hierarchical";
  }
  return "unknown-algo";
}

uint32_t header_checksum(const FrameHeader& h) noexcept {
  static_assert(offsetof(FrameHeader, checksum) == 60, "the checksum covers 7 words and 4 bytes");
  uint64_t w[7];
  std::memcpy(w, &h, sizeof(w));
  uint32_t tail;
  std::memcpy(&tail, reinterpret_cast<const unsigned char*>(&h) + 56, 4);
  return header_hash(w, tail);
}

FrameHeader make_header(FrameKind kind, const MessageTag& tag, uint64_t length, uint64_t comm_tag, int src_rank) {
  FrameHeader h;
  encode_header(&h, kind, tag, length, comm_tag, src_rank);
  return h;
}

MessageTag tag_of(const FrameHeader& h) noexcept {
  MessageTag t;
  t.op = static_cast<OpKind>(h.op);
  t.dtype = static_cast<DataType>(h.dtype);
  t.has_reduce_op = (h.flags & 1) != 0;
  t.reduce_op = static_cast<ReduceOp>(h.reduce_op);
  t.algo = static_cast<AlgoId>(h.algo);
  t.root = h.root;
  t.seq = h.seq;
  t.count = h.count;
  t.step = h.step;
  return t;
}

bool same_operation(const FrameHeader& h, const MessageTag& t) noexcept {
  return h.op == static_cast<uint8_t>(t.op) && h.dtype == static_cast<uint8_t>(t.dtype) &&
         ((h.flags & 1) != 0) == t.has_reduce_op &&
         (!t.has_reduce_op || h.reduce_op == static_cast<uint8_t>(t.reduce_op)) &&
         h.algo == static_cast<uint8_t>(t.algo) && h.root == t.root && h.seq == t.seq && h.count == t.count &&
         h.step == t.step;
}

std::string describe(const MessageTag& t) {
  std::string s = fmt::format("{} #{} (count {}, {}", op_kind_name(t.op), t.seq, t.count, to_string(t.dtype));
  if (t.has_reduce_op) s += fmt::format(", {}", to_string(t.reduce_op));
  if (t.root >= 0) s += fmt::format(", root {}", t.root);
  s += fmt::format(", {}, step {})", algo_name(t.algo), t.step);
  return s;
}

std::string describe_operation(const MessageTag& t) {
  std::string s = fmt::format("{} (count {}, {}", op_kind_name(t.op), t.count, to_string(t.dtype));
  if (t.has_reduce_op) s += fmt::format(", {}", to_string(t.reduce_op));
  if (t.root >= 0) s += fmt::format(", root {}", t.root);
  return s + fmt::format(", {})", algo_name(t.algo));
}

std::string encode_abort(int code, int culprit, const std::string& message) {
  std::string out(8, '\0');
  int32_t c = code, r = culprit;
  std::memcpy(out.data(), &c, 4);
  std::memcpy(out.data() + 4, &r, 4);
  out += message.substr(0, 4096);
  return out;
}

bool decode_abort(const char* data, size_t len, int* code, int* culprit, std::string* message) {
  if (len < 8) return false;
  int32_t c, r;
  std::memcpy(&c, data, 4);
  std::memcpy(&r, data + 4, 4);
  *code = c;
  *culprit = r;
  message->assign(data + 8, len - 8);
  return true;
}

}  // namespace chorus::transport
