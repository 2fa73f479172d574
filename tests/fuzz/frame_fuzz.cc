// Fuzzes what a receiver does with a data-frame header it did not make: check_data_frame against an
// arbitrary expectation, the descriptions its errors format, and the Abort payload decoder.
//
// Input: 64 bytes of header, then the expectation (see Expect), then an optional Abort payload. When bit 0 of
// Expect::mode is set the checksum is recomputed, so the fuzzer also reaches the checks behind it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "chorus/error.h"
#include "transport/frame.h"
#include "transport/transport.h"

namespace {

using chorus::transport::FrameHeader;
using chorus::transport::MessageTag;

struct Expect {
  uint8_t mode;
  uint8_t op, dtype, reduce_op, algo, has_reduce_op;
  int32_t root;
  uint32_t step;
  uint64_t seq, count, length, comm_tag;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(FrameHeader)) return 0;
  FrameHeader h;
  std::memcpy(&h, data, sizeof(h));
  data += sizeof(h);
  size -= sizeof(h);
  Expect e{};
  std::memcpy(&e, data, std::min(size, sizeof(e)));
  const size_t rest = size > sizeof(e) ? size - sizeof(e) : 0;
  const char* payload = reinterpret_cast<const char*>(data) + (size - rest);
  if (e.mode & 1) h.checksum = chorus::transport::header_checksum(h);

  MessageTag t;
  t.op = static_cast<chorus::transport::OpKind>(e.op);
  t.dtype = static_cast<chorus::DataType>(e.dtype);
  t.reduce_op = static_cast<chorus::ReduceOp>(e.reduce_op);
  t.algo = static_cast<chorus::transport::AlgoId>(e.algo);
  t.has_reduce_op = (e.has_reduce_op & 1) != 0;
  t.root = e.root;
  t.step = e.step;
  t.seq = e.seq;
  t.count = e.count;
  try {
    chorus::transport::check_data_frame(h, t, static_cast<size_t>(e.length), e.comm_tag, 0, 1);
  } catch (const chorus::Error& err) {
    if (std::strlen(err.what()) == 0) __builtin_trap();
  }
  std::string s = chorus::transport::describe(chorus::transport::tag_of(h)) +
                  chorus::transport::describe_operation(chorus::transport::tag_of(h));
  if (s.empty()) __builtin_trap();

  int code = 0, culprit = -1;
  std::string message;
  if (chorus::transport::decode_abort(payload, rest, &code, &culprit, &message)) {
    chorus::Error err(static_cast<chorus::ErrorCode>(code), message, culprit);
    if (message.size() != rest - 8) __builtin_trap();
    // What a sender makes of it must decode to the same fields (the message is capped at 4096 bytes).
    std::string again = chorus::transport::encode_abort(code, culprit, message);
    int code2 = 0, culprit2 = 0;
    std::string message2;
    if (!chorus::transport::decode_abort(again.data(), again.size(), &code2, &culprit2, &message2) || code2 != code ||
        culprit2 != culprit || message2 != message.substr(0, 4096)) {
      __builtin_trap();
    }
  }
  return 0;
}
