// A rank for the multi-process tests (fault_test, launch_test). Uses only the public API.
//
//   test_worker hello
//     Builds the communicator from the launcher's environment, checks an all_reduce and a barrier, and
//     prints "HELLO rank R of N over TRANSPORT".
//
//   test_worker hybrid-traffic
//     Under scripts/netns-cluster.sh: checks that the communicator routes peers on this host through shared
//     memory and the others through tcp, and that an all_reduce's bytes went both ways accordingly.
//     Prints "HYBRID OK rank R: shm S bytes, tcp T bytes".
//
//   test_worker kill-in-allreduce VICTIM DELAY_MS BYTES
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

int hello() {
  auto comm = chorus::Communicator::from_env();
  const int n = comm->size();
  std::vector<int64_t> v(1000, comm->rank());
  comm->all_reduce(v, chorus::ReduceOp::Sum);
  comm->barrier();
  if (v[999] != int64_t{n} * (n - 1) / 2) {
    std::fprintf(stderr, "rank %d: all_reduce gave %lld\n", comm->rank(), static_cast<long long>(v[999]));
    return 1;
  }
  say("HELLO rank " + std::to_string(comm->rank()) + " of " + std::to_string(n) + " over " +
      std::string(comm->transport_name()));
  return 0;
}

int hybrid_traffic() {
  auto comm = chorus::Communicator::from_env();
  const int n = comm->size(), r = comm->rank();
  // Which host every rank is on, as the rig numbers them.
  const char* host_env = std::getenv("CHORUS_HOST_INDEX");
  int64_t my_host = host_env ? std::atoll(host_env) : 0;
  std::vector<int64_t> host(n);
  comm->all_gather(&my_host, host.data(), 1, chorus::DataType::Int64);
  std::vector<float> v(1 << 18, 1.0f);
  chorus::TrafficCounters before = comm->traffic();
  comm->all_reduce(v.data(), v.data(), v.size(), chorus::DataType::Float32, chorus::ReduceOp::Sum,
                   chorus::CallOptions{"ring"});
  chorus::TrafficCounters after = comm->traffic();
  if (v[0] != static_cast<float>(n)) {
    std::fprintf(stderr, "rank %d: wrong sum %f\n", r, v[0]);
    return 1;
  }
  uint64_t shm = 0, tcp = 0;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    std::string want = host[q] == my_host ? "shm" : "tcp";
    if (after.via[q] != want) {
      std::fprintf(stderr, "rank %d: peer %d (host %lld) goes via %s, expected %s\n", r, q,
                   static_cast<long long>(host[q]), after.via[q].c_str(), want.c_str());
      return 1;
    }
    uint64_t moved = after.sent_to[q] - before.sent_to[q];
    (want == "shm" ? shm : tcp) += moved;
  }
  // In a ring over ranks numbered host by host, a host's last rank sends across and the others inside.
  say("HYBRID OK rank " + std::to_string(r) + " via " + std::string(comm->transport_name()) + ": shm " +
      std::to_string(shm) + " bytes, tcp " + std::to_string(tcp) + " bytes");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 2 && std::strcmp(argv[1], "hello") == 0) return hello();
    if (argc == 2 && std::strcmp(argv[1], "hybrid-traffic") == 0) return hybrid_traffic();
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "test_worker: %s\n", e.what());
    return 1;
  }
  if (argc == 5 && std::strcmp(argv[1], "kill-in-allreduce") == 0) {
    return kill_in_allreduce(std::atoi(argv[2]), std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
  }
  std::fprintf(stderr, "usage: test_worker hello | hybrid-traffic | kill-in-allreduce VICTIM DELAY_MS BYTES\n");
  return 2;
}
