// The floor of a 2-rank float32 sum all_reduce on this machine: the memory work alone, with no library,
// no messages and no protocol. Two processes (this one and a forked child, one per core) repeat the
// data movement that any 2-rank all_reduce must do on the same buffers each call (as chorus-perf
// --rotate 0 and the peers' benchmark do), separated only by a spinning barrier in shared memory.
//
// Five ways of doing that work, each a floor for a family of implementations:
//   shared-fused    both ranks' buffers in one shared mapping (as if user buffers were shared): each rank
//                   reduces its half straight from the peer's send buffer and stores the result into its
//                   own and the peer's receive buffer in the same pass (the copy reads the result from L1).
//                   One barrier. No implementation on this machine can move fewer bytes.
//   shared-2pass    the same mapping: reduce own half from both send buffers into own receive buffer,
//                   barrier, copy the peer's reduced half, barrier (the textbook reduce-scatter +
//                   all-gather with direct loads).
//   cma             private buffers (malloc'd, as a user's are): the peer's half comes over
//                   process_vm_readv in 64 KiB pieces into a staging buffer and is reduced from there,
//                   barrier, the peer's reduced half comes over process_vm_readv, barrier. This is the
//                   work of Chorus's single-copy shm path, without any of its protocol.
//   staged          private buffers through a shared staging area (each rank copies in what the peer needs,
//                   the peer reduces from it and writes its result there too, each rank copies it out).
//   cma-fused       private buffers: each 64 KiB piece of the peer's half is read over process_vm_readv,
//                   reduced into the own receive buffer and written from there (still in cache) into the
//                   peer's receive buffer over process_vm_writev. One barrier.
// The reduction is Chorus's own kernel (the best instruction set this CPU runs).
//
//   build/bin/allreduce_floor [-b MIN] [-e MAX] [-t SECONDS]    (sizes in bytes per rank, K/M suffixes)
// Prints, per size, the median over 5 rounds of each variant's time per call in microseconds, and the share of
// the host's CPU time that its hypervisor stole while that size ran (chorus::stolen_share; "-" when unknown or
// the size ran for less than 20 ticks of CPU time), which slows every variant alike.
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/units.h"
#include "chorus/tuning.h"
#include "chorus/types.h"
#include "kernels/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;

struct alignas(64) Shared {
  std::atomic<uint64_t> arrived{0};  // barrier: total arrivals so far
  alignas(64) std::atomic<uint64_t> iters{0};
  alignas(64) std::atomic<int> variant{0};
  pid_t pid[2] = {0, 0};
  char* priv_send[2] = {nullptr, nullptr};  // addresses of the private buffers (the same in both processes)
  char* priv_recv[2] = {nullptr, nullptr};
};

// A two-party barrier: generation g is complete once 2(g+1) arrivals were counted.
struct Barrier {
  Shared* s;
  uint64_t gen = 0;
  void wait() {
    s->arrived.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t want = 2 * (++gen);
    while (s->arrived.load(std::memory_order_acquire) < want) __builtin_ia32_pause();
  }
};

bool remote_read(pid_t pid, char* dst, const char* address, size_t len) {
  size_t done = 0;
  while (done < len) {
    iovec local{dst + done, len - done};
    iovec remote{const_cast<char*>(address) + done, len - done};
    ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool remote_write(pid_t pid, char* address, const char* src, size_t len) {
  size_t done = 0;
  while (done < len) {
    iovec local{const_cast<char*>(src) + done, len - done};
    iovec remote{address + done, len - done};
    ssize_t n = ::process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

enum Variant { kSharedFused, kShared2Pass, kCma, kStaged, kCmaFused, kVariants };
const char* kNames[kVariants] = {"shared-fused", "shared-2pass", "cma", "staged", "cma-fused"};

// One all_reduce's worth of work for rank r over K bytes per rank.
struct Work {
  int r;
  size_t bytes;
  char* shared_send[2];  // in the shared mapping
  char* shared_recv[2];
  Shared* s;
  Barrier* bar;
  chorus::kernels::ReduceFn sum;
  char* staging;

  void run(Variant v) {
    const size_t half = bytes / 2;
    const size_t mine = r * half, theirs = (1 - r) * half;
    const size_t my_len = r == 0 ? half : bytes - half, their_len = bytes - my_len;
    const int p = 1 - r;
    switch (v) {
      case kSharedFused: {
        const size_t piece = 16 << 10;
        for (size_t off = 0; off < my_len; off += piece) {
          const size_t m = std::min(piece, my_len - off);
          char* out = shared_recv[r] + mine + off;
          sum(out, shared_send[r] + mine + off, shared_send[p] + mine + off, m / 4);
          std::memcpy(shared_recv[p] + mine + off, out, m);
        }
        bar->wait();
        break;
      }
      case kShared2Pass:
        sum(shared_recv[r] + mine, shared_send[r] + mine, shared_send[p] + mine, my_len / 4);
        bar->wait();
        std::memcpy(shared_recv[r] + theirs, shared_recv[p] + theirs, their_len);
        bar->wait();
        break;
      case kCma: {
        const size_t piece = 64 << 10;
        for (size_t off = 0; off < my_len; off += piece) {
          const size_t m = std::min(piece, my_len - off);
          if (!remote_read(s->pid[p], staging, s->priv_send[p] + mine + off, m)) std::abort();
          sum(s->priv_recv[r] + mine + off, s->priv_send[r] + mine + off, staging, m / 4);
        }
        bar->wait();
        if (!remote_read(s->pid[p], s->priv_recv[r] + theirs, s->priv_recv[p] + theirs, their_len)) std::abort();
        bar->wait();
        break;
      }
      case kStaged: {
        // stage_in[q]: rank q's send half for its peer; stage_out[q]: rank q's reduced half.
        char* in_mine = shared_send[r];   // reused as staging (the shared send buffers are unused here)
        char* in_peer = shared_send[p];
        std::memcpy(in_mine + theirs, s->priv_send[r] + theirs, their_len);
        bar->wait();
        const size_t piece = 16 << 10;
        for (size_t off = 0; off < my_len; off += piece) {
          const size_t m = std::min(piece, my_len - off);
          char* out = s->priv_recv[r] + mine + off;
          sum(out, s->priv_send[r] + mine + off, in_peer + mine + off, m / 4);
          std::memcpy(shared_recv[r] + mine + off, out, m);
        }
        bar->wait();
        std::memcpy(s->priv_recv[r] + theirs, shared_recv[p] + theirs, their_len);
        bar->wait();
        break;
      }
      case kCmaFused: {
        // Each piece of the peer's half is read over process_vm_readv, reduced into our receive buffer, and
        // written from there (still in cache) into the peer's receive buffer over process_vm_writev.
        const size_t piece = 64 << 10;
        for (size_t off = 0; off < my_len; off += piece) {
          const size_t m = std::min(piece, my_len - off);
          if (!remote_read(s->pid[p], staging, s->priv_send[p] + mine + off, m)) std::abort();
          char* out = s->priv_recv[r] + mine + off;
          sum(out, s->priv_send[r] + mine + off, staging, m / 4);
          if (!remote_write(s->pid[p], s->priv_recv[p] + mine + off, out, m)) std::abort();
        }
        bar->wait();
        break;
      }
      default:
        break;
    }
  }
};

bool check(const float* recv, size_t n, float expect) {
  for (size_t i = 0; i < n; ++i) {
    if (recv[i] != expect) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t min_bytes = 1 << 20, max_bytes = 64 << 20;
  double seconds = 0.3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const std::optional<size_t> size = chorus::base::parse_size(argv[i + 1]);
    if (a == "-b" && size) {
      min_bytes = *size;
    } else if (a == "-e" && size) {
      max_bytes = *size;
    } else if (a == "-t") {
      seconds = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-t SECONDS]\n", argv[0]);
      return 2;
    }
  }
  min_bytes = std::max<size_t>(min_bytes & ~size_t{127}, 128);
  max_bytes = std::max(max_bytes, min_bytes);

  // Shared control block and shared buffers; private buffers allocated before fork (so both processes know
  // their addresses) and first touched after it (so each process's pages are its own).
  void* ctl = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  char* shared = static_cast<char*>(mmap(nullptr, 4 * max_bytes, PROT_READ | PROT_WRITE,
                                         MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (ctl == MAP_FAILED || shared == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  Shared* s = new (ctl) Shared();
  for (int q = 0; q < 2; ++q) {
    s->priv_send[q] = static_cast<char*>(std::aligned_alloc(4096, max_bytes));
    s->priv_recv[q] = static_cast<char*>(std::aligned_alloc(4096, max_bytes));
  }
  char* staging = static_cast<char*>(std::aligned_alloc(4096, 64 << 10));
  s->pid[0] = getpid();
  pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  const int r = child == 0 ? 1 : 0;
  if (r == 1) s->pid[1] = getpid();
  Barrier bar{s};
  bar.wait();  // both pids published

  Work w{r, 0, {shared, shared + max_bytes}, {shared + 2 * max_bytes, shared + 3 * max_bytes}, s, &bar,
         chorus::kernels::reduce_fn(chorus::DataType::Float32, chorus::ReduceOp::Sum), staging};
  if (r == 0) {
    std::printf("# allreduce_floor: 2 processes, float32 sum, same buffers every call; kernels %s\n",
                chorus::kernels::isa_name(chorus::kernels::active_isa()));
    std::printf("# time per call in us, median of 5 rounds of about %.2f s / 5 each\n", seconds);
    std::printf("%12s %14s %14s %14s %14s %14s %8s\n", "bytes", kNames[0], kNames[1], kNames[2], kNames[3], kNames[4],
                "stolen");
  }
  bool ok = true;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    w.bytes = bytes;
    const size_t n = bytes / 4;
    const std::optional<chorus::HostCpuTime> cpu_before = chorus::host_cpu_time();
    double median[kVariants];
    for (int v = 0; v < kVariants; ++v) {
      // Fresh inputs: rank r's send buffers hold r + 1, so every result element is 3.
      std::vector<float> init(n, static_cast<float>(r + 1));
      std::memcpy(w.shared_send[r], init.data(), bytes);
      std::memcpy(s->priv_send[r], init.data(), bytes);
      std::memset(w.shared_recv[r], 0, bytes);
      std::memset(s->priv_recv[r], 0, bytes);
      bar.wait();
      for (int i = 0; i < 5; ++i) w.run(static_cast<Variant>(v));  // warm-up; faults the pages in
      // Rank 0 picks the iteration count from a timed probe, so both ranks run the same number.
      if (r == 0) {
        auto t0 = Clock::now();
        for (int i = 0; i < 5; ++i) w.run(static_cast<Variant>(v));
        double per = std::chrono::duration<double>(Clock::now() - t0).count() / 5;
        s->iters.store(std::max<uint64_t>(3, static_cast<uint64_t>(seconds / 5 / per)), std::memory_order_release);
      } else {
        for (int i = 0; i < 5; ++i) w.run(static_cast<Variant>(v));
      }
      bar.wait();
      const uint64_t iters = s->iters.load(std::memory_order_acquire);
      std::vector<double> rounds;
      for (int round = 0; round < 5; ++round) {
        bar.wait();
        auto t0 = Clock::now();
        for (uint64_t i = 0; i < iters; ++i) w.run(static_cast<Variant>(v));
        rounds.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters);
      }
      std::sort(rounds.begin(), rounds.end());
      median[v] = rounds[2];
      const char* recv = v >= kCma ? s->priv_recv[r] : w.shared_recv[r];  // kStaged, kCmaFused: private too
      if (!check(reinterpret_cast<const float*>(recv), n, 3.0f)) {
        std::fprintf(stderr, "rank %d: %s gave a wrong result at %zu bytes\n", r, kNames[v], bytes);
        ok = false;
      }
      bar.wait();
    }
    if (r == 0) {
      const std::optional<chorus::HostCpuTime> cpu_after = chorus::host_cpu_time();
      const double stolen = chorus::stolen_share(cpu_before, cpu_after);
      const bool judged = stolen >= 0 && cpu_after->total_ticks - cpu_before->total_ticks >= 20;
      std::printf("%12zu %14.1f %14.1f %14.1f %14.1f %14.1f %8s\n", bytes, median[0], median[1], median[2], median[3],
                  median[4],
                  judged ? (std::to_string(static_cast<int>(std::lround(100 * stolen))) + "%").c_str() : "-");
    }
    std::fflush(stdout);
  }
  if (r == 1) return ok ? 0 : 1;
  int status = 0;
  waitpid(child, &status, 0);
  return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
