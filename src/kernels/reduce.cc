#include "kernels/reduce.h"

#include <array>
#include <bit>
#include <string>
#include <type_traits>
#include <utility>

#include "base/error.h"
#include "kernels/half.h"

// The kernels are one loop template instantiated per (element type, operation). They are written so that GCC
// and Clang vectorise them with the default flags: each loop runs over blocks of a constant number of elements
// (the -O2 "very cheap" vectoriser of GCC only vectorises loops whose trip count it knows), the element work is
// branch-free, and GCC's ivdep pragma tells it that dst does not partially overlap a or b (exact aliasing,
// which the interface allows, is harmless for an elementwise loop), so no runtime alias check is needed.
// Clang vectorises these loops with a runtime alias check of its own; its equivalent pragma
// (vectorize(assume_safety)) would warn on every loop it cannot vectorise, such as integer division.
#if defined(__GNUC__) && !defined(__clang__)
#define CHORUS_IVDEP _Pragma("GCC ivdep")
#else
#define CHORUS_IVDEP
#endif

namespace chorus::kernels {
namespace {

// ---- element types: how an element is stored and in which type it is computed ----

template <class T>
struct Plain {  // integers, float, double: computed in their own type
  using Storage = T;
  using Compute = T;
  static Compute load(Storage v) noexcept { return v; }
  static Storage store(Compute v) noexcept { return v; }
};

template <float (*ToFloat)(uint16_t) noexcept, uint16_t (*FromFloat)(float) noexcept>
struct Narrow {  // 16-bit floating types: computed in float, rounded back once per operation
  using Storage = uint16_t;
  using Compute = float;
  static Compute load(Storage v) noexcept { return ToFloat(v); }
  static Storage store(Compute v) noexcept { return FromFloat(v); }
};

// clang-format off
template <DataType> struct Elem;
template <> struct Elem<DataType::Int8> : Plain<int8_t> {};
template <> struct Elem<DataType::UInt8> : Plain<uint8_t> {};
template <> struct Elem<DataType::Int32> : Plain<int32_t> {};
template <> struct Elem<DataType::UInt32> : Plain<uint32_t> {};
template <> struct Elem<DataType::Int64> : Plain<int64_t> {};
template <> struct Elem<DataType::UInt64> : Plain<uint64_t> {};
template <> struct Elem<DataType::Float16> : Narrow<half_to_float, float_to_half> {};
template <> struct Elem<DataType::BFloat16> : Narrow<bf16_to_float, float_to_bf16> {};
template <> struct Elem<DataType::Float32> : Plain<float> {};
template <> struct Elem<DataType::Float64> : Plain<double> {};
// clang-format on

// ---- per-element operations ----

// Integer arithmetic in an unsigned type at least as wide as unsigned int (so that small types are not
// promoted to signed int, where a product could overflow): wraps modulo 2^bits, no undefined behaviour.
template <class T>
using Wide = decltype(std::make_unsigned_t<T>{} + 0u);

struct SumOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    } else {
      return a * b;
    }
  }
};

// Floating min/max: a NaN wins (a's when both are NaN); -0 orders below +0. Equal non-NaN inputs are either
// identical or zeros of opposite signs, so OR-ing (min) or AND-ing (max) their bits picks the right zero.
// (Written with compares and bit operations rather than std::signbit, which GCC does not vectorise for double.)
template <class T>
T bits_or(T a, T b) noexcept {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  return std::bit_cast<T>(std::bit_cast<U>(a) | std::bit_cast<U>(b));
}
template <class T>
T bits_and(T a, T b) noexcept {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  return std::bit_cast<T>(std::bit_cast<U>(a) & std::bit_cast<U>(b));
}

struct MinOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      // If only b is NaN, every compare is false and b is returned.
      return a != a ? a : (a == b ? bits_or(a, b) : (a < b ? a : b));
    }
  }
};

struct MaxOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      return a != a ? a : (a == b ? bits_and(a, b) : (a > b ? a : b));
    }
  }
};

// Avg reduces with Sum: its division is a separate kernel (div_kernel, or fused in sum_div_kernel).
// clang-format off
template <ReduceOp> struct OpFor;
template <> struct OpFor<ReduceOp::Sum> { using type = SumOp; };
template <> struct OpFor<ReduceOp::Prod> { using type = ProdOp; };
template <> struct OpFor<ReduceOp::Min> { using type = MinOp; };
template <> struct OpFor<ReduceOp::Max> { using type = MaxOp; };
template <> struct OpFor<ReduceOp::Avg> { using type = SumOp; };
// clang-format on

// The divisor converted once per call to what the per-element division needs.
template <class T>
struct Divisor {
  using type =
      std::conditional_t<std::is_floating_point_v<T>, T, std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  static type make(uint64_t d) noexcept { return static_cast<type>(d); }
};

// Integers: truncation toward zero in the element's signedness (|v / d| <= |v|, so the result fits).
// Floats: a real division, so that the result rounds exactly like sum / N computed by a reference.
template <class T>
T divide(T v, typename Divisor<T>::type d) noexcept {
  using D = typename Divisor<T>::type;
  return static_cast<T>(static_cast<D>(v) / d);
}

// ---- the loops ----

// Elements per block of the inner loop; a multiple of every vector width of interest.
constexpr size_t kBlock = 64;

template <class F>
inline void elementwise(size_t n, F&& f) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    CHORUS_IVDEP
    for (size_t j = 0; j < kBlock; ++j) f(i + j);
  }
  for (; i < n; ++i) f(i);
}

template <class E, class Op>
void reduce_kernel(void* dst, const void* a, const void* b, size_t n) {
  using S = typename E::Storage;
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  elementwise(n, [&](size_t i) { d[i] = E::store(Op::apply(E::load(x[i]), E::load(y[i]))); });
}

template <class E>
void sum_div_kernel(void* dst, const void* a, const void* b, size_t n, uint64_t divisor) {
  using S = typename E::Storage;
  using C = typename E::Compute;
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  const auto dv = Divisor<C>::make(divisor);
  // The sum is rounded to the element type before the division, as the unfused Sum then Div would do.
  elementwise(n, [&](size_t i) {
    const C sum = E::load(E::store(SumOp::apply(E::load(x[i]), E::load(y[i]))));
    d[i] = E::store(divide<C>(sum, dv));
  });
}

template <class E>
void div_kernel(void* dst, const void* src, size_t n, uint64_t divisor) {
  using S = typename E::Storage;
  using C = typename E::Compute;
  S* d = static_cast<S*>(dst);
  const S* s = static_cast<const S*>(src);
  const auto dv = Divisor<C>::make(divisor);
  elementwise(n, [&](size_t i) { d[i] = E::store(divide<C>(E::load(s[i]), dv)); });
}

// ---- the table: one row per DataType, one column per ReduceOp, both indexed by the enum's value ----
//
// A CPU-specific table (AVX2, AVX-512) can be built the same way from vector kernels and chosen once at
// startup; entries without a specialised kernel keep the generic one.

struct TypeKernels {
  std::array<ReduceFn, kNumReduceOps> reduce;
  SumDivFn sum_div;
  DivFn div;
};
using KernelTable = std::array<TypeKernels, kNumDataTypes>;

template <DataType T, size_t... Op>
constexpr TypeKernels make_type_kernels(std::index_sequence<Op...>) {
  return {{&reduce_kernel<Elem<T>, typename OpFor<static_cast<ReduceOp>(Op)>::type>...},
          &sum_div_kernel<Elem<T>>,
          &div_kernel<Elem<T>>};
}

template <size_t... T>
constexpr KernelTable make_table(std::index_sequence<T...>) {
  return {make_type_kernels<static_cast<DataType>(T)>(std::make_index_sequence<kNumReduceOps>())...};
}

constexpr KernelTable kGenericKernels = make_table(std::make_index_sequence<kNumDataTypes>());

const TypeKernels* kernels_for(DataType type) noexcept {
  const auto t = static_cast<size_t>(type);
  return t < kGenericKernels.size() ? &kGenericKernels[t] : nullptr;
}

}  // namespace

ReduceFn reduce_fn(DataType type, ReduceOp op) noexcept {
  const TypeKernels* k = kernels_for(type);
  const auto o = static_cast<size_t>(op);
  return k != nullptr && o < k->reduce.size() ? k->reduce[o] : nullptr;
}

SumDivFn sum_div_fn(DataType type) noexcept {
  const TypeKernels* k = kernels_for(type);
  return k != nullptr ? k->sum_div : nullptr;
}

DivFn div_fn(DataType type) noexcept {
  const TypeKernels* k = kernels_for(type);
  return k != nullptr ? k->div : nullptr;
}

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
