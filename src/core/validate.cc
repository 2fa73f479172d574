#include "core/validate.h"

#include <fmt/format.h>

#include "base/error.h"

namespace chorus::core {

namespace {
[[noreturn]] void invalid(const std::string& msg) { base::throw_error(ErrorCode::InvalidArgument, msg); }
}  // namespace

void check_dtype(const char* op, DataType type) {
  if (static_cast<int>(type) < 0 || static_cast<int>(type) >= kNumDataTypes) {
    invalid(fmt::format("{}: unsupported data type value {}", op, static_cast<int>(type)));
  }
}

void check_reduce_op(const char* op, ReduceOp rop) {
  if (static_cast<int>(rop) < 0 || static_cast<int>(rop) >= kNumReduceOps) {
    invalid(fmt::format("{}: unsupported reduction operator value {}", op, static_cast<int>(rop)));
  }
}

void check_rank_arg(const char* op, const char* what, int value, int size) {
  if (value < 0 || value >= size) {
    invalid(fmt::format("{}: {} {} is out of range for a communicator of {} rank{} (valid: 0..{})", op, what, value,
                        size, size == 1 ? "" : "s", size - 1));
  }
}

size_t checked_bytes(const char* op, size_t count, DataType type, size_t multiplier) {
  size_t esize = dtype_size(type);
  size_t bytes;
  if (__builtin_mul_overflow(count, esize, &bytes) || __builtin_mul_overflow(bytes, multiplier, &bytes) ||
      bytes > (size_t{1} << 62)) {
    invalid(fmt::format("{}: count {} of {} x {} overflows the addressable byte range", op, count, to_string(type),
                        multiplier));
  }
  return bytes;
}

void check_pointer(const char* op, const char* name, const void* p, size_t bytes) {
  if (p == nullptr && bytes > 0) invalid(fmt::format("{}: {} is null but {} bytes are needed", op, name, bytes));
}

void check_overlap(const char* op, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                   const void* in_place_send, const char* in_place_rule) {
  if (!send || !recv || send_bytes == 0 || recv_bytes == 0) return;
  auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  bool overlap = s < r + recv_bytes && r < s + send_bytes;
  if (!overlap || send == in_place_send) return;
  invalid(fmt::format("{}: send [{}, +{}) and recv [{}, +{}) partially overlap; use disjoint buffers, or in place "
                      "{}",
                      op, send, send_bytes, recv, recv_bytes, in_place_rule));
}

}  // namespace chorus::core
