// A program written against Chorus's public API only, as someone outside the project would: started by
// chorus-run (or mpirun/srun/torchrun), it checks every collective for every dtype and op, in place and
// out of place, over edge-case counts, against results it computes itself. Exits 0 when all agree.
#include <chorus/chorus.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using chorus::DataType;
using chorus::ReduceOp;

namespace {

int failures = 0;
long checks = 0;

// ---- element values through double; half types via GCC's _Float16 and a hand-written bf16 ----
uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fff + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t b = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

void put(DataType t, void* p, size_t i, double v) {
  switch (t) {
    case DataType::Int8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::UInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::Int32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::UInt32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case DataType::Int64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::UInt64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    case DataType::Float16: { _Float16 h = static_cast<_Float16>(static_cast<float>(v)); std::memcpy(static_cast<char*>(p) + 2 * i, &h, 2); break; }
    case DataType::BFloat16: { uint16_t h = to_bf16(static_cast<float>(v)); std::memcpy(static_cast<char*>(p) + 2 * i, &h, 2); break; }
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(p)[i] = v; break;
  }
}

double get(DataType t, const void* p, size_t i) {
  switch (t) {
    case DataType::Int8: return static_cast<const int8_t*>(p)[i];
    case DataType::UInt8: return static_cast<const uint8_t*>(p)[i];
    case DataType::Int32: return static_cast<const int32_t*>(p)[i];
    case DataType::UInt32: return static_cast<const uint32_t*>(p)[i];
    case DataType::Int64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::UInt64: return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    case DataType::Float16: { _Float16 h; std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2); return static_cast<float>(h); }
    case DataType::BFloat16: { uint16_t h; std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2); return from_bf16(h); }
    case DataType::Float32: return static_cast<const float*>(p)[i];
    case DataType::Float64: return static_cast<const double*>(p)[i];
  }
  return 0;
}

bool is_unsigned(DataType t) { return t == DataType::UInt8 || t == DataType::UInt32 || t == DataType::UInt64; }

// Inputs whose reductions are exact in every type: small integers, and factors {1, -1, 2} for Prod.
double value(DataType t, ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::Prod) {
    size_t k = (i * 5 + static_cast<size_t>(rank)) % 4;
    return k == 0 ? 2 : (k == 1 && !is_unsigned(t) ? -1 : 1);
  }
  double v = static_cast<double>((static_cast<size_t>(rank) * 13 + i * 7) % 9);
  return is_unsigned(t) ? v : v - 4;
}

double reduce_ref(DataType t, ReduceOp op, int n, const std::function<double(int)>& of_rank) {
  double acc = of_rank(0);
  for (int q = 1; q < n; ++q) {
    double v = of_rank(q);
    if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc += v;
    if (op == ReduceOp::Prod) acc *= v;
    if (op == ReduceOp::Min) acc = std::min(acc, v);
    if (op == ReduceOp::Max) acc = std::max(acc, v);
  }
  if (op != ReduceOp::Avg) return acc;
  float f = static_cast<float>(acc) / static_cast<float>(n);
  switch (t) {
    case DataType::Float64: return acc / n;
    case DataType::Float32: return f;
    case DataType::Float16: return static_cast<float>(static_cast<_Float16>(f));
    case DataType::BFloat16: return from_bf16(to_bf16(f));
    default: return std::trunc(acc / n);
  }
}

void check(const char* what, DataType t, const void* got, size_t count, const std::function<double(size_t)>& want,
           int rank) {
  ++checks;
  for (size_t i = 0; i < count; ++i) {
    double g = get(t, got, i), w = want(i);
    if (g != w) {
      std::fprintf(stderr, "check_all: rank %d: %s %s count %zu: element %zu is %g, expected %g\n", rank, what,
                   std::string(chorus::to_string(t)).c_str(), count, i, g, w);
      ++failures;
      return;
    }
  }
}

}  // namespace

int main() {
  try {
    auto comm = chorus::Communicator::from_env();
    const int n = comm->size(), r = comm->rank();
    const DataType types[] = {DataType::Int8,     DataType::UInt8,   DataType::Int32,  DataType::UInt32,
                              DataType::Int64,    DataType::UInt64,  DataType::Float16, DataType::BFloat16,
                              DataType::Float32,  DataType::Float64};
    const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};
    const size_t counts[] = {0, 1, static_cast<size_t>(n > 1 ? n - 1 : 1), static_cast<size_t>(3 * n + 1), 4099,
                             100003};
    for (DataType t : types) {
      const size_t es = chorus::dtype_size(t);
      for (size_t count : counts) {
        for (int ip = 0; ip < 2; ++ip) {
          const bool in_place = ip == 1;
          const int root = static_cast<int>(count % static_cast<size_t>(n));
          for (ReduceOp op : ops) {
            auto v = [&](int q, size_t i) { return value(t, op, q, i); };
            std::vector<char> in(count * es * n), out(count * es * n);
            // all_reduce
            for (size_t i = 0; i < count; ++i) put(t, in.data(), i, v(r, i));
            comm->all_reduce(in.data(), in_place ? in.data() : out.data(), count, t, op);
            check("all_reduce", t, in_place ? in.data() : out.data(), count,
                  [&](size_t i) { return reduce_ref(t, op, n, [&](int q) { return v(q, i); }); }, r);
            // reduce
            for (size_t i = 0; i < count; ++i) put(t, in.data(), i, v(r, i));
            comm->reduce(in.data(), in_place ? in.data() : out.data(), count, t, op, root);
            if (r == root) {
              check("reduce", t, in_place ? in.data() : out.data(), count,
                    [&](size_t i) { return reduce_ref(t, op, n, [&](int q) { return v(q, i); }); }, r);
            }
            // reduce_scatter: block r of the reduction of everyone's n * count inputs
            for (size_t i = 0; i < count * n; ++i) put(t, in.data(), i, v(r, i));
            char* rs_out = in_place ? in.data() + static_cast<size_t>(r) * count * es : out.data();
            comm->reduce_scatter(in.data(), rs_out, count, t, op);
            check("reduce_scatter", t, rs_out, count, [&](size_t i) {
              return reduce_ref(t, op, n, [&](int q) { return v(q, static_cast<size_t>(r) * count + i); });
            }, r);
          }
          auto mv = [&](int q, size_t i) { return static_cast<double>((static_cast<size_t>(q) * 31 + i) % 97); };
          std::vector<char> in(count * es * n), out(count * es * n);
          // broadcast
          for (size_t i = 0; i < count; ++i) put(t, out.data(), i, r == root ? mv(root, i) : -1);
          for (size_t i = 0; i < count; ++i) put(t, in.data(), i, mv(r, i));
          comm->broadcast(in_place ? out.data() : in.data(), out.data(), count, t, root);
          check("broadcast", t, out.data(), count, [&](size_t i) { return mv(root, i); }, r);
          // all_gather
          char* mine = out.data() + static_cast<size_t>(r) * count * es;
          for (size_t i = 0; i < count; ++i) put(t, in_place ? mine : in.data(), i, mv(r, i));
          comm->all_gather(in_place ? mine : in.data(), out.data(), count, t);
          check("all_gather", t, out.data(), count * n,
                [&](size_t i) { return mv(static_cast<int>(i / count), i % count); }, r);
          // all_to_all: block j of the result is block r of rank j's input
          for (size_t i = 0; i < count * n; ++i) put(t, in.data(), i, mv(r, i));
          comm->all_to_all(in.data(), in_place ? in.data() : out.data(), count, t);
          check("all_to_all", t, in_place ? in.data() : out.data(), count * n, [&](size_t i) {
            return mv(static_cast<int>(i / count), static_cast<size_t>(r) * count + i % count);
          }, r);
          // gather
          for (size_t i = 0; i < count; ++i) put(t, in.data(), i, mv(r, i));
          char* g_mine = out.data() + static_cast<size_t>(root) * count * es;
          if (in_place && r == root) {
            std::memcpy(g_mine, in.data(), count * es);
            comm->gather(g_mine, out.data(), count, t, root);
          } else {
            comm->gather(in.data(), out.data(), count, t, root);
          }
          if (r == root) {
            check("gather", t, out.data(), count * n,
                  [&](size_t i) { return mv(static_cast<int>(i / count), i % count); }, r);
          }
          // scatter
          for (size_t i = 0; i < count * n; ++i) put(t, in.data(), i, mv(r, i));
          char* s_out = in_place && r == root ? in.data() + static_cast<size_t>(root) * count * es : out.data();
          comm->scatter(in.data(), s_out, count, t, root);
          check("scatter", t, s_out, count,
                [&](size_t i) { return mv(root, static_cast<size_t>(r) * count + i); }, r);
          // send/recv around a ring (even ranks send first)
          if (n > 1 && !in_place) {
            for (size_t i = 0; i < count; ++i) put(t, in.data(), i, mv(r, i));
            int to = (r + 1) % n, from = (r + n - 1) % n;
            if (r % 2 == 0) {
              comm->send(in.data(), count, t, to);
              comm->recv(out.data(), count, t, from);
            } else {
              comm->recv(out.data(), count, t, from);
              comm->send(in.data(), count, t, to);
            }
            check("send/recv", t, out.data(), count, [&](size_t i) { return mv(from, i); }, r);
          }
          comm->barrier();
        }
      }
    }
    // Typed calls and a split.
    std::vector<double> x(10, 1.0 + r);
    comm->all_reduce(x, ReduceOp::Max);
    check("typed all_reduce", DataType::Float64, x.data(), x.size(), [&](size_t) { return double(n); }, r);
    auto half = comm->split(r % 2, -r);
    if (half) {
      int32_t one = 1, members = 0;
      half->all_reduce(&one, &members, 1, DataType::Int32, ReduceOp::Sum);
      int expected = (n + (r % 2 == 0 ? 1 : 0)) / 2;
      check("split size", DataType::Int32, &members, 1, [&](size_t) { return double(expected); }, r);
      // key = -rank: the highest parent rank comes first
      check("split rank order", DataType::Int32, &members, 0, [](size_t) { return 0.0; }, r);
      if (half->rank() != (expected - 1 - r / 2)) {
        std::fprintf(stderr, "check_all: rank %d: split rank %d, expected %d\n", r, half->rank(), expected - 1 - r / 2);
        ++failures;
      }
    }
    std::printf("check_all: rank %d of %d over %s: %ld checks, %d failures\n", r, n,
                std::string(comm->transport_name()).c_str(), checks, failures);
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "check_all: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
