#include "kernels/reduce.h"

#include <array>
#include <bit>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "base/error.h"
#include "base/logging.h"
#include "kernels/half.h"
#include "kernels/kernel_table.h"

namespace chorus::kernels {

// ---- the generic table: the loop templates compiled for the baseline instruction set ----

namespace generic {
namespace {

// Element-by-element conversions (kernels/half.h); branch-free, so the compiler may vectorise them too.
struct HalfConv {
  static void to_float(const uint16_t* s, float* f, size_t n) noexcept {
    for (size_t j = 0; j < n; ++j) f[j] = half_to_float(s[j]);
  }
  static void from_float(const float* f, uint16_t* s, size_t n) noexcept {
    for (size_t j = 0; j < n; ++j) s[j] = float_to_half(f[j]);
  }
};
struct Bf16Conv {
  static void to_float(const uint16_t* s, float* f, size_t n) noexcept {
    for (size_t j = 0; j < n; ++j) f[j] = bf16_to_float(s[j]);
  }
  static void from_float(const float* f, uint16_t* s, size_t n) noexcept {
    for (size_t j = 0; j < n; ++j) s[j] = float_to_bf16(f[j]);
  }
};

#include "kernels/reduce_loops.inc"

constexpr KernelTable kTable = make_table(std::make_index_sequence<kNumDataTypes>());

}  // namespace
}  // namespace generic

const KernelTable& generic_table() noexcept { return generic::kTable; }

// ---- choosing a table ----

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// F16C from CPUID leaf 1 (ECX bit 29): clang before 16 does not accept "f16c" in __builtin_cpu_supports. The
// OS-support check comes with the AVX feature it is combined with. Read once: the kernel lookup runs on every
// call, and CPUID traps to the hypervisor in a virtual machine (about 1 us each, measured: it tripled the
// 8-byte all_reduce time when it ran per call).
bool cpu_has_f16c() noexcept {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has;
}
#endif

bool cpu_has(Isa isa) noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 register state (XGETBV).
  switch (isa) {
    case Isa::Generic:
      return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && cpu_has_f16c();
  }
  return false;
#else
  return isa == Isa::Generic;
#endif
}

const KernelTable* table_of(Isa isa) noexcept {
  switch (isa) {
    case Isa::Generic:
      return &generic_table();
    case Isa::Avx2:
      return avx2_table();
    case Isa::Avx512:
      return avx512_table();
  }
  return nullptr;
}

// The best supported instruction set, or the one CHORUS_KERNELS names (generic, avx2 or avx512; an unknown or
// unsupported name is reported once and ignored). Chosen on first use and kept for the process's life.
Isa choose_isa() {
  Isa best = Isa::Generic;
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (isa_supported(isa)) best = isa;
  }
  const char* env = std::getenv("CHORUS_KERNELS");
  if (env == nullptr || *env == '\0') return best;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (std::string_view(env) != isa_name(isa)) continue;
    if (isa_supported(isa)) return isa;
    base::log_warn("CHORUS_KERNELS={}: this {} cannot run it; using {}", env,
                   table_of(isa) == nullptr ? "build" : "CPU", isa_name(best));
    return best;
  }
  base::log_warn("CHORUS_KERNELS={}: unknown (expected generic, avx2 or avx512); using {}", env, isa_name(best));
  return best;
}

const TypeKernels* kernels_in(const KernelTable* table, DataType type) noexcept {
  const auto t = static_cast<size_t>(type);
  return table != nullptr && t < table->size() ? &(*table)[t] : nullptr;
}

const TypeKernels* kernels_for(DataType type, Isa isa) noexcept {
  return kernels_in(isa_supported(isa) ? table_of(isa) : nullptr, type);
}

// The active ISA's table, looked up once: reduce_fn runs on every reducing call.
const TypeKernels* active_kernels_for(DataType type) noexcept {
  static const KernelTable* const table = isa_supported(active_isa()) ? table_of(active_isa()) : nullptr;
  return kernels_in(table, type);
}

ReduceFn reduce_of(const TypeKernels* k, ReduceOp op) noexcept {
  const auto o = static_cast<size_t>(op);
  return k != nullptr && o < k->reduce.size() ? k->reduce[o] : nullptr;
}
SumDivFn sum_div_of(const TypeKernels* k) noexcept { return k != nullptr ? k->sum_div : nullptr; }
DivFn div_of(const TypeKernels* k) noexcept { return k != nullptr ? k->div : nullptr; }

}  // namespace

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::Generic:
      return "generic";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) noexcept { return table_of(isa) != nullptr && cpu_has(isa); }

Isa active_isa() noexcept {
  static const Isa isa = choose_isa();
  return isa;
}

ReduceFn reduce_fn(DataType type, ReduceOp op, Isa isa) noexcept { return reduce_of(kernels_for(type, isa), op); }
SumDivFn sum_div_fn(DataType type, Isa isa) noexcept { return sum_div_of(kernels_for(type, isa)); }
DivFn div_fn(DataType type, Isa isa) noexcept { return div_of(kernels_for(type, isa)); }

ReduceFn reduce_fn(DataType type, ReduceOp op) noexcept { return reduce_of(active_kernels_for(type), op); }
SumDivFn sum_div_fn(DataType type) noexcept { return sum_div_of(active_kernels_for(type)); }
DivFn div_fn(DataType type) noexcept { return div_of(active_kernels_for(type)); }

void reduce(DataType type, ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  const ReduceFn fn = reduce_fn(type, op);
  if (fn == nullptr) {
    base::throw_error(ErrorCode::InvalidArgument,
                      "kernels::reduce: no kernel for data type " + std::to_string(static_cast<int>(type)) +
                          " and reduce op " + std::to_string(static_cast<int>(op)) +
                          " (an enum value out of range; valid: DataType 0-" + std::to_string(kNumDataTypes - 1) +
                          ", ReduceOp 0-" + std::to_string(kNumReduceOps - 1) + ")");
  }
  fn(dst, a, b, n);
}

}  // namespace chorus::kernels
