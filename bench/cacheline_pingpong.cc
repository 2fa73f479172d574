// How long one cache line takes to go from one CPU to another and back, sampled over time.
//
// Two processes (this one and a forked child), pinned to CPUs A and B, pass a counter back and forth through
// two cache lines of a shared mapping, as a 2-rank shared-memory collective passes its frames and doorbells.
// A sample is the mean round trip over N passes; S samples are taken INTERVAL_MS apart.
//
//   build/bin/cacheline_pingpong [-a CPU] [-b CPU] [-s SAMPLES] [-i INTERVAL_MS] [-n ROUNDTRIPS] [-q]
//
// Prints each sample's round trip in nanoseconds (-q: only the summary), then the minimum, median and maximum,
// and how many samples took under 100 ns. On a virtual machine the CPUs are virtual: the host places them on
// its cores, and may move them. Measured on the 2-core test machine (2026-12-03): most samples take 230-650 ns
// (the two virtual CPUs on different physical cores), and some 46-50 ns (on the two hyperthreads of one
// core, which share its caches); which of the two holds changes from second to second. Every small-message
// figure of a shared-memory collective follows it (docs/performance.md, "Where the two virtual CPUs sit").
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

namespace {

struct alignas(64) Line {
  std::atomic<long> value{0};
};

struct Shared {
  Line ping;  // written by the parent
  Line pong;  // written by the child
  Line go;    // 1 + the sample the parent is timing; 0 between samples; -1: stop
};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int cpu_a = 0, cpu_b = 1, samples = 20, interval_ms = 500;
  long roundtrips = 20000;
  bool quiet = false;
  CLI::App app{"The round trip of a cache line between two CPUs, sampled over time."};
  app.add_option("-a", cpu_a, "CPU of the parent process")->check(CLI::NonNegativeNumber);
  app.add_option("-b", cpu_b, "CPU of the child process")->check(CLI::NonNegativeNumber);
  app.add_option("-s", samples, "Samples")->check(CLI::PositiveNumber);
  app.add_option("-i", interval_ms, "Milliseconds between samples")->check(CLI::NonNegativeNumber);
  app.add_option("-n", roundtrips, "Round trips per sample")->check(CLI::PositiveNumber);
  app.add_flag("-q", quiet, "Print only the summary");
  CLI11_PARSE(app, argc, argv);

  // Both CPUs are tried here, before the fork: a child that could not pin would leave the parent waiting for
  // its answers forever.
  for (int cpu : {cpu_b, cpu_a}) {
    if (!pin(cpu)) {
      std::fprintf(stderr, "cannot pin to CPU %d: %s\n", cpu, std::strerror(errno));
      return 1;
    }
  }
  void* m = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* sh = new (m) Shared();
  const pid_t child = ::fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) {
    pin(cpu_b);  // the parent is already on cpu_a
    // Answer every ping with the same number, until told to stop. Between samples the parent sleeps; so does
    // the child (it spins only while a sample runs).
    long next = 1;
    while (true) {
      long go = sh->go.value.load(std::memory_order_acquire);
      if (go < 0) _exit(0);
      if (sh->ping.value.load(std::memory_order_acquire) == next) {
        sh->pong.value.store(next, std::memory_order_release);
        ++next;
      } else if (go == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }

  std::vector<double> ns;
  long next = 1;
  for (int s = 0; s < samples; ++s) {
    if (s > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    sh->go.value.store(s + 1, std::memory_order_release);
    // A few passes first, so the child is spinning again before the clock starts.
    for (int w = 0; w < 100; ++w, ++next) {
      sh->ping.value.store(next, std::memory_order_release);
      while (sh->pong.value.load(std::memory_order_acquire) != next) {
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (long r = 0; r < roundtrips; ++r, ++next) {
      sh->ping.value.store(next, std::memory_order_release);
      while (sh->pong.value.load(std::memory_order_acquire) != next) {
      }
    }
    const auto t1 = std::chrono::steady_clock::now();
    sh->go.value.store(0, std::memory_order_release);
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(roundtrips));
    if (!quiet) {
      std::printf("%.0f\n", ns.back());
      std::fflush(stdout);
    }
  }
  sh->go.value.store(-1, std::memory_order_release);
  ::waitpid(child, nullptr, 0);

  std::vector<double> sorted = ns;
  std::sort(sorted.begin(), sorted.end());
  const long shared_core = std::count_if(ns.begin(), ns.end(), [](double v) { return v < 100; });
  std::printf(
      "cpus %d,%d: round trip min %.0f ns, median %.0f ns, max %.0f ns; %ld of %zu samples under 100 ns "
      "(the two CPUs then share a physical core)\n",
      cpu_a, cpu_b, sorted.front(), sorted[sorted.size() / 2], sorted.back(), shared_core, ns.size());
  return 0;
}
