// The kernel tables behind kernels/reduce.h: one table per instruction set, each built from the same loop
// templates (kernels/reduce_loops.inc) compiled for that instruction set. Internal to src/kernels.
#pragma once

#include <array>
#include <cstddef>

#include "chorus/types.h"
#include "kernels/reduce.h"

// GCC's ivdep: no partial overlap between dst and the inputs (see reduce_loops.inc). Clang vectorises the
// loops with a runtime alias check of its own; its equivalent pragma (vectorize(assume_safety)) would warn on
// every loop it cannot vectorise, such as integer division.
#if defined(__GNUC__) && !defined(__clang__)
#define CHORUS_IVDEP _Pragma("GCC ivdep")
#else
#define CHORUS_IVDEP
#endif

namespace chorus::kernels {

// Elements per block of the inner loops: a multiple of every vector width of interest, and small enough that
// the 16-bit types' float staging buffers stay in L1.
inline constexpr size_t kBlock = 64;

struct TypeKernels {
  std::array<ReduceFn, kNumReduceOps> reduce;
  SumDivFn sum_div;
  DivFn div;
};
// One row per DataType, indexed by the enum's value.
using KernelTable = std::array<TypeKernels, kNumDataTypes>;

// Tables compiled into this build. The AVX ones are nullptr where the compiler cannot target them (not x86-64,
// or not GCC/Clang); whether the CPU can run them is a separate, runtime question (isa_supported).
const KernelTable& generic_table() noexcept;
const KernelTable* avx2_table() noexcept;
const KernelTable* avx512_table() noexcept;

}  // namespace chorus::kernels
