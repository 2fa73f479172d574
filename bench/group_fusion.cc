// What a group buys: K all_reduces of the same size, float32 sum, timed four ways on every rank, side by side.
//
//   chorus-run -n N -- build/bin/group_fusion [-k CALLS] [-b MIN] [-e MAX] [-r ROUNDS]
//
//   separate     K synchronous all_reduce calls, one after another;
//   group        the same K calls between group_start() and group_end(): fused into one in-place all_reduce
//                over the communicator's staging buffer (registered memory from 64 KiB in all);
//   heap-staged  that fused work by hand through a heap buffer: copy the K inputs in, one in-place all_reduce
//                (CallOptions::registered false), copy the K results out;
//   reg-staged   the same through a chorus::mem_alloc buffer, the call saying CallOptions::registered from
//                64 KiB, as the group does.
// Each round times every way in turn (between barriers), so slow drifts of a shared machine hit all four alike;
// rank 0 prints the median over rounds of the time per group of K calls, in microseconds, and the ratios.
// Every result is checked against the sum over ranks of known inputs. Sizes are bytes per call (K/M suffixes),
// from MIN to MAX by factors of 4, each at most 4 MiB (larger calls are not fused).
#include <chorus/chorus.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using chorus::DataType;
using chorus::ReduceOp;

size_t parse_size(const std::string& s) {
  size_t pos = 0;
  size_t v = std::stoull(s, &pos);
  if (pos < s.size()) {
    switch (s[pos]) {
      case 'K':
      case 'k':
        v <<= 10;
        break;
      case 'M':
      case 'm':
        v <<= 20;
        break;
      default:
        throw CLI::ValidationError("size", "bad suffix in '" + s + "'");
    }
  }
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A group of K all_reduces against the same calls made separately or staged by hand"};
  int calls = 16, rounds = 7;
  std::string min_s = "4K", max_s = "4M";
  app.add_option("-k,--calls", calls, "all_reduces per group")->check(CLI::Range(1, 1024));
  app.add_option("-b,--minbytes", min_s, "smallest size per call in bytes (K/M suffixes)");
  app.add_option("-e,--maxbytes", max_s, "largest size per call in bytes, at most 4M");
  app.add_option("-r,--rounds", rounds, "rounds; each time is the median over them")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  const size_t min_b = parse_size(min_s), max_b = parse_size(max_s);
  if (min_b < 4 || max_b > (size_t{4} << 20) || min_b > max_b) {
    std::fprintf(stderr, "group_fusion: sizes must satisfy 4 <= MIN <= MAX <= 4M\n");
    return 2;
  }

  auto comm = chorus::Communicator::from_env();
  const int n = comm->size(), r = comm->rank();
  const size_t k = static_cast<size_t>(calls);
  if (r == 0) {
    std::printf("# %d ranks, %d all_reduces per group, float32 sum, median of %d rounds; us per group\n", n, calls,
                rounds);
    std::printf("# %10s %10s %12s %12s %12s %12s %10s %10s %9s\n", "bytes/call", "total", "separate", "group",
                "heap-staged", "reg-staged", "group/sep", "group/heap", "reg/heap");
  }
  for (size_t per = min_b; per <= max_b; per *= 4) {
    const size_t count = per / sizeof(float);
    std::vector<std::vector<float>> in(k), out(k);
    for (size_t c = 0; c < k; ++c) {
      in[c].resize(count);
      out[c].resize(count);
      for (size_t i = 0; i < count; ++i) in[c][i] = static_cast<float>((r + 1) * (1 + (i + c) % 7));
    }
    std::vector<float> heap(count * k);
    auto* reg = static_cast<float*>(chorus::mem_alloc(std::max<size_t>(per * k, 1)));
    chorus::CallOptions reg_opts;
    reg_opts.registered = per * k >= (size_t{64} << 10);
    const int iters = per <= (size_t{16} << 10) ? 200 : per <= (size_t{256} << 10) ? 20 : 4;
    std::vector<double> t[4];
    int wrong = 0;
    for (int round = 0; round < rounds + 1; ++round) {  // round 0 warms up
      for (int way = 0; way < 4; ++way) {
        for (auto& o : out) std::fill(o.begin(), o.end(), -1.0f);
        comm->barrier();
        const auto t0 = std::chrono::steady_clock::now();
        for (int it = 0; it < iters; ++it) {
          if (way == 0) {
            for (size_t c = 0; c < k; ++c)
              comm->all_reduce(in[c].data(), out[c].data(), count, DataType::Float32, ReduceOp::Sum);
          } else if (way == 1) {
            comm->group_start();
            for (size_t c = 0; c < k; ++c)
              comm->all_reduce(in[c].data(), out[c].data(), count, DataType::Float32, ReduceOp::Sum);
            comm->group_end();
          } else {
            float* s = way == 2 ? heap.data() : reg;
            for (size_t c = 0; c < k; ++c) std::memcpy(s + c * count, in[c].data(), per);
            comm->all_reduce(s, s, count * k, DataType::Float32, ReduceOp::Sum,
                             way == 2 ? chorus::CallOptions{} : reg_opts);
            for (size_t c = 0; c < k; ++c) std::memcpy(out[c].data(), s + c * count, per);
          }
        }
        comm->barrier();
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
        if (round > 0) t[way].push_back(us);
        const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
        for (size_t c = 0; c < k; ++c) {
          for (size_t i = 0; i < count; i += 1 + count / 64) {
            wrong += out[c][i] != ranks_sum * static_cast<float>(1 + (i + c) % 7);
          }
        }
      }
    }
    chorus::mem_free(reg);
    if (wrong) {
      std::fprintf(stderr, "group_fusion: rank %d: %d wrong elements at %zu bytes per call\n", r, wrong, per);
      return 1;
    }
    if (r == 0) {
      const double sep = median(t[0]), grp = median(t[1]), hs = median(t[2]), rs = median(t[3]);
      std::printf("  %10zu %10zu %12.1f %12.1f %12.1f %12.1f %10.2f %10.2f %9.2f\n", per, per * k, sep, grp, hs, rs,
                  grp / sep, grp / hs, rs / hs);
    }
  }
  return 0;
}
