// Argument checks run before an operation sends anything. Each throws Error(InvalidArgument) with a message
// that names the operation, the argument and what to do.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/types.h"

namespace chorus::core {

void check_dtype(const char* op, DataType type);
void check_reduce_op(const char* op, ReduceOp rop);
void check_rank_arg(const char* op, const char* what, int value, int size);
// count * dtype_size(type) * multiplier, or an error if it overflows.
size_t checked_bytes(const char* op, size_t count, DataType type, size_t multiplier = 1);
void check_pointer(const char* op, const char* name, const void* p, size_t bytes);
// send and recv may be disjoint, or send may equal `in_place_send` exactly (the operation's in-place
// layout); any other overlap is an error.
void check_overlap(const char* op, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                   const void* in_place_send, const char* in_place_rule);

}  // namespace chorus::core
