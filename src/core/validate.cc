#include "core/validate.h"

#include <fmt/format.h>

#include "base/error.h"

namespace chorus::core::detail {

namespace {
[[noreturn]] void invalid(const std::string& msg) { base::throw_error(ErrorCode::InvalidArgument, msg); }
}  // namespace

void bad_dtype(const char* op, DataType type) {
  invalid(fmt::format("{}: unsupported data type value {}", op, static_cast<int>(type)));
}

void bad_reduce_op(const char* op, ReduceOp rop) {
  invalid(fmt::format("{}: unsupported reduction operator value {}", op, static_cast<int>(rop)));
}

void bad_rank_arg(const char* op, const char* what, int value, int size) {
  invalid(fmt::format("{}: {} {} is out of range for a communicator of {} rank{} (valid: 0..{})", op, what, value,
                      size, size == 1 ? "" : "s", size - 1));
}

void bad_bytes(const char* op, size_t count, DataType type, size_t multiplier) {
  if (element_size(type) == 0) bad_dtype(op, type);
  invalid(fmt::format("{}: count {} of {} x {} overflows the addressable byte range", op, count, to_string(type),
                      multiplier));
}

void bad_pointer(const char* op, const char* name, size_t bytes) {
  invalid(fmt::format("{}: {} is null but {} bytes are needed", op, name, bytes));
}

void bad_overlap(const char* op, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                 const char* in_place_rule) {
  invalid(fmt::format("{}: send [{}, +{}) and recv [{}, +{}) partially overlap; use disjoint buffers, or in place "
                      "{}",
                      op, send, send_bytes, recv, recv_bytes, in_place_rule));
}

}  // namespace chorus::core::detail
