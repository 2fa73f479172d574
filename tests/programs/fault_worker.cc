// A rank for the multi-process fault tests (tests/fault_test.cc). Uses only the public API.
//
//   fault_worker kill-in-allreduce VICTIM DELAY_MS BYTES
//     Every rank runs all_reduce of BYTES of floats in a loop. After DELAY_MS the victim prints
//     "KILL <monotonic ns>" and SIGKILLs itself, in the middle of a transfer. Every survivor prints
//     "CAUGHT <code> <peer> <monotonic ns> <message>" when its call throws, and exits 0; a survivor that
//     never sees an error exits 3.
#include <chorus/chorus.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

long long mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void say(const std::string& line) {
  std::string l = line + "\n";
  [[maybe_unused]] auto n = ::write(STDOUT_FILENO, l.data(), l.size());
}

int kill_in_allreduce(int victim, int delay_ms, size_t bytes) {
  auto comm = chorus::Communicator::from_env();
  std::vector<float> buf(bytes / sizeof(float), 1.0f);
  comm->barrier();
  if (comm->rank() == victim) {
    std::thread([delay_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      say("KILL " + std::to_string(mono_ns()));
      ::kill(::getpid(), SIGKILL);
    }).detach();
  }
  try {
    for (int i = 0; i < 100000; ++i) comm->all_reduce(buf, chorus::ReduceOp::Sum);
  } catch (const chorus::Error& e) {
    say("CAUGHT " + std::string(chorus::to_string(e.code())) + " " + std::to_string(e.peer()) + " " +
        std::to_string(mono_ns()) + " " + e.what());
    return 0;
  }
  say("NOERROR");
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "kill-in-allreduce") == 0) {
    return kill_in_allreduce(std::atoi(argv[2]), std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
  }
  std::fprintf(stderr, "usage: fault_worker kill-in-allreduce VICTIM DELAY_MS BYTES\n");
  return 2;
}
