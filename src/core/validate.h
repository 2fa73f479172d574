// Argument checks run before an operation sends anything. Each throws Error(InvalidArgument) with a message
// that names the operation, the argument and what to do. The checks are inline, so a valid call pays a few
// compares and no calls; the messages are built out of line, only on failure.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/types.h"

namespace chorus::core {

// Element size of a valid DataType (dtype_size without the call; 0 for values out of range).
constexpr size_t element_size(DataType type) noexcept {
  constexpr uint8_t kSizes[kNumDataTypes] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
  const auto i = static_cast<unsigned>(type);
  return i < static_cast<unsigned>(kNumDataTypes) ? kSizes[i] : 0;
}

namespace detail {
[[noreturn]] void bad_dtype(const char* op, DataType type);
[[noreturn]] void bad_reduce_op(const char* op, ReduceOp rop);
[[noreturn]] void bad_rank_arg(const char* op, const char* what, int value, int size);
[[noreturn]] void bad_bytes(const char* op, size_t count, DataType type, size_t multiplier);
[[noreturn]] void bad_pointer(const char* op, const char* name, size_t bytes);
[[noreturn]] void bad_overlap(const char* op, const void* send, size_t send_bytes, const void* recv,
                              size_t recv_bytes, const char* in_place_rule);
}  // namespace detail

inline void check_dtype(const char* op, DataType type) {
  if (static_cast<unsigned>(type) >= static_cast<unsigned>(kNumDataTypes)) [[unlikely]] {
    detail::bad_dtype(op, type);
  }
}

inline void check_reduce_op(const char* op, ReduceOp rop) {
  if (static_cast<unsigned>(rop) >= static_cast<unsigned>(kNumReduceOps)) [[unlikely]] {
    detail::bad_reduce_op(op, rop);
  }
}

inline void check_rank_arg(const char* op, const char* what, int value, int size) {
  if (value < 0 || value >= size) [[unlikely]] detail::bad_rank_arg(op, what, value, size);
}

// count * element size * multiplier, or an error if it overflows (or the dtype is not one).
inline size_t checked_bytes(const char* op, size_t count, DataType type, size_t multiplier = 1) {
  size_t bytes;
  const size_t esize = element_size(type);
  if (esize == 0 || __builtin_mul_overflow(count, esize, &bytes) || __builtin_mul_overflow(bytes, multiplier, &bytes) ||
      bytes > (size_t{1} << 62)) [[unlikely]] {
    detail::bad_bytes(op, count, type, multiplier);
  }
  return bytes;
}

inline void check_pointer(const char* op, const char* name, const void* p, size_t bytes) {
  if (p == nullptr && bytes > 0) [[unlikely]] detail::bad_pointer(op, name, bytes);
}

// send and recv may be disjoint, or send may equal `in_place_send` exactly (the operation's in-place
// layout); any other overlap is an error.
inline void check_overlap(const char* op, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                          const void* in_place_send, const char* in_place_rule) {
  if (!send || !recv || send_bytes == 0 || recv_bytes == 0) return;
  const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  const bool overlap = s < r + recv_bytes && r < s + send_bytes;
  if (overlap && send != in_place_send) [[unlikely]] {
    detail::bad_overlap(op, send, send_bytes, recv, recv_bytes, in_place_rule);
  }
}

}  // namespace chorus::core
