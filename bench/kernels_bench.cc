// Reduction kernel throughput against memcpy of the same number of bytes, in cache (32 KiB) and out of
// cache (64 MiB); memcpy and the streaming copy also at 4 and 16 MiB. Bytes/s counts the size of one buffer per call,
// as nccl-tests' bus bandwidth does: a reduction reads two buffers and writes one (3x the traffic), memcpy reads one
// and writes one (2x).
//
//   build/bin/kernels_bench --benchmark_filter=Reduce/avx2   (one table; generic, avx2 or avx512)
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "chorus/types.h"
#include "kernels/copy.h"
#include "kernels/reduce.h"

namespace chorus::kernels {
namespace {

constexpr int64_t kInCache = 32 << 10;
constexpr int64_t kOutOfCache = 64 << 20;

// Every element of a buffer set to 1 in `type` (keeps float sums finite and away from subnormals).
std::vector<unsigned char> ones(DataType type, size_t bytes) {
  std::vector<unsigned char> v(bytes);
  const size_t size = dtype_size(type);
  unsigned char one[8] = {};
  switch (type) {
    case DataType::Float16: {
      const uint16_t h = float16_t(1.0f).bits;
      std::memcpy(one, &h, 2);
      break;
    }
    case DataType::BFloat16: {
      const uint16_t h = bfloat16_t(1.0f).bits;
      std::memcpy(one, &h, 2);
      break;
    }
    case DataType::Float32: {
      const float f = 1.0f;
      std::memcpy(one, &f, 4);
      break;
    }
    case DataType::Float64: {
      const double f = 1.0;
      std::memcpy(one, &f, 8);
      break;
    }
    default:
      one[0] = 1;  // little-endian integer 1
      break;
  }
  for (size_t i = 0; i + size <= bytes; i += size) std::memcpy(&v[i], one, size);
  return v;
}

void BM_Reduce(benchmark::State& state, DataType type, ReduceOp op, Isa isa) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t n = bytes / dtype_size(type);
  const std::vector<unsigned char> a = ones(type, bytes);
  const std::vector<unsigned char> b = ones(type, bytes);
  std::vector<unsigned char> dst(bytes);
  const ReduceFn fn = reduce_fn(type, op, isa);
  for (auto _ : state) {
    fn(dst.data(), a.data(), b.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const std::vector<unsigned char> src(bytes, 1);
  std::vector<unsigned char> dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

// The streaming copy (kernels/copy.h) beside memcpy: slower where the buffers fit in the cache, faster where
// they do not (its stores skip reading the destination's lines).
void BM_StreamCopy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const std::vector<unsigned char> src(bytes, 1);
  std::vector<unsigned char> dst(bytes);
  for (auto _ : state) {
    stream_copy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

void register_all() {
  benchmark::RegisterBenchmark("Memcpy", BM_Memcpy)->Arg(kInCache)->Arg(4 << 20)->Arg(16 << 20)->Arg(kOutOfCache);
  benchmark::RegisterBenchmark("StreamCopy", BM_StreamCopy)
      ->Arg(kInCache)
      ->Arg(4 << 20)
      ->Arg(16 << 20)
      ->Arg(kOutOfCache);
  const struct {
    const char* name;
    DataType type;
    ReduceOp op;
  } kCases[] = {
      {"float_sum", DataType::Float32, ReduceOp::Sum},   {"double_sum", DataType::Float64, ReduceOp::Sum},
      {"half_sum", DataType::Float16, ReduceOp::Sum},    {"bfloat16_sum", DataType::BFloat16, ReduceOp::Sum},
      {"int32_sum", DataType::Int32, ReduceOp::Sum},     {"int8_sum", DataType::Int8, ReduceOp::Sum},
      {"float_max", DataType::Float32, ReduceOp::Max},   {"double_min", DataType::Float64, ReduceOp::Min},
      {"float_prod", DataType::Float32, ReduceOp::Prod}, {"half_max", DataType::Float16, ReduceOp::Max},
  };
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (!isa_supported(isa)) continue;
    for (const auto& c : kCases) {
      benchmark::RegisterBenchmark((std::string("Reduce/") + isa_name(isa) + "/" + c.name).c_str(), BM_Reduce, c.type,
                                   c.op, isa)
          ->Arg(kInCache)
          ->Arg(kOutOfCache);
    }
  }
}

}  // namespace
}  // namespace chorus::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  chorus::kernels::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
