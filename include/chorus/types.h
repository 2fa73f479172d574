// Element types and reduction operators.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "chorus/export.h"

namespace chorus {

enum class DataType : uint8_t { Int8, UInt8, Int32, UInt32, Int64, UInt64, Float16, BFloat16, Float32, Float64 };
inline constexpr int kNumDataTypes = 10;

// Avg is Sum followed by a division by the number of ranks. For floating-point types the division is done
// in the element's arithmetic (float for Float16/BFloat16). For integer types it is an integer division that
// truncates toward zero, applied to the (wrapping) sum: avg({1, 2}) over 2 ranks is 1, as in NCCL.
// Integer Sum and Prod wrap modulo 2^bits, signed types included (no undefined behaviour).
enum class ReduceOp : uint8_t { Sum, Prod, Min, Max, Avg };
inline constexpr int kNumReduceOps = 5;

// IEEE 754 binary16, stored as its bit pattern. Arithmetic is done in float by the library.
struct CHORUS_API float16_t {
  uint16_t bits = 0;
  float16_t() = default;
  explicit float16_t(float f) noexcept;  // rounds to nearest even
  explicit operator float() const noexcept;
  static constexpr float16_t from_bits(uint16_t b) noexcept {
    float16_t h;
    h.bits = b;
    return h;
  }
};

// bfloat16 (the upper half of a float32), stored as its bit pattern.
struct CHORUS_API bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  explicit bfloat16_t(float f) noexcept;  // rounds to nearest even
  explicit operator float() const noexcept;
  static constexpr bfloat16_t from_bits(uint16_t b) noexcept {
    bfloat16_t h;
    h.bits = b;
    return h;
  }
};

// Size of one element in bytes; 0 for a value outside the enum.
CHORUS_API size_t dtype_size(DataType type) noexcept;
CHORUS_API bool is_floating(DataType type) noexcept;

// Names as nccl-tests prints them: "int8", "uint8", "int32", "uint32", "int64", "uint64", "half",
// "bfloat16", "float", "double"; and "sum", "prod", "min", "max", "avg".
CHORUS_API std::string_view to_string(DataType type) noexcept;
CHORUS_API std::string_view to_string(ReduceOp op) noexcept;

// Accept the names above plus common aliases ("float32", "fp32", "f16", "bf16", "int", "char", ...).
CHORUS_API std::optional<DataType> parse_dtype(std::string_view name) noexcept;
CHORUS_API std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept;

// Maps a C++ element type to its DataType, for the typed overloads of Communicator.
template <class T>
struct dtype_of;
template <> struct dtype_of<int8_t> { static constexpr DataType value = DataType::Int8; };
template <> struct dtype_of<uint8_t> { static constexpr DataType value = DataType::UInt8; };
template <> struct dtype_of<int32_t> { static constexpr DataType value = DataType::Int32; };
template <> struct dtype_of<uint32_t> { static constexpr DataType value = DataType::UInt32; };
template <> struct dtype_of<int64_t> { static constexpr DataType value = DataType::Int64; };
template <> struct dtype_of<uint64_t> { static constexpr DataType value = DataType::UInt64; };
template <> struct dtype_of<float16_t> { static constexpr DataType value = DataType::Float16; };
template <> struct dtype_of<bfloat16_t> { static constexpr DataType value = DataType::BFloat16; };
template <> struct dtype_of<float> { static constexpr DataType value = DataType::Float32; };
template <> struct dtype_of<double> { static constexpr DataType value = DataType::Float64; };
// long long is a distinct type from int64_t (long) on LP64 Linux; map it too.
template <> struct dtype_of<long long> { static constexpr DataType value = DataType::Int64; };
template <> struct dtype_of<unsigned long long> { static constexpr DataType value = DataType::UInt64; };
template <class T>
inline constexpr DataType dtype_of_v = dtype_of<std::remove_cv_t<T>>::value;

}  // namespace chorus
