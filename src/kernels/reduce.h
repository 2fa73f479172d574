// Typed elementwise reduction kernels: one function per (DataType, ReduceOp), looked up once per operation
// and then called on every slice.
//
// Semantics, per element type:
//   - Integer Sum and Prod wrap modulo 2^bits, signed types included (computed in the unsigned type, so there
//     is no undefined behaviour). Min and Max compare in the element's own (signed or unsigned) type.
//   - Float32 computes in float and Float64 in double. Float16 and BFloat16 are converted to float, combined,
//     and rounded back once per operation (round to nearest even; see kernels/half.h).
//   - Floating Min/Max propagate NaN: if either input is NaN the result is NaN (a's NaN when both are).
//     Otherwise they order -0 below +0 (IEEE 754-2019 minimum/maximum), so that min and max are commutative
//     and the result does not depend on which rank's value arrives first.
//   - ReduceOp::Avg reduces with the Sum kernel; the division by the number of ranks is a separate kernel
//     (div_fn), or is fused into the last sum (sum_div_fn). The fused kernel gives bit-identical results to
//     Sum followed by the division: for Float16/BFloat16 the sum is rounded to the element type before it is
//     divided. Floating types divide for real (no multiplication by a reciprocal), by the divisor converted to
//     the compute type (exact below 2^24 for float and 2^53 for double). Integer types divide the wrapped sum
//     truncating toward zero, in the element's signed or unsigned type.
//
// Buffers: `dst` may be exactly equal to `a`, `b` or `src`, but must not partially overlap any of them. No
// alignment beyond the element type's natural alignment is required. The kernels are pure functions of their
// arguments: thread-safe, no allocation, no exceptions (reduce() below excepted).
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/types.h"

namespace chorus::kernels {

// dst[i] = a[i] (op) b[i] for i in [0, n).
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t n);
// dst[i] = (a[i] + b[i]) / divisor: the final step of ReduceOp::Avg, fused. `divisor` >= 1 and fits in int64.
using SumDivFn = void (*)(void* dst, const void* a, const void* b, size_t n, uint64_t divisor);
// dst[i] = src[i] / divisor. `divisor` >= 1 and fits in int64.
using DivFn = void (*)(void* dst, const void* src, size_t n, uint64_t divisor);

// The instruction sets the kernels are compiled for. One is chosen once per process (active_isa): the best
// the CPU supports, or the one CHORUS_KERNELS names (generic, avx2, avx512). Every table gives bit-identical
// results (tests/kernels_test.cc checks each against the same reference), except for which NaN payload
// survives when both inputs of a floating Sum or Prod are NaN.
enum class Isa : uint8_t { Generic, Avx2, Avx512 };
const char* isa_name(Isa isa) noexcept;
// Compiled into this build and runnable on this CPU (and OS).
bool isa_supported(Isa isa) noexcept;
Isa active_isa() noexcept;

// Kernel for (type, op) in the active instruction set. For ReduceOp::Avg this returns the Sum kernel (the division is separate).
// Returns nullptr for enum values out of range.
ReduceFn reduce_fn(DataType type, ReduceOp op) noexcept;
// Fused sum-and-divide / divide kernels for `type`; nullptr for a value out of range.
SumDivFn sum_div_fn(DataType type) noexcept;
DivFn div_fn(DataType type) noexcept;

// The same in a chosen instruction set (tests, benchmarks): nullptr if it is not supported here.
ReduceFn reduce_fn(DataType type, ReduceOp op, Isa isa) noexcept;
SumDivFn sum_div_fn(DataType type, Isa isa) noexcept;
DivFn div_fn(DataType type, Isa isa) noexcept;

// Convenience: looks up reduce_fn(type, op) and calls it (so Avg only sums, as reduce_fn does).
// Throws Error(InvalidArgument) if type or op is out of range.
void reduce(DataType type, ReduceOp op, void* dst, const void* a, const void* b, size_t n);

}  // namespace chorus::kernels
