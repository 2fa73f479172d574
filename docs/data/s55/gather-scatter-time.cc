// Times gather and scatter (4 ranks on a 2-core host in the fifty-fifth session) for the shared-core
// tree-edge rule: docs/performance.md, "Tree edges through the rings where ranks share cores".
//   g++ -O2 -std=c++20 -I include docs/data/s55/gather-scatter-time.cc -L build/lib -lchorus \
//     -Wl,-rpath,$PWD/build/lib -o /tmp/gst
//   CHORUS_TRANSPORT=shm build/bin/chorus-run -n 4 -- /tmp/gst
// Prints, on rank 0, the median over 7 batches of the slowest rank's time per call (us) for each block size.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "chorus/chorus.h"

int main() {
  auto comm = chorus::Communicator::from_env();
  const int n = comm->size(), r = comm->rank();
  for (size_t block_bytes = size_t{32} << 10; block_bytes <= (size_t{1} << 20); block_bytes *= 2) {
    const size_t count = block_bytes / sizeof(float);
    std::vector<float> mine(count, static_cast<float>(r)), all(count * n, 0.0f);
    const int iters = block_bytes <= (size_t{128} << 10) ? 200 : 40;
    for (int which = 0; which < 2; ++which) {
      std::vector<double> batches;
      for (int b = 0; b < 8; ++b) {
        comm->barrier();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
          if (which == 0) {
            comm->gather(mine.data(), all.data(), count, chorus::DataType::Float32, 0);
          } else {
            comm->scatter(all.data(), mine.data(), count, chorus::DataType::Float32, 0);
          }
        }
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
        double slowest = 0;
        comm->all_reduce(&us, &slowest, 1, chorus::DataType::Float64, chorus::ReduceOp::Max);
        if (b > 0) batches.push_back(slowest);  // the first batch warms
      }
      std::sort(batches.begin(), batches.end());
      if (r == 0)
        std::printf("%s %zu %.2f\n", which == 0 ? "gather" : "scatter", block_bytes, batches[batches.size() / 2]);
    }
  }
  return 0;
}
