// Conversions between float and the two 16-bit floating-point formats (IEEE binary16 and bfloat16).
//
// Header-only and inline because the reduction kernels call them once per element. They are written with
// integer operations on the bit patterns (plus a few float<->int conversions and float subtractions that are
// exact by construction, so never round), so that:
//   - they compile with any C++20 compiler (no _Float16 / __bf16 / intrinsics);
//   - the result does not depend on the floating-point environment: not on the rounding mode, and not on
//     flush-to-zero / denormals-are-zero, which some frameworks turn on process-wide;
//   - they are branch-free selects, so a loop over them can be auto-vectorised.
// Rounding is to nearest, ties to even. A NaN stays a NaN of the same sign with the top bits of its payload
// kept, and is made quiet, exactly as the conversions of GCC's _Float16 do.
#pragma once

#include <bit>
#include <cstdint>

namespace chorus::kernels {

namespace half_detail {
// c ? a : b, written with a mask. Plain ternaries here let GCC turn the selection back into a branch around
// the floating-point work of one arm, which it then refuses to vectorise (that work "may trap").
inline uint32_t pick(bool c, uint32_t a, uint32_t b) noexcept {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}
}  // namespace half_detail

// binary16 -> float. Exact for every input (float holds every binary16 value).
inline float half_to_float(uint16_t h) noexcept {
  using half_detail::pick;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  const uint32_t mant = em & 0x3ffu;
  // Normal: move the 15 bits into place and rebias the exponent from 15 to 127.
  const uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  // Subnormal (and zero): the value is mant * 2^-24. Build 2^-14 * (1 + mant/1024), a normal float, and
  // subtract 2^-14; the difference is exact (Sterbenz) and a normal float. (Clearing the sign bit matters
  // for mant == 0: x - x is -0 when rounding toward -infinity.)
  const float biased = std::bit_cast<float>((mant << 13) | ((127u - 14u) << 23));
  const uint32_t subnormal = std::bit_cast<uint32_t>(biased - 0x1p-14f) & 0x7fffffffu;
  // Infinity and NaN: all-ones exponent, payload moved into place, quiet bit set on NaN.
  const uint32_t inf_nan = 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  const uint32_t bits = pick(em >= 0x7c00u, inf_nan, pick(em >= 0x0400u, normal, subnormal));
  return std::bit_cast<float>(sign | bits);
}

// float -> binary16, round to nearest even. Values at or above 65520 in magnitude (the halfway point between
// 65504, the largest half, and 65536) become infinity; values below 2^-14 become subnormals or zero.
inline uint16_t float_to_half(float f) noexcept {
  using half_detail::pick;
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;

  // Normal range: rebias, then round the 13 dropped bits (adding 0xfff plus the lowest kept bit rounds ties
  // to even; a carry out of the mantissa correctly bumps the exponent, up to infinity at 65520).
  const uint32_t r = ax - ((127u - 15u) << 23);
  const uint32_t rounded = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  const uint32_t normal = rounded < 0x7c00u ? rounded : 0x7c00u;  // overflow -> infinity

  // Subnormal range (|f| < 2^-14): the half is |f| * 2^24 rounded to an integer. Adding 24 to the exponent
  // field computes |f| * 2^24 exactly (a normal float in [2^-103, 1024)); truncation and the subtraction
  // that yields the fraction are exact, so the rounding below does not depend on the FP environment.
  // (A float subnormal input gives a tiny q that rounds to 0, which is the right answer for it.)
  const uint32_t small = ax < 0x38800000u ? ax : 0x387fffffu;  // keeps the unused conversion in range
  const float q = std::bit_cast<float>(small + (24u << 23));
  const int32_t t = static_cast<int32_t>(q);
  const float frac = q - static_cast<float>(t);
  // Ties to even. (Kept in integer masks: a bool expression here stops GCC from vectorising.)
  const uint32_t above = 0u - static_cast<uint32_t>(frac > 0.5f);
  const uint32_t tie = 0u - static_cast<uint32_t>(frac == 0.5f);
  const uint32_t up = (above | (tie & static_cast<uint32_t>(t))) & 1u;
  const uint32_t subnormal = static_cast<uint32_t>(t) + up;  // 1024 is exactly the smallest normal

  const uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  const uint32_t bits = pick(ax > 0x7f800000u, nan, pick(ax >= 0x38800000u, normal, subnormal));
  return static_cast<uint16_t>(sign | bits);
}

// bfloat16 -> float: bfloat16 is the upper half of a float, so this is exact (a NaN is passed through).
inline float bf16_to_float(uint16_t b) noexcept { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// float -> bfloat16, round to nearest even; overflow rounds to infinity. A NaN keeps its sign and top payload
// bits and gets the quiet bit.
inline uint16_t float_to_bf16(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

}  // namespace chorus::kernels
