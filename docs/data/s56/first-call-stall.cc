// Times each call of a 2-rank collective and reports calls over 20 ms and the wait counters (fifty-sixth
// session, docs/performance.md "A lost wake-up behind 100 ms first calls"). WATCHDOG=1: raise SIGTRAP in a call
// that has run 50 ms (under gdb: the stacks of both ranks in the stall).
//   g++ -O2 -std=c++20 -I include -o /tmp/stall docs/data/s56/first-call-stall.cc -Lbuild/lib -lchorus \
//     -Wl,-rpath,$PWD/build/lib -lpthread
//   build/bin/chorus-run -n 2 -- /tmp/stall gather 8388608 20
#include <chorus/chorus.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
std::atomic<long> g_start{0};
static long now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int main(int argc, char** argv) {
  auto comm = chorus::Communicator::from_env();
  const std::string coll = argc > 1 ? argv[1] : "gather";
  size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (8u << 20);
  int iters = argc > 3 ? std::atoi(argv[3]) : 300;
  const int n = comm->size();
  size_t per = bytes / 4 / n;
  std::vector<float> s(per * n, 1.0f), r(per * n, 0.0f);
  int slow = 0;
  if (std::getenv("WATCHDOG"))
    std::thread([] {
      while (true) {
        long s = g_start.load();
        if (s && now_us() - s > 50000) {
          std::raise(SIGTRAP);
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }).detach();
  double worst = 0;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    g_start = now_us();
    if (coll == "gather")
      comm->gather(s.data(), r.data(), per, chorus::DataType::Float32, 0);
    else if (coll == "allgather")
      comm->all_gather(s.data(), r.data(), per, chorus::DataType::Float32);
    else if (coll == "reduce")
      comm->reduce(s.data(), r.data(), per * n, chorus::DataType::Float32, chorus::ReduceOp::Sum, 0);
    else
      comm->broadcast(s.data(), r.data(), per * n, chorus::DataType::Float32, 0);
    g_start = 0;
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ms > 20) {
      ++slow;
      std::printf("rank %d call %d: %.1f ms\n", comm->rank(), i, ms);
    }
    if (ms > worst) worst = ms;
  }
  auto t = comm->traffic();
  std::printf("rank %d: %s %zu x%d: slow(>20ms) %d worst %.1f ms; sleeps %lu missed %lu\n", comm->rank(), coll.c_str(),
              bytes, iters, slow, worst, (unsigned long)t.sleeps, (unsigned long)t.missed_wakeups);
}
