#include "chorus/types.h"

#include <array>
#include <utility>

#include "core/validate.h"
#include "kernels/half.h"

namespace chorus {

float16_t::float16_t(float f) noexcept : bits(kernels::float_to_half(f)) {}
float16_t::operator float() const noexcept { return kernels::half_to_float(bits); }

bfloat16_t::bfloat16_t(float f) noexcept : bits(kernels::float_to_bf16(f)) {}
bfloat16_t::operator float() const noexcept { return kernels::bf16_to_float(bits); }

namespace {

struct DataTypeInfo {
  DataType type;
  std::string_view name;
  size_t size;
  bool floating;
};

// In enum order; checked below so that a reordered enum cannot silently mismatch.
constexpr std::array<DataTypeInfo, kNumDataTypes> kDataTypes = {{
    {DataType::Int8, "int8", 1, false},
    {DataType::UInt8, "uint8", 1, false},
    {DataType::Int32, "int32", 4, false},
    {DataType::UInt32, "uint32", 4, false},
    {DataType::Int64, "int64", 8, false},
    {DataType::UInt64, "uint64", 8, false},
    {DataType::Float16, "half", 2, true},
    {DataType::BFloat16, "bfloat16", 2, true},
    {DataType::Float32, "float", 4, true},
    {DataType::Float64, "double", 8, true},
}};

constexpr std::array<std::pair<ReduceOp, std::string_view>, kNumReduceOps> kReduceOps = {{
    {ReduceOp::Sum, "sum"},
    {ReduceOp::Prod, "prod"},
    {ReduceOp::Min, "min"},
    {ReduceOp::Max, "max"},
    {ReduceOp::Avg, "avg"},
}};

constexpr bool tables_in_enum_order() {
  for (size_t i = 0; i < kDataTypes.size(); ++i) {
    if (static_cast<size_t>(kDataTypes[i].type) != i) return false;
  }
  for (size_t i = 0; i < kReduceOps.size(); ++i) {
    if (static_cast<size_t>(kReduceOps[i].first) != i) return false;
  }
  return true;
}
static_assert(tables_in_enum_order());

// core::element_size (the inline size lookup of the call path) must agree with this table.
constexpr bool element_sizes_agree() {
  for (const DataTypeInfo& i : kDataTypes) {
    if (core::element_size(i.type) != i.size) return false;
  }
  return core::element_size(static_cast<DataType>(kNumDataTypes)) == 0;
}
static_assert(element_sizes_agree());

// Accepted spellings besides the canonical names.
constexpr std::pair<std::string_view, DataType> kDataTypeAliases[] = {
    {"char", DataType::Int8},       {"int", DataType::Int32},       {"uint", DataType::UInt32},
    {"float16", DataType::Float16}, {"fp16", DataType::Float16},    {"f16", DataType::Float16},
    {"bf16", DataType::BFloat16},   {"float32", DataType::Float32}, {"fp32", DataType::Float32},
    {"f32", DataType::Float32},     {"float64", DataType::Float64}, {"fp64", DataType::Float64},
    {"f64", DataType::Float64},
};

constexpr std::pair<std::string_view, ReduceOp> kReduceOpAliases[] = {
    {"product", ReduceOp::Prod},
    {"minimum", ReduceOp::Min},
    {"maximum", ReduceOp::Max},
    {"average", ReduceOp::Avg},
};

// ASCII-only case folding: std::tolower depends on the process's locale.
constexpr char ascii_lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

const DataTypeInfo* info(DataType type) noexcept {
  const auto i = static_cast<size_t>(type);
  return i < kDataTypes.size() ? &kDataTypes[i] : nullptr;
}

}  // namespace

size_t dtype_size(DataType type) noexcept {
  const DataTypeInfo* i = info(type);
  return i != nullptr ? i->size : 0;
}

bool is_floating(DataType type) noexcept {
  const DataTypeInfo* i = info(type);
  return i != nullptr && i->floating;
}

std::string_view to_string(DataType type) noexcept {
  const DataTypeInfo* i = info(type);
  return i != nullptr ? i->name : "?";
}

std::string_view to_string(ReduceOp op) noexcept {
  const auto i = static_cast<size_t>(op);
  return i < kReduceOps.size() ? kReduceOps[i].second : "?";
}

std::optional<DataType> parse_dtype(std::string_view name) noexcept {
  for (const DataTypeInfo& i : kDataTypes) {
    if (iequals(name, i.name)) return i.type;
  }
  for (const auto& [alias, type] : kDataTypeAliases) {
    if (iequals(name, alias)) return type;
  }
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept {
  for (const auto& [op, op_name] : kReduceOps) {
    if (iequals(name, op_name)) return op;
  }
  for (const auto& [alias, op] : kReduceOpAliases) {
    if (iequals(name, alias)) return op;
  }
  return std::nullopt;
}

}  // namespace chorus
