// Helpers shared by the tests: running a world of ranks as threads, and typed values computed
// independently of the library (half types through GCC's _Float16 and a bf16 rounding written here).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::testing {

inline std::string transport_label(TransportKind t) {
  switch (t) {
    case TransportKind::InProc: return "InProc";
    case TransportKind::Tcp: return "Tcp";
    case TransportKind::Shm: return "Shm";
    default: return "Auto";
  }
}

// A test parameter that is just a transport, named after it ("InProc", "Tcp", "Shm").
struct TransportParam {
  TransportKind transport;
};
inline void PrintTo(const TransportParam& p, std::ostream* os) { *os << transport_label(p.transport); }
inline std::string transport_name(const ::testing::TestParamInfo<TransportParam>& info) {
  return transport_label(info.param.transport);
}

// The element counts a correctness matrix runs at world size n: none, one, fewer than the ranks (n - 1, from 3
// ranks), a count that does not divide among the ranks (2n + 1), 1000 (one to eight 1 KiB slices, by the type's
// size), and kManySlices, which spans many.
inline constexpr size_t kManySlices = 6007;
inline std::vector<size_t> edge_counts(int n) {
  std::vector<size_t> c = {0, 1};
  if (n > 2) c.push_back(static_cast<size_t>(n - 1));
  c.push_back(static_cast<size_t>(2 * n + 1));
  c.push_back(1000);
  c.push_back(kManySlices);
  return c;
}

// Sets an environment variable for the test's lifetime (communicators read it when they are created); an
// empty value leaves it unset.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (!value.empty()) ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// Runs `call` and expects Error with `code`; returns the error's what().
template <class F>
std::string expect_error(ErrorCode code, F&& call) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected Error(" << to_string(code) << ")";
  return {};
}

// Runs fn(comm) on `size` threads, one communicator each, sharing a MemoryStore. Exceptions escaping fn are
// reported as test failures naming the rank.
inline void run_world(int size, const CommOptions& options, const std::function<void(Communicator&)>& fn) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = Communicator::create(store, r, size, options);
        fn(*comm);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

// ---- typed values through double ----

inline uint16_t ref_float_to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((b >> 16) | 0x40);
  uint32_t lsb = (b >> 16) & 1;
  b += 0x7fff + lsb;
  return static_cast<uint16_t>(b >> 16);
}
inline float ref_bf16_to_float(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Stores v (already representable, or rounded the way the type rounds) at element i.
inline void store_value(DataType t, void* buf, size_t i, double v) {
  switch (t) {
    case DataType::Int8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(static_cast<int64_t>(v)); break;
    case DataType::UInt8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case DataType::Int32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(static_cast<int64_t>(v)); break;
    case DataType::UInt32: static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(static_cast<int64_t>(v)); break;
    case DataType::Int64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::UInt64: static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(static_cast<int64_t>(v)); break;
    case DataType::Float16: {
      _Float16 h = static_cast<_Float16>(static_cast<float>(v));
      std::memcpy(static_cast<char*>(buf) + 2 * i, &h, 2);
      break;
    }
    case DataType::BFloat16: {
      uint16_t h = ref_float_to_bf16(static_cast<float>(v));
      std::memcpy(static_cast<char*>(buf) + 2 * i, &h, 2);
      break;
    }
    case DataType::Float32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(buf)[i] = v; break;
  }
}

inline double load_value(DataType t, const void* buf, size_t i) {
  switch (t) {
    case DataType::Int8: return static_cast<const int8_t*>(buf)[i];
    case DataType::UInt8: return static_cast<const uint8_t*>(buf)[i];
    case DataType::Int32: return static_cast<const int32_t*>(buf)[i];
    case DataType::UInt32: return static_cast<const uint32_t*>(buf)[i];
    case DataType::Int64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::UInt64: return static_cast<double>(static_cast<const uint64_t*>(buf)[i]);
    case DataType::Float16: {
      _Float16 h;
      std::memcpy(&h, static_cast<const char*>(buf) + 2 * i, 2);
      return static_cast<double>(static_cast<float>(h));
    }
    case DataType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(buf) + 2 * i, 2);
      return ref_bf16_to_float(h);
    }
    case DataType::Float32: return static_cast<const float*>(buf)[i];
    case DataType::Float64: return static_cast<const double*>(buf)[i];
  }
  return 0;
}

inline bool is_signed_type(DataType t) {
  return t == DataType::Int8 || t == DataType::Int32 || t == DataType::Int64 || is_floating(t);
}

// An input value for (rank, element) chosen so that every reduction of up to 16 ranks is exact in every
// type, whatever the order of combination: small integers for Sum/Avg/Min/Max, and factors 1, -1 and 2
// (at most one 2 in four) for Prod.
inline double input_value(DataType t, ReduceOp op, int rank, size_t i) {
  bool sgn = is_signed_type(t);
  if (op == ReduceOp::Prod) {
    size_t k = (i + static_cast<size_t>(rank) * 3) % 4;
    if (k == 0) return 2;
    if (k == 1 && sgn) return -1;
    return 1;
  }
  if (op == ReduceOp::Min || op == ReduceOp::Max) {
    double v = static_cast<double>((static_cast<size_t>(rank) * 31 + i * 17) % 23);
    return sgn ? v - 11 : v;
  }
  double v = static_cast<double>((static_cast<size_t>(rank) * 7 + i * 3) % 5);
  return sgn ? v - 2 : v;
}

// A value for data-movement collectives: distinct per (rank, element) within the type's exact range.
inline double movement_value(DataType t, int rank, size_t i) {
  size_t range = (t == DataType::Int8 || t == DataType::UInt8) ? 100 : (t == DataType::BFloat16 ? 200 : 2000);
  return static_cast<double>((static_cast<size_t>(rank) * 37 + i * 11 + 1) % range);
}

// input_value(t, op, rank, i) and movement_value(t, rank, i) depend on the element index only through
// i % period, for every rank: tests with many elements compute each value (and each reference reduction)
// once per residue and look the rest up. Keep these in step with the functions above (collectives_test
// checks that the values repeat with these periods).
inline size_t input_period(ReduceOp op) {
  if (op == ReduceOp::Prod) return 4;
  if (op == ReduceOp::Min || op == ReduceOp::Max) return 23;
  return 5;
}
inline size_t movement_period(DataType t) {
  return (t == DataType::Int8 || t == DataType::UInt8) ? 100 : (t == DataType::BFloat16 ? 200 : 2000);
}

// The reduction of `vals` as the library defines it (see ReduceOp), rounded to the type.
inline double reference_reduce(DataType t, ReduceOp op, const std::vector<double>& vals) {
  double acc = vals[0];
  for (size_t k = 1; k < vals.size(); ++k) {
    double v = vals[k];
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: acc += v; break;
      case ReduceOp::Prod: acc *= v; break;
      case ReduceOp::Min: acc = std::min(acc, v); break;
      case ReduceOp::Max: acc = std::max(acc, v); break;
    }
  }
  if (op != ReduceOp::Avg) return acc;
  double n = static_cast<double>(vals.size());
  switch (t) {
    case DataType::Float64: return acc / n;
    case DataType::Float32: return static_cast<float>(acc) / static_cast<float>(n);
    case DataType::Float16:
      return static_cast<float>(static_cast<_Float16>(static_cast<float>(acc) / static_cast<float>(n)));
    case DataType::BFloat16:
      return ref_bf16_to_float(ref_float_to_bf16(static_cast<float>(acc) / static_cast<float>(n)));
    default: return std::trunc(acc / n);  // integer division truncates toward zero
  }
}

// Compares `count` elements of got against expected(i); reports the first mismatch only.
template <class Expected>
void expect_elements(DataType t, const void* got, size_t count, Expected&& expected, const std::string& what) {
  size_t wrong = 0, first = 0;
  double first_got = 0, first_want = 0;
  for (size_t i = 0; i < count; ++i) {
    double g = load_value(t, got, i), w = expected(i);
    if (!(g == w) && wrong++ == 0) {
      first = i;
      first_got = g;
      first_want = w;
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " wrong of " << count << "; first at " << first << ": got "
                       << first_got << ", want " << first_want;
}

inline std::vector<DataType> all_dtypes() {
  return {DataType::Int8,    DataType::UInt8,    DataType::Int32,   DataType::UInt32, DataType::Int64,
          DataType::UInt64,  DataType::Float16,  DataType::BFloat16, DataType::Float32, DataType::Float64};
}
inline std::vector<ReduceOp> all_ops() {
  return {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};
}

}  // namespace chorus::testing
