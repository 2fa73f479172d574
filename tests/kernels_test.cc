// Tests for the half-precision conversions (kernels/half.h), the reduction kernels (kernels/reduce.h) and the
// public type helpers (chorus/types.h).
//
// References: the compiler's _Float16 for binary16 (with a fallback computed in double where the compiler has
// no _Float16, itself checked against _Float16 where it has), a nearest-of-two-candidates rounding computed
// in double for bfloat16, and naive per-element arithmetic in wider types for the kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfenv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "base/cpu.h"
#include "chorus/error.h"
#include "chorus/types.h"
#include "kernels/copy.h"
#include "kernels/half.h"
#include "kernels/reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define CHORUS_TEST_HAVE_MXCSR 1
#endif

#if defined(__FLT16_MAX__)
#define CHORUS_TEST_HAVE_FLOAT16 1  // the compiler's _Float16 (GCC >= 12, Clang >= 15 on x86-64)
#endif

namespace chorus::kernels {
namespace {

// ---------------------------------------------------------------------------------------------------------
// References
// ---------------------------------------------------------------------------------------------------------

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// The value of a binary16 bit pattern, decoded field by field.
double half_value(uint16_t h) {
  const int sign = (h & 0x8000) != 0 ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return mant != 0 ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 15 - 10);
}

// float -> binary16 computed in double: scale |f| to units of the target's ulp (exact, a power of two), round
// that to an integer, ties to even, then encode. NaNs as GCC converts them: quiet, top payload bits kept.
uint16_t portable_float_to_half(float f) {
  const uint32_t u = bits_of(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00 | ((u >> 13) & 0x3ff));
  const double x = std::fabs(static_cast<double>(f));
  if (x >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00);  // halfway past 65504 and beyond
  int e = 0;
  std::frexp(x, &e);                         // x = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, -14);            // the binade, clamped to the subnormal one
  const double q = std::ldexp(x, 10 - exp);  // x in units of 2^(exp - 10)
  const double lo = std::floor(q);
  const double rem = q - lo;
  double k = rem > 0.5 || (rem == 0.5 && std::fmod(lo, 2.0) == 1.0) ? lo + 1 : lo;
  if (k >= 2048) {  // rounded up into the next binade
    k /= 2;
    ++exp;
  }
  if (k < 1024) return static_cast<uint16_t>(sign | static_cast<uint16_t>(k));  // subnormal or zero
  return static_cast<uint16_t>(sign | ((exp + 15) << 10) | (static_cast<int>(k) - 1024));
}

#if defined(CHORUS_TEST_HAVE_FLOAT16)
float ref_half_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
uint16_t ref_float_to_half(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
#else
// Without _Float16, NaNs decode as GCC does: quiet, payload kept.
float ref_half_to_float(uint16_t h) {
  if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) {
    return float_of((static_cast<uint32_t>(h & 0x8000) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13));
  }
  return static_cast<float>(half_value(h));
}
uint16_t ref_float_to_half(float f) { return portable_float_to_half(f); }
#endif

// The value of a bfloat16 bit pattern, decoded field by field (no shifting into a float).
double bf16_value(uint16_t b) {
  const int sign = (b & 0x8000) != 0 ? -1 : 1;
  const int exp = (b >> 7) & 0xff;
  const int mant = b & 0x7f;
  if (exp == 0xff) return mant != 0 ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  if (exp == 0) return sign * std::ldexp(mant, -126 - 7);
  return sign * std::ldexp(128 + mant, exp - 127 - 7);
}

// float -> bfloat16, round to nearest even: pick the nearer of the truncation and the next value away from
// zero, comparing distances in double (exact here); ties go to the even pattern. Overflow rounds as if the
// pattern after the largest finite value were 2^128.
uint16_t ref_float_to_bf16(float f) {
  const uint32_t u = bits_of(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  const auto lo = static_cast<uint16_t>(u >> 16);
  if ((u & 0xffff) == 0) return lo;
  const auto hi = static_cast<uint16_t>(lo + 1);
  const double x = std::fabs(static_cast<double>(f));
  const double v_lo = std::fabs(bf16_value(lo));
  const double v_hi = (hi & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128) : std::fabs(bf16_value(hi));
  const double d_lo = x - v_lo;
  const double d_hi = v_hi - x;
  if (d_lo < d_hi) return lo;
  if (d_hi < d_lo) return hi;
  return (lo & 1) != 0 ? hi : lo;
}
float ref_bf16_to_float(uint16_t b) { return static_cast<float>(bf16_value(b)); }

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// ---------------------------------------------------------------------------------------------------------
// binary16
// ---------------------------------------------------------------------------------------------------------

TEST(HalfTest, HalfToFloatExhaustive) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = half_to_float(static_cast<uint16_t>(h));
    const float want = ref_half_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(bits_of(got), bits_of(want)) << "half " << hex(h);
  }
}

TEST(HalfTest, RoundTripExhaustive) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const bool nan = (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0;
    ASSERT_EQ(float_to_half(half_to_float(b)), nan ? (b | 0x200) : b) << "half " << hex(h);
  }
}

std::vector<float> half_edge_cases() {
  const float tiny = std::ldexp(1.0f, -24);  // the smallest half subnormal
  std::vector<float> v = {
      0.0f,
      1.0f,
      1.5f,
      2.0f,
      3.140625f,
      0.1f,
      1.0f / 3.0f,
      1000.5f,
      tiny,
      // 2^-25 is halfway between 0 and the smallest subnormal: ties to 0.
      tiny / 2,
      std::nextafter(tiny / 2, 1.0f),
      std::nextafter(tiny / 2, 0.0f),
      // Halfway between two subnormals: ties to even.
      3 * tiny / 2,
      5 * tiny / 2,
      std::nextafter(3 * tiny / 2, 0.0f),
      std::nextafter(3 * tiny / 2, 1.0f),
      // The largest subnormal, and values that round up to the smallest normal.
      1023 * tiny,
      1023.5f * tiny,
      1023.25f * tiny,
      std::ldexp(1.0f, -14),
      std::nextafter(std::ldexp(1.0f, -14), 0.0f),
      // Ties in the normal range.
      1.0f + std::ldexp(1.0f, -11),
      1.0f + 3 * std::ldexp(1.0f, -11),
      std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f),
      2049.0f,
      2051.0f,
      4097.0f,
      // The largest half, and around the overflow threshold 65520.
      65504.0f,
      65519.0f,
      std::nextafter(65520.0f, 0.0f),
      65520.0f,
      65536.0f,
      1e6f,
      std::numeric_limits<float>::max(),
      std::numeric_limits<float>::infinity(),
      // Float subnormals and tiny normals: all round to (signed) zero.
      std::numeric_limits<float>::min(),
      std::numeric_limits<float>::denorm_min(),
      std::ldexp(1.0f, -130),
      std::ldexp(1.0f, -26),
      std::ldexp(1.0f, -40),
      // NaNs: quiet, signalling, payload only in the low 13 bits.
      float_of(0x7fc00000),
      float_of(0x7f800001),
      float_of(0x7fa00000),
      float_of(0x7f802000),
      float_of(0x7fffffff),
      float_of(0x7f801fff),
  };
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

TEST(HalfTest, FloatToHalfEdgeCases) {
  for (float f : half_edge_cases()) {
    EXPECT_EQ(float_to_half(f), ref_float_to_half(f)) << "float " << f << " " << hex(bits_of(f));
  }
}

TEST(HalfTest, FloatToHalfRandomPatterns) {
  std::mt19937 rng(12345);
  // Uniformly random patterns mostly overflow or underflow; half of the draws therefore use an exponent
  // within a few binades of the binary16 range.
  std::uniform_int_distribution<uint32_t> exponent(127 - 28, 127 + 17);
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t u = rng();
    if ((i & 1) != 0) u = (u & 0x807fffffu) | (exponent(rng) << 23);
    const float f = float_of(u);
    ASSERT_EQ(float_to_half(f), ref_float_to_half(f)) << "float " << f << " " << hex(u);
  }
}

#if defined(CHORUS_TEST_HAVE_FLOAT16)
// The fallback reference used where there is no _Float16 must agree with _Float16.
TEST(HalfTest, PortableReferenceAgreesWithFloat16) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const double v = half_value(static_cast<uint16_t>(h));
    const float want = ref_half_to_float(static_cast<uint16_t>(h));
    ASSERT_TRUE(std::isnan(v) ? std::isnan(want) : v == want) << hex(h);
  }
  for (float f : half_edge_cases()) ASSERT_EQ(portable_float_to_half(f), ref_float_to_half(f)) << f;
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> exponent(127 - 28, 127 + 17);
  for (int i = 0; i < 200'000; ++i) {
    const float f = float_of((rng() & 0x807fffffu) | (exponent(rng) << 23));
    ASSERT_EQ(portable_float_to_half(f), ref_float_to_half(f)) << f << " " << hex(bits_of(f));
  }
}
#endif

TEST(HalfTest, TypeWrappers) {
  EXPECT_EQ(float16_t(1.0f).bits, 0x3c00);
  EXPECT_EQ(float16_t(-2.0f).bits, 0xc000);
  EXPECT_EQ(float16_t(65520.0f).bits, 0x7c00);
  EXPECT_EQ(static_cast<float>(float16_t::from_bits(0x3555)), ref_half_to_float(0x3555));
  EXPECT_EQ(static_cast<float>(float16_t::from_bits(0x0001)), std::ldexp(1.0f, -24));
  EXPECT_EQ(bfloat16_t(1.0f).bits, 0x3f80);
  EXPECT_EQ(bfloat16_t(-3.0f).bits, 0xc040);
  EXPECT_EQ(static_cast<float>(bfloat16_t::from_bits(0x4049)), 3.140625f);
}

// Every instruction set this build and this CPU can run: each table must match the same reference.
std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (isa_supported(isa)) v.push_back(isa);
  }
  return v;
}

#if defined(CHORUS_TEST_HAVE_MXCSR)
// The conversions must not depend on the rounding mode or on flush-to-zero / denormals-are-zero.
class ScopedFpEnvironment {
 public:
  ScopedFpEnvironment(int rounding, bool ftz_daz) : csr_(_mm_getcsr()), rounding_(std::fegetround()) {
    std::fesetround(rounding);
    if (ftz_daz) _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ (bit 15) | DAZ (bit 6)
  }
  ~ScopedFpEnvironment() {
    _mm_setcsr(csr_);
    std::fesetround(rounding_);
  }

 private:
  unsigned csr_;
  int rounding_;
};

[[gnu::noinline]] std::vector<uint32_t> convert_all(const std::vector<float>& floats) {
  std::vector<uint32_t> out;
  out.reserve(floats.size() * 2 + 0x10000 * 2);
  for (float f : floats) out.push_back(float_to_half(f));
  for (float f : floats) out.push_back(float_to_bf16(f));
  for (uint32_t h = 0; h <= 0xffff; ++h) out.push_back(bits_of(half_to_float(static_cast<uint16_t>(h))));
  for (uint32_t h = 0; h <= 0xffff; ++h) out.push_back(bits_of(bf16_to_float(static_cast<uint16_t>(h))));
  // Through the (vectorised) kernels of every instruction set too: exact sums of half subnormals, which no
  // rounding mode may change. (Not bfloat16: its subnormals are float subnormals, which DAZ zeroes in any
  // float arithmetic, by design of that flag.)
  std::vector<uint16_t> a(1024), b(1024), d(1024);
  for (uint32_t i = 0; i < 1024; ++i) {
    a[i] = static_cast<uint16_t>(i);
    b[i] = static_cast<uint16_t>(i / 2);
  }
  for (Isa isa : supported_isas()) {
    reduce_fn(DataType::Float16, ReduceOp::Sum, isa)(d.data(), a.data(), b.data(), d.size());
    out.insert(out.end(), d.begin(), d.end());
  }
  return out;
}

TEST(HalfTest, IndependentOfFloatingPointEnvironment) {
  std::vector<float> floats = half_edge_cases();
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> exponent(127 - 28, 127 + 17);
  for (int i = 0; i < 100'000; ++i) floats.push_back(float_of((rng() & 0x807fffffu) | (exponent(rng) << 23)));
  const std::vector<uint32_t> want = convert_all(floats);
  for (int rounding : {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO, FE_TONEAREST}) {
    for (bool ftz_daz : {false, true}) {
      std::vector<uint32_t> got;
      {
        ScopedFpEnvironment env(rounding, ftz_daz);
        got = convert_all(floats);
      }
      EXPECT_TRUE(got == want) << "rounding mode " << rounding << " ftz/daz " << ftz_daz;
    }
  }
}
#endif

// ---------------------------------------------------------------------------------------------------------
// bfloat16
// ---------------------------------------------------------------------------------------------------------

TEST(Bf16Test, ToFloatExhaustive) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float f = bf16_to_float(b);
    const float want = ref_bf16_to_float(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << hex(h);
      ASSERT_EQ(bits_of(f), h << 16) << hex(h);  // the payload passes through unchanged
    } else {
      ASSERT_EQ(bits_of(f), bits_of(want)) << hex(h);
    }
    const bool nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
    ASSERT_EQ(float_to_bf16(f), nan ? (b | 0x40) : b) << "round trip of " << hex(h);
  }
}

TEST(Bf16Test, FromFloatEdgeCases) {
  const std::vector<float> cases = {
      0.0f,
      1.0f,
      1.00390625f,  // 1 + 2^-8: a tie, to even (1)
      1.01171875f,  // 1 + 3 * 2^-8: a tie, to even (up)
      std::nextafter(1.00390625f, 2.0f),
      std::nextafter(1.00390625f, 0.0f),
      3.14159265f,
      0.1f,
      std::numeric_limits<float>::max(),
      float_of(0x7f7f7fff),
      float_of(0x7f7f8000),
      float_of(0x7f7effff),
      std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::min(),
      std::numeric_limits<float>::denorm_min(),
      float_of(0x00008000),
      float_of(0x00018000),
      float_of(0x007fffff),
      float_of(0x7fc00000),
      float_of(0x7f800001),
      float_of(0x7fbfffff),
      float_of(0x7f810000),
      float_of(0x7fffffff),
  };
  for (float f : cases) {
    for (float g : {f, -f}) {
      EXPECT_EQ(float_to_bf16(g), ref_float_to_bf16(g)) << g << " " << hex(bits_of(g));
    }
  }
}

TEST(Bf16Test, FromFloatRandomPatterns) {
  std::mt19937 rng(54321);
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t u = rng();
    // Every other draw has a low half at or around the halfway point, to exercise the ties.
    if ((i & 1) != 0) u = (u & 0xffff0000u) | (0x8000u + (rng() % 3) - 1);
    const float f = float_of(u);
    ASSERT_EQ(float_to_bf16(f), ref_float_to_bf16(f)) << f << " " << hex(u);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Reduction kernels: per-type references
// ---------------------------------------------------------------------------------------------------------

// v modulo 2^bits, in S's range, computed with explicit arithmetic.
template <class S, class W>
S wrap(W v) {
  using U = unsigned __int128;
  const U modulus = U{1} << (8 * sizeof(S));
  U r = static_cast<U>(v) & (modulus - 1);
  if (std::is_signed_v<S> && r >= modulus / 2) return static_cast<S>(-static_cast<__int128>(modulus - r));
  return static_cast<S>(r);
}

template <class S>
struct IntRef {
  using Storage = S;
  static S combine(ReduceOp op, S a, S b) {
    using W = std::conditional_t<std::is_signed_v<S>, __int128, unsigned __int128>;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        return wrap<S>(static_cast<W>(a) + static_cast<W>(b));
      case ReduceOp::Prod:
        return wrap<S>(static_cast<W>(a) * static_cast<W>(b));
      case ReduceOp::Min:
        return std::min(a, b);
      case ReduceOp::Max:
        return std::max(a, b);
    }
    return S{};
  }
  // Truncation toward zero, spelled out: the quotient of the magnitudes, with the sign put back.
  static S divide(S v, uint64_t d) {
    if constexpr (std::is_signed_v<S>) {
      const bool negative = v < 0;
      const unsigned __int128 magnitude = negative ? -static_cast<__int128>(v) : static_cast<__int128>(v);
      const auto q = static_cast<__int128>(magnitude / d);
      return static_cast<S>(negative ? -q : q);
    } else {
      return static_cast<S>(v / d);
    }
  }
  static bool same(S a, S b) { return a == b; }
  static std::string describe(S v) { return std::to_string(static_cast<int64_t>(v)); }
  static S random(std::mt19937_64& rng) {
    const uint64_t r = rng();
    if (r % 4 == 0) return static_cast<S>(rng());  // anywhere in the range: sums and products wrap
    return static_cast<S>(static_cast<int64_t>(rng() % 201) - (std::is_signed_v<S> ? 100 : 0));
  }
};

template <class C>
C ref_min(C a, C b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == 0 && b == 0) return std::signbit(a) ? a : b;
  return b < a ? b : a;
}
template <class C>
C ref_max(C a, C b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == 0 && b == 0) return std::signbit(a) ? b : a;
  return a < b ? b : a;
}

// Floating types: convert to the compute type C, combine, round back once.
template <class S, class C, C (*Load)(S), S (*Store)(C)>
struct FloatRef {
  using Storage = S;
  static S combine(ReduceOp op, S a, S b) {
    const C x = Load(a);
    const C y = Load(b);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        return Store(x + y);
      case ReduceOp::Prod:
        return Store(x * y);
      case ReduceOp::Min:
        return Store(ref_min(x, y));
      case ReduceOp::Max:
        return Store(ref_max(x, y));
    }
    return S{};
  }
  static S divide(S v, uint64_t d) { return Store(Load(v) / static_cast<C>(d)); }
  // Any NaN matches any NaN (IEEE leaves the payload of an arithmetic result open); otherwise bit-exact.
  static bool same(S a, S b) {
    if (std::isnan(Load(a)) || std::isnan(Load(b))) return std::isnan(Load(a)) && std::isnan(Load(b));
    return std::memcmp(&a, &b, sizeof(S)) == 0;
  }
  static std::string describe(S v) {
    std::ostringstream os;
    os.precision(17);
    os << Load(v);
    if constexpr (sizeof(S) == 2) os << " (" << hex(v) << ")";
    return os.str();
  }
  static S random(std::mt19937_64& rng) {
    const uint64_t r = rng() % 100;
    if (r < 4) {
      const C specials[] = {std::numeric_limits<C>::quiet_NaN(),
                            -std::numeric_limits<C>::quiet_NaN(),
                            std::numeric_limits<C>::infinity(),
                            -std::numeric_limits<C>::infinity(),
                            C(0),
                            -C(0)};
      return Store(specials[rng() % std::size(specials)]);
    }
    if (r < 15) {  // any bit pattern: subnormals, huge values, NaNs with payloads
      S s;
      const uint64_t bits = rng();
      std::memcpy(&s, &bits, sizeof(S));
      return s;
    }
    std::uniform_real_distribution<double> moderate(-64.0, 64.0);
    return Store(static_cast<C>(moderate(rng)));
  }
};

float identity_f(float v) { return v; }
double identity_d(double v) { return v; }
float bf16_load(uint16_t b) { return ref_bf16_to_float(b); }

using HalfRef = FloatRef<uint16_t, float, ref_half_to_float, ref_float_to_half>;
using Bf16Ref = FloatRef<uint16_t, float, bf16_load, ref_float_to_bf16>;
using Float32Ref = FloatRef<float, float, identity_f, identity_f>;
using Float64Ref = FloatRef<double, double, identity_d, identity_d>;

// Calls f(std::type_identity<Ref>{}) with the reference for `type`.
template <class F>
void with_ref(DataType type, F&& f) {
  switch (type) {
    case DataType::Int8:
      return f(std::type_identity<IntRef<int8_t>>{});
    case DataType::UInt8:
      return f(std::type_identity<IntRef<uint8_t>>{});
    case DataType::Int32:
      return f(std::type_identity<IntRef<int32_t>>{});
    case DataType::UInt32:
      return f(std::type_identity<IntRef<uint32_t>>{});
    case DataType::Int64:
      return f(std::type_identity<IntRef<int64_t>>{});
    case DataType::UInt64:
      return f(std::type_identity<IntRef<uint64_t>>{});
    case DataType::Float16:
      return f(std::type_identity<HalfRef>{});
    case DataType::BFloat16:
      return f(std::type_identity<Bf16Ref>{});
    case DataType::Float32:
      return f(std::type_identity<Float32Ref>{});
    case DataType::Float64:
      return f(std::type_identity<Float64Ref>{});
  }
  FAIL() << "unknown data type";
}

std::vector<DataType> all_types() {
  std::vector<DataType> v;
  for (int t = 0; t < kNumDataTypes; ++t) v.push_back(static_cast<DataType>(t));
  return v;
}
std::vector<ReduceOp> all_ops() {
  std::vector<ReduceOp> v;
  for (int o = 0; o < kNumReduceOps; ++o) v.push_back(static_cast<ReduceOp>(o));
  return v;
}

// Sizes around the kernels' internal block of 64 elements, and a few thousand.
constexpr size_t kSizes[] = {0, 1, 7, 33, 63, 64, 65, 129, 1000, 4099};
constexpr size_t kGuard = 16;  // elements past the end that must stay untouched

enum class Placement { Separate, DstIsA, DstIsB };
const char* to_string(Placement p) {
  switch (p) {
    case Placement::Separate:
      return "out of place";
    case Placement::DstIsA:
      return "dst == a";
    case Placement::DstIsB:
      return "dst == b";
  }
  return "?";
}
constexpr Placement kPlacements[] = {Placement::Separate, Placement::DstIsA, Placement::DstIsB};

// Runs `call(dst, a, b)` with dst placed as asked, and checks dst against `want` and the guard behind it.
template <class Ref, class Call>
void check_elementwise(const std::vector<typename Ref::Storage>& a, const std::vector<typename Ref::Storage>& b,
                       const std::vector<typename Ref::Storage>& want, Placement placement, Call&& call) {
  using S = typename Ref::Storage;
  const size_t n = a.size();
  S canary;
  std::memset(&canary, 0x5a, sizeof(S));
  std::vector<S> buf(n + kGuard, canary);
  switch (placement) {
    case Placement::Separate:
      call(buf.data(), a.data(), b.data());
      break;
    case Placement::DstIsA:
      std::copy(a.begin(), a.end(), buf.begin());
      call(buf.data(), buf.data(), b.data());
      break;
    case Placement::DstIsB:
      std::copy(b.begin(), b.end(), buf.begin());
      call(buf.data(), a.data(), buf.data());
      break;
  }
  int failures = 0;
  for (size_t i = 0; i < n && failures < 5; ++i) {
    if (!Ref::same(buf[i], want[i])) {
      ++failures;
      ADD_FAILURE() << "element " << i << ": a = " << Ref::describe(a[i]) << ", b = " << Ref::describe(b[i]) << ": got "
                    << Ref::describe(buf[i]) << ", want " << Ref::describe(want[i]);
    }
  }
  for (size_t i = n; i < n + kGuard; ++i) {
    ASSERT_EQ(std::memcmp(&buf[i], &canary, sizeof(S)), 0) << "wrote past the end, at element " << i;
  }
}

template <class Ref>
std::vector<typename Ref::Storage> random_vector(size_t n, std::mt19937_64& rng) {
  std::vector<typename Ref::Storage> v(n);
  for (auto& x : v) x = Ref::random(rng);
  return v;
}

// ---------------------------------------------------------------------------------------------------------
// Reduction kernels: every (type, op) against the reference
// ---------------------------------------------------------------------------------------------------------

struct KernelCase {
  DataType type;
  ReduceOp op;
  Isa isa;
};
void PrintTo(const KernelCase& c, std::ostream* os) {
  *os << isa_name(c.isa) << "_" << chorus::to_string(c.type) << "_" << chorus::to_string(c.op);
}

std::vector<KernelCase> all_kernel_cases() {
  std::vector<KernelCase> v;
  for (Isa isa : supported_isas()) {
    for (DataType t : all_types()) {
      for (ReduceOp o : all_ops()) v.push_back({t, o, isa});
    }
  }
  return v;
}

class ReduceKernelTest : public ::testing::TestWithParam<KernelCase> {};

TEST_P(ReduceKernelTest, MatchesReference) {
  const KernelCase c = GetParam();
  const ReduceFn fn = reduce_fn(c.type, c.op, c.isa);
  ASSERT_NE(fn, nullptr);
  with_ref(c.type, [&]<class Ref>(std::type_identity<Ref>) {
    std::mt19937_64 rng(1000 + 10 * static_cast<int>(c.type) + static_cast<int>(c.op));
    for (size_t n : kSizes) {
      for (Placement placement : kPlacements) {
        SCOPED_TRACE(::testing::Message() << "n = " << n << ", " << to_string(placement));
        const auto a = random_vector<Ref>(n, rng);
        const auto b = random_vector<Ref>(n, rng);
        std::vector<typename Ref::Storage> want(n);
        for (size_t i = 0; i < n; ++i) want[i] = Ref::combine(c.op, a[i], b[i]);
        check_elementwise<Ref>(a, b, want, placement, [&](void* d, const void* x, const void* y) { fn(d, x, y, n); });
        // The convenience wrapper (the active instruction set) gives the same answer.
        if (c.isa == active_isa()) {
          check_elementwise<Ref>(a, b, want, placement,
                                 [&](void* d, const void* x, const void* y) { reduce(c.type, c.op, d, x, y, n); });
        }
      }
    }
  });
}

TEST_P(ReduceKernelTest, ZeroElementsTouchesNothing) {
  const KernelCase c = GetParam();
  reduce_fn(c.type, c.op, c.isa)(nullptr, nullptr, nullptr, 0);
  reduce(c.type, c.op, nullptr, nullptr, nullptr, 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceKernelTest, ::testing::ValuesIn(all_kernel_cases()),
                         ::testing::PrintToStringParamName());

// ---------------------------------------------------------------------------------------------------------
// Avg: the division kernels, per type
// ---------------------------------------------------------------------------------------------------------

struct DivCase {
  DataType type;
  Isa isa;
};
void PrintTo(const DivCase& c, std::ostream* os) { *os << isa_name(c.isa) << "_" << chorus::to_string(c.type); }

std::vector<DivCase> all_div_cases() {
  std::vector<DivCase> v;
  for (Isa isa : supported_isas()) {
    for (DataType t : all_types()) v.push_back({t, isa});
  }
  return v;
}

class DivKernelTest : public ::testing::TestWithParam<DivCase> {};

constexpr uint64_t kDivisors[] = {1, 2, 3, 7, 8, 1000};

TEST_P(DivKernelTest, AvgReducesWithTheSumKernel) {
  const DivCase c = GetParam();
  EXPECT_EQ(reduce_fn(c.type, ReduceOp::Avg, c.isa), reduce_fn(c.type, ReduceOp::Sum, c.isa));
}

TEST_P(DivKernelTest, DivMatchesReference) {
  const DataType type = GetParam().type;
  const Isa isa = GetParam().isa;
  const DivFn fn = div_fn(type, isa);
  ASSERT_NE(fn, nullptr);
  with_ref(type, [&]<class Ref>(std::type_identity<Ref>) {
    std::mt19937_64 rng(2000 + static_cast<int>(type));
    for (uint64_t divisor : kDivisors) {
      for (size_t n : kSizes) {
        for (Placement placement : {Placement::Separate, Placement::DstIsA}) {
          SCOPED_TRACE(::testing::Message()
                       << "divisor = " << divisor << ", n = " << n << ", " << to_string(placement));
          const auto src = random_vector<Ref>(n, rng);
          std::vector<typename Ref::Storage> want(n);
          for (size_t i = 0; i < n; ++i) want[i] = Ref::divide(src[i], divisor);
          check_elementwise<Ref>(src, src, want, placement,
                                 [&](void* d, const void* s, const void*) { fn(d, s, n, divisor); });
        }
      }
    }
  });
}

TEST_P(DivKernelTest, SumDivMatchesSumThenDiv) {
  const DataType type = GetParam().type;
  const Isa isa = GetParam().isa;
  const SumDivFn fn = sum_div_fn(type, isa);
  ASSERT_NE(fn, nullptr);
  with_ref(type, [&]<class Ref>(std::type_identity<Ref>) {
    std::mt19937_64 rng(3000 + static_cast<int>(type));
    for (uint64_t divisor : kDivisors) {
      for (size_t n : kSizes) {
        for (Placement placement : kPlacements) {
          SCOPED_TRACE(::testing::Message()
                       << "divisor = " << divisor << ", n = " << n << ", " << to_string(placement));
          const auto a = random_vector<Ref>(n, rng);
          const auto b = random_vector<Ref>(n, rng);
          std::vector<typename Ref::Storage> want(n);
          for (size_t i = 0; i < n; ++i) want[i] = Ref::divide(Ref::combine(ReduceOp::Sum, a[i], b[i]), divisor);
          check_elementwise<Ref>(a, b, want, placement,
                                 [&](void* d, const void* x, const void* y) { fn(d, x, y, n, divisor); });
          // Bit-identical to the unfused pair of kernels.
          check_elementwise<Ref>(a, b, want, placement, [&](void* d, const void* x, const void* y) {
            reduce_fn(type, ReduceOp::Sum, isa)(d, x, y, n);
            div_fn(type, isa)(d, d, n, divisor);
          });
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DivKernelTest, ::testing::ValuesIn(all_div_cases()),
                         ::testing::PrintToStringParamName());

// ---------------------------------------------------------------------------------------------------------
// Reduction kernels: specific semantics
// ---------------------------------------------------------------------------------------------------------

template <class T>
std::vector<T> run_reduce(ReduceOp op, std::vector<T> a, const std::vector<T>& b) {
  reduce(dtype_of_v<T>, op, a.data(), a.data(), b.data(), a.size());
  return a;
}

TEST(ReduceSemanticsTest, IntegerSumAndProdWrap) {
  EXPECT_EQ(run_reduce<int8_t>(ReduceOp::Sum, {100, -100, 127}, {100, -100, 1}), (std::vector<int8_t>{-56, 56, -128}));
  EXPECT_EQ(run_reduce<uint8_t>(ReduceOp::Sum, {200, 255}, {100, 1}), (std::vector<uint8_t>{44, 0}));
  EXPECT_EQ(run_reduce<int32_t>(ReduceOp::Sum, {INT32_MAX, INT32_MIN}, {1, -1}),
            (std::vector<int32_t>{INT32_MIN, INT32_MAX}));
  EXPECT_EQ(run_reduce<uint32_t>(ReduceOp::Sum, {UINT32_MAX}, {2}), (std::vector<uint32_t>{1}));
  EXPECT_EQ(run_reduce<int64_t>(ReduceOp::Sum, {INT64_MAX, INT64_MIN}, {1, -1}),
            (std::vector<int64_t>{INT64_MIN, INT64_MAX}));
  EXPECT_EQ(run_reduce<uint64_t>(ReduceOp::Sum, {UINT64_MAX}, {1}), (std::vector<uint64_t>{0}));

  EXPECT_EQ(run_reduce<int8_t>(ReduceOp::Prod, {-128, 16, -1}, {-1, 16, -1}), (std::vector<int8_t>{-128, 0, 1}));
  EXPECT_EQ(run_reduce<uint8_t>(ReduceOp::Prod, {255, 16}, {255, 17}), (std::vector<uint8_t>{1, 16}));
  EXPECT_EQ(run_reduce<int32_t>(ReduceOp::Prod, {65536, 46341, INT32_MIN}, {65536, 46341, -1}),
            (std::vector<int32_t>{0, -2147479015, INT32_MIN}));
  EXPECT_EQ(run_reduce<uint32_t>(ReduceOp::Prod, {65536, 65535}, {65536, 65537}),
            (std::vector<uint32_t>{0, UINT32_MAX}));
  EXPECT_EQ(run_reduce<int64_t>(ReduceOp::Prod, {INT64_MIN, int64_t{1} << 32}, {-1, int64_t{1} << 32}),
            (std::vector<int64_t>{INT64_MIN, 0}));
  EXPECT_EQ(run_reduce<uint64_t>(ReduceOp::Prod, {uint64_t{1} << 63, UINT64_MAX}, {2, UINT64_MAX}),
            (std::vector<uint64_t>{0, 1}));
}

TEST(ReduceSemanticsTest, IntegerMinMaxUseTheSignedness) {
  EXPECT_EQ(run_reduce<int8_t>(ReduceOp::Min, {-1, 5}, {1, -128}), (std::vector<int8_t>{-1, -128}));
  EXPECT_EQ(run_reduce<uint8_t>(ReduceOp::Max, {255, 5}, {1, 128}), (std::vector<uint8_t>{255, 128}));
  EXPECT_EQ(run_reduce<int64_t>(ReduceOp::Max, {INT64_MIN, -1}, {INT64_MAX, 0}), (std::vector<int64_t>{INT64_MAX, 0}));
  EXPECT_EQ(run_reduce<uint64_t>(ReduceOp::Min, {UINT64_MAX, 1}, {uint64_t{1} << 63, 0}),
            (std::vector<uint64_t>{uint64_t{1} << 63, 0}));
}

TEST(ReduceSemanticsTest, IntegerAvgTruncatesTowardZero) {
  std::vector<int32_t> v = {-7, -1, 7, -8, INT32_MIN, INT32_MAX};
  div_fn(DataType::Int32)(v.data(), v.data(), v.size(), 2);
  EXPECT_EQ(v, (std::vector<int32_t>{-3, 0, 3, -4, INT32_MIN / 2, INT32_MAX / 2}));

  std::vector<int64_t> w = {-5, 5, INT64_MIN};
  div_fn(DataType::Int64)(w.data(), w.data(), w.size(), 3);
  EXPECT_EQ(w, (std::vector<int64_t>{-1, 1, INT64_MIN / 3}));

  // The sum wraps first, then divides: (100 + 100) wraps to -56 in int8.
  std::vector<int8_t> a = {100, -3, -128}, b = {100, 0, -1}, d(3);
  sum_div_fn(DataType::Int8)(d.data(), a.data(), b.data(), d.size(), 2);
  EXPECT_EQ(d, (std::vector<int8_t>{-28, -1, 63}));

  std::vector<uint64_t> u = {UINT64_MAX, 5};
  div_fn(DataType::UInt64)(u.data(), u.data(), u.size(), 2);
  EXPECT_EQ(u, (std::vector<uint64_t>{UINT64_MAX / 2, 2}));

  // A divisor larger than every value of a narrow type.
  std::vector<int8_t> s = {-128, 127};
  div_fn(DataType::Int8)(s.data(), s.data(), s.size(), uint64_t{1} << 40);
  EXPECT_EQ(s, (std::vector<int8_t>{0, 0}));
}

TEST(ReduceSemanticsTest, FloatAvgIsARealDivision) {
  // 5 / 3 rounds differently from 5 * (1 / 3) in float; the kernel must give the quotient.
  const float a = 2.0f, b = 3.0f;
  volatile float three = 3.0f;
  float d = 0;
  sum_div_fn(DataType::Float32)(&d, &a, &b, 1, 3);
  EXPECT_EQ(bits_of(d), bits_of(5.0f / three));
  EXPECT_NE(bits_of(d), bits_of(5.0f * (1.0f / three)));
  div_fn(DataType::Float32)(&d, &b, 1, 7);
  EXPECT_EQ(bits_of(d), bits_of(3.0f / 7.0f));

  const double x = 0.1, y = 0.2;
  double e = 0;
  sum_div_fn(DataType::Float64)(&e, &x, &y, 1, 3);
  EXPECT_EQ(e, (0.1 + 0.2) / 3.0);
}

template <class T>
bool is_nan_value(T v) {
  if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
    return std::isnan(static_cast<float>(v));
  } else {
    return std::isnan(v);
  }
}

template <class T>
void check_nan_and_zero_ordering() {
  const T nan = T(std::numeric_limits<float>::quiet_NaN());
  const T one = T(1.0f);
  const T pz = T(0.0f);
  const T nz = T(-0.0f);
  for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) {
    SCOPED_TRACE(std::string(chorus::to_string(op)));
    const std::vector<T> a = {nan, one, nan, pz, nz};
    const std::vector<T> b = {one, nan, nan, nz, pz};
    std::vector<T> d(a.size());
    reduce(dtype_of_v<T>, op, d.data(), a.data(), b.data(), d.size());
    EXPECT_TRUE(is_nan_value(d[0]));
    EXPECT_TRUE(is_nan_value(d[1]));
    EXPECT_TRUE(is_nan_value(d[2]));
    // -0 orders below +0, whichever side it comes from.
    const T want_zero = op == ReduceOp::Min ? nz : pz;
    EXPECT_EQ(std::memcmp(&d[3], &want_zero, sizeof(T)), 0);
    EXPECT_EQ(std::memcmp(&d[4], &want_zero, sizeof(T)), 0);
  }
}

TEST(ReduceSemanticsTest, FloatMinMaxPropagateNaN) {
  check_nan_and_zero_ordering<float>();
  check_nan_and_zero_ordering<double>();
  check_nan_and_zero_ordering<float16_t>();
  check_nan_and_zero_ordering<bfloat16_t>();

  // With a NaN on both sides, a's NaN (its sign and payload) is returned.
  const float na = float_of(0xffc00123), nb = float_of(0x7fc00456);
  float d = 0;
  reduce_fn(DataType::Float32, ReduceOp::Min)(&d, &na, &nb, 1);
  EXPECT_EQ(bits_of(d), bits_of(na));
  reduce_fn(DataType::Float32, ReduceOp::Max)(&d, &nb, &na, 1);
  EXPECT_EQ(bits_of(d), bits_of(nb));
}

TEST(ReduceSemanticsTest, HalfSumRoundsOncePerOperation) {
  auto sum = [](float x, float y) {
    const float16_t a(x), b(y);
    float16_t d;
    reduce(DataType::Float16, ReduceOp::Sum, &d, &a, &b, 1);
    return static_cast<float>(d);
  };
  EXPECT_EQ(sum(2048, 1), 2048);  // tie, to even
  EXPECT_EQ(sum(2048, 3), 2052);  // tie, to even (up)
  EXPECT_EQ(sum(65504, 8), 65504);
  EXPECT_EQ(sum(65504, 16), std::numeric_limits<float>::infinity());  // 65520 is the overflow threshold
  EXPECT_EQ(sum(std::ldexp(1.0f, -24), std::ldexp(1.0f, -24)), std::ldexp(1.0f, -23));

  const bfloat16_t a(256.0f), b(1.0f);
  bfloat16_t d;
  reduce(DataType::BFloat16, ReduceOp::Sum, &d, &a, &b, 1);
  EXPECT_EQ(static_cast<float>(d), 256.0f);  // 257 is a tie between 256 and 258: to even
}

TEST(KernelDispatchTest, ActiveIsaIsSupportedAndAvxIsUsedWhereTheCpuHasIt) {
  EXPECT_TRUE(isa_supported(Isa::Generic));
  EXPECT_TRUE(isa_supported(active_isa())) << isa_name(active_isa());
  EXPECT_EQ(reduce_fn(DataType::Float32, ReduceOp::Sum), reduce_fn(DataType::Float32, ReduceOp::Sum, active_isa()));
  // Without CHORUS_KERNELS, the active set is the best one supported.
  if (std::getenv("CHORUS_KERNELS") == nullptr) {
    EXPECT_EQ(active_isa(), supported_isas().back()) << isa_name(active_isa());
  }
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(isa_supported(Isa::Avx2));
  }
#endif
  // Tables differ: the AVX kernels are separate functions, not the generic ones under another name.
  if (isa_supported(Isa::Avx2)) {
    EXPECT_NE(reduce_fn(DataType::Float16, ReduceOp::Sum, Isa::Avx2),
              reduce_fn(DataType::Float16, ReduceOp::Sum, Isa::Generic));
  }
}

TEST(ReduceSemanticsTest, OutOfRangeEnums) {
  const auto bad_type = static_cast<DataType>(kNumDataTypes);
  const auto bad_op = static_cast<ReduceOp>(kNumReduceOps);
  EXPECT_EQ(reduce_fn(bad_type, ReduceOp::Sum), nullptr);
  EXPECT_EQ(reduce_fn(static_cast<DataType>(255), ReduceOp::Sum), nullptr);
  EXPECT_EQ(reduce_fn(DataType::Float32, bad_op), nullptr);
  EXPECT_EQ(reduce_fn(DataType::Float32, static_cast<ReduceOp>(255)), nullptr);
  EXPECT_EQ(sum_div_fn(bad_type), nullptr);
  EXPECT_EQ(div_fn(bad_type), nullptr);
  float x = 0;
  try {
    reduce(bad_type, ReduceOp::Sum, &x, &x, &x, 1);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  EXPECT_THROW(reduce(DataType::Float32, bad_op, &x, &x, &x, 1), Error);
}

}  // namespace
}  // namespace chorus::kernels

// ---------------------------------------------------------------------------------------------------------
// Public type helpers (chorus/types.h)
// ---------------------------------------------------------------------------------------------------------

namespace chorus {
namespace {

TEST(TypesTest, SizesAndFloatingness) {
  struct Row {
    DataType type;
    size_t size;
    bool floating;
  };
  const Row rows[] = {
      {DataType::Int8, 1, false},   {DataType::UInt8, 1, false},   {DataType::Int32, 4, false},
      {DataType::UInt32, 4, false}, {DataType::Int64, 8, false},   {DataType::UInt64, 8, false},
      {DataType::Float16, 2, true}, {DataType::BFloat16, 2, true}, {DataType::Float32, 4, true},
      {DataType::Float64, 8, true},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(dtype_size(r.type), r.size) << to_string(r.type);
    EXPECT_EQ(is_floating(r.type), r.floating) << to_string(r.type);
  }
  static_assert(dtype_of_v<float16_t> == DataType::Float16);
  static_assert(dtype_of_v<const bfloat16_t> == DataType::BFloat16);
  static_assert(dtype_of_v<long long> == DataType::Int64);
  static_assert(sizeof(float16_t) == 2 && sizeof(bfloat16_t) == 2);
}

TEST(TypesTest, NamesAsNcclTestsPrintsThem) {
  const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "bfloat16", "float", "double"};
  for (int t = 0; t < kNumDataTypes; ++t) EXPECT_EQ(to_string(static_cast<DataType>(t)), names[t]);
  const char* ops[] = {"sum", "prod", "min", "max", "avg"};
  for (int o = 0; o < kNumReduceOps; ++o) EXPECT_EQ(to_string(static_cast<ReduceOp>(o)), ops[o]);
}

TEST(TypesTest, ParseRoundTripsEveryName) {
  for (int t = 0; t < kNumDataTypes; ++t) {
    const auto type = static_cast<DataType>(t);
    EXPECT_EQ(parse_dtype(to_string(type)), type) << to_string(type);
  }
  for (int o = 0; o < kNumReduceOps; ++o) {
    const auto op = static_cast<ReduceOp>(o);
    EXPECT_EQ(parse_reduce_op(to_string(op)), op) << to_string(op);
  }
}

TEST(TypesTest, ParseAcceptsAliasesInAnyCase) {
  const std::pair<const char*, DataType> dtypes[] = {
      {"float16", DataType::Float16}, {"fp16", DataType::Float16},    {"F16", DataType::Float16},
      {"HALF", DataType::Float16},    {"bf16", DataType::BFloat16},   {"BFloat16", DataType::BFloat16},
      {"float32", DataType::Float32}, {"FP32", DataType::Float32},    {"f32", DataType::Float32},
      {"Float", DataType::Float32},   {"float64", DataType::Float64}, {"fp64", DataType::Float64},
      {"f64", DataType::Float64},     {"DOUBLE", DataType::Float64},  {"int", DataType::Int32},
      {"char", DataType::Int8},       {"uint", DataType::UInt32},     {"Int64", DataType::Int64},
  };
  for (const auto& [name, type] : dtypes) EXPECT_EQ(parse_dtype(name), type) << name;
  const std::pair<const char*, ReduceOp> ops[] = {
      {"SUM", ReduceOp::Sum}, {"product", ReduceOp::Prod}, {"Prod", ReduceOp::Prod},   {"minimum", ReduceOp::Min},
      {"MAX", ReduceOp::Max}, {"maximum", ReduceOp::Max},  {"average", ReduceOp::Avg}, {"Avg", ReduceOp::Avg},
  };
  for (const auto& [name, op] : ops) EXPECT_EQ(parse_reduce_op(name), op) << name;
}

TEST(TypesTest, ParseRejectsUnknownNames) {
  for (const char* name : {"", "int16", "float8", "halff", " float", "float ", "fp", "bfloat", "int8_t"}) {
    EXPECT_EQ(parse_dtype(name), std::nullopt) << "'" << name << "'";
  }
  for (const char* name : {"", "add", "mul", "sum ", "minmax", "mean"}) {
    EXPECT_EQ(parse_reduce_op(name), std::nullopt) << "'" << name << "'";
  }
}

TEST(TypesTest, OutOfRangeEnums) {
  for (int v : {kNumDataTypes, 200, 255}) {
    const auto type = static_cast<DataType>(v);
    EXPECT_EQ(dtype_size(type), 0u);
    EXPECT_FALSE(is_floating(type));
    EXPECT_EQ(to_string(type), "?");
  }
  for (int v : {kNumReduceOps, 255}) EXPECT_EQ(to_string(static_cast<ReduceOp>(v)), "?");
}

// ---- streaming copies (kernels/copy.h) ----

// Against memcpy at every destination alignment within a line, a few source alignments, and lengths around
// the line size and the 1 MiB from which collectives stream; the bytes either side of the destination stay.
TEST(StreamCopy, CopiesLikeMemcpyAtEveryAlignmentAndLength) {
  constexpr size_t kGuard = 128;
  const size_t lengths[] = {0, 1, 15, 16, 63, 64, 65, 127, 128, 129, 4096 + 17, (size_t{1} << 20) + 5};
  std::mt19937 rng(7);
  for (size_t len : lengths) {
    std::vector<unsigned char> src(len + kGuard);
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    for (size_t dst_off = 0; dst_off<64; dst_off += len> 4096 ? 13 : 1) {
      for (size_t src_off : {size_t{0}, size_t{1}, size_t{8}, size_t{33}}) {
        std::vector<unsigned char> got(len + 2 * kGuard, 0xa5), want(got);
        kernels::stream_copy(got.data() + kGuard + dst_off, src.data() + src_off, len);
        std::memcpy(want.data() + kGuard + dst_off, src.data() + src_off, len);
        ASSERT_EQ(got, want) << "length " << len << ", destination offset " << dst_off << ", source offset " << src_off;
      }
    }
  }
}

TEST(StreamCopy, PaysOnlyForCopiesOfAMebibyteInAWorkingSetPastTheCache) {
  constexpr size_t kMiB = size_t{1} << 20;
  const size_t huge = size_t{1} << 40;
  for (int mode : {-1, 0, 1}) {
    EXPECT_FALSE(kernels::stream_copy_pays(kMiB - 1, huge, mode)) << mode;
    EXPECT_FALSE(kernels::stream_copy_pays(0, huge, mode)) << mode;
  }
  EXPECT_FALSE(kernels::stream_copy_pays(kMiB, huge, 0));
  EXPECT_FALSE(kernels::stream_copy_pays(kMiB, 2 * kMiB, -1));  // fits in any last-level cache this runs on
#if defined(__x86_64__)
  EXPECT_TRUE(kernels::stream_copy_pays(kMiB, huge, -1));
  EXPECT_TRUE(kernels::stream_copy_pays(kMiB, 0, 1));
  // The line is half the cache this process counts on (the kernel's figure, at most 16 MiB per usable core).
  const size_t half = base::cache_share_bytes() / 2;
  EXPECT_FALSE(kernels::stream_copy_pays(kMiB, half, -1));
  EXPECT_TRUE(kernels::stream_copy_pays(kMiB, half + 1, -1));
  // The creation log's words for each mode.
  EXPECT_NE(kernels::describe_stream_copy(-1).find("where the working set passes"), std::string::npos);
  EXPECT_NE(kernels::describe_stream_copy(0).find("never"), std::string::npos);
  EXPECT_NE(kernels::describe_stream_copy(1).find("from 1 MiB"), std::string::npos);
#else
  EXPECT_FALSE(kernels::stream_copy_pays(kMiB, huge, -1));
  EXPECT_FALSE(kernels::stream_copy_pays(kMiB, 0, 1));
#endif
}

}  // namespace
}  // namespace chorus
