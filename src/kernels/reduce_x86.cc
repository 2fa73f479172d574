// The x86-64 kernel tables: the loop templates of reduce_loops.inc compiled once for AVX2 (+FMA, F16C) and
// once for AVX-512 (F, BW, VL), chosen at runtime by reduce.cc when the CPU has them.
//
// The instruction set is set per function with `#pragma GCC target` (Clang: `#pragma clang attribute`), not
// per file with -m flags: every header is included before the pragma, so inline library functions are compiled
// for the baseline and cannot leak AVX code into baseline callers through the linker's choice among duplicate
// inline definitions. Baseline inline functions (kernels/half.h) may still be inlined into the AVX functions.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/half.h"
#include "kernels/kernel_table.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHORUS_KERNELS_X86 1
#include <immintrin.h>
#endif

// GCC 12 warns "__Y may be used uninitialized" inside its own AVX-512 headers (_mm512_undefined_* used on
// purpose as don't-care inputs of the conversion intrinsics): a false positive in system code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace chorus::kernels {

#if defined(CHORUS_KERNELS_X86)

// bfloat16 <-> float, explicitly vectorised in both tables (the compiler does not vectorise the scalar
// rounding of kernels/half.h well): widening is a shift; narrowing rounds to nearest even with integer adds,
// and a NaN keeps its top payload bits with the quiet bit set, exactly as float_to_bf16 does. The tails use
// kernels/half.h. (AVX512-BF16's VCVTNEPS2BF16 is not used: it flushes subnormals to zero.)
#define CHORUS_BF16_TAILS                                                  \
  static void to_float_tail(const uint16_t* s, float* f, size_t n) noexcept { \
    for (size_t j = 0; j < n; ++j) f[j] = bf16_to_float(s[j]);             \
  }                                                                        \
  static void from_float_tail(const float* f, uint16_t* s, size_t n) noexcept { \
    for (size_t j = 0; j < n; ++j) s[j] = float_to_bf16(f[j]);             \
  }

// ---- AVX2 + FMA + F16C ----

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace avx2 {
namespace {

// binary16 <-> float with F16C, 8 at a time; VCVTPS2PH with an immediate rounding mode of 0 rounds to nearest
// even whatever MXCSR says, and neither direction flushes subnormals, so the results equal kernels/half.h's.
struct HalfConv {
  static void to_float(const uint16_t* s, float* f, size_t n) noexcept {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
      _mm256_storeu_ps(f + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j))));
    }
    for (; j < n; ++j) f[j] = _cvtsh_ss(s[j]);
  }
  static void from_float(const float* f, uint16_t* s, size_t n) noexcept {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(s + j), _mm256_cvtps_ph(_mm256_loadu_ps(f + j), 0));
    }
    for (; j < n; ++j) s[j] = _cvtss_sh(f[j], 0);
  }
};
struct Bf16Conv {
  CHORUS_BF16_TAILS
  static void to_float(const uint16_t* s, float* f, size_t n) noexcept {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j)));
      _mm256_storeu_ps(f + j, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    to_float_tail(s + j, f + j, n - j);
  }
  static void from_float(const float* f, uint16_t* s, size_t n) noexcept {
    size_t j = 0;
    const __m256i one = _mm256_set1_epi32(1), half_ulp = _mm256_set1_epi32(0x7fff);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    for (; j + 8 <= n; j += 8) {
      const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(f + j));
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
      const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, half_ulp), lsb), 16);
      const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
      const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
      const __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
      // 8 x 32-bit values < 2^16 -> 8 x 16-bit: pack within lanes, then gather the two lanes' halves.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(s + j), _mm256_castsi256_si128(packed));
    }
    from_float_tail(f + j, s + j, n - j);
  }
};

#include "kernels/reduce_loops.inc"

constexpr KernelTable kTable = make_table(std::make_index_sequence<kNumDataTypes>());

}  // namespace
}  // namespace avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// ---- AVX-512 F + BW + VL (with AVX2, FMA, F16C) ----

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c,prefer-vector-width=512")
#endif

namespace avx512 {
namespace {

struct HalfConv {
  static void to_float(const uint16_t* s, float* f, size_t n) noexcept {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
      _mm512_storeu_ps(f + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + j))));
    }
    for (; j < n; ++j) f[j] = _cvtsh_ss(s[j]);
  }
  static void from_float(const float* f, uint16_t* s, size_t n) noexcept {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s + j), _mm512_cvtps_ph(_mm512_loadu_ps(f + j), 0));
    }
    for (; j < n; ++j) s[j] = _cvtss_sh(f[j], 0);
  }
};
struct Bf16Conv {
  CHORUS_BF16_TAILS
  static void to_float(const uint16_t* s, float* f, size_t n) noexcept {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + j)));
      _mm512_storeu_ps(f + j, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    to_float_tail(s + j, f + j, n - j);
  }
  static void from_float(const float* f, uint16_t* s, size_t n) noexcept {
    size_t j = 0;
    const __m512i one = _mm512_set1_epi32(1), half_ulp = _mm512_set1_epi32(0x7fff);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x0040);
    for (; j + 16 <= n; j += 16) {
      const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(f + j));
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
      const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, half_ulp), lsb), 16);
      const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), quiet);
      const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
      const __m512i r = _mm512_mask_blend_epi32(is_nan, rounded, nan);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s + j), _mm512_cvtepi32_epi16(r));  // truncates: r < 2^16
    }
    from_float_tail(f + j, s + j, n - j);
  }
};

#include "kernels/reduce_loops.inc"

constexpr KernelTable kTable = make_table(std::make_index_sequence<kNumDataTypes>());

}  // namespace
}  // namespace avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const KernelTable* avx2_table() noexcept { return &avx2::kTable; }
const KernelTable* avx512_table() noexcept { return &avx512::kTable; }

#else  // not x86-64 GCC/Clang: only the generic table

const KernelTable* avx2_table() noexcept { return nullptr; }
const KernelTable* avx512_table() noexcept { return nullptr; }

#endif

}  // namespace chorus::kernels
