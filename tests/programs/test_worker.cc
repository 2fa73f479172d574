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
//
//   test_worker train-recover MODE VICTIM KILL_STEP STEPS COUNT
//     A training-style loop: at step s every rank all_reduces COUNT floats of (id + 1) * (s + 1), where id is
//     the rank the process had in the world communicator, and checks the sum. The victim SIGKILLs itself
//     at KILL_STEP ("KILL <ns>"). Survivors catch the error ("CAUGHT <code> <peer> <ns> <message>"), recover
//     with MODE = shrink (Communicator::shrink) or replace (Communicator::replace_lost), print
//     "RECOVERED <size> <rank> <ms>", agree on the step to redo (all_reduce Min), and go on to STEPS.
//     MODE = replacement: a new process that joins with Communicator::join_replacement and takes part
//     from the step the survivors agree on. Every rank that finishes prints "DONE id <id> size <n> steps <k>".
//
//   test_worker gather-fresh BYTES REPS
//     REPS times a new communicator's first call (the world's, then splits of it), a gather of BYTES in all
//     (root 0, float32), checked element by element. Prints "GATHER-FRESH rank R wrong W missed M", where M sums
//     the new communicators' missed wake-ups (TrafficCounters::missed_wakeups, a bug when not 0).
//
//   test_worker kill-matrix COLL ALGO COUNT MAX_ITERS VICTIM K
//     Every rank runs collective COLL (allreduce, allgather, ...) with algorithm ALGO on COUNT floats per rank
//     in a loop; CHORUS_FAULT=kill:rank=VICTIM,frame=K (set by the test) kills the victim at its K-th data
//     frame. A victim that sends no data frames in this collective (a leaf of a broadcast, the root of a
//     gather) kills itself before its K-th call instead, printing "KILL-BETWEEN-CALLS rank <r> <ns>".
//     A survivor prints "CAUGHT <code> <peer> <monotonic ns> <message>", destroys its communicator and prints
//     "CLEAN <fds before> <fds after> <threads before> <threads after> <ms to destroy>" (counted from before
//     the communicator existed to after it is gone). A rank that sees no error prints "NOERROR" and exits 3.
#include <chorus/chorus.h>
#include <dirent.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
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

int train_recover(const std::string& mode, int victim, int kill_step, int steps, size_t count) {
  std::unique_ptr<chorus::Communicator> comm;
  int id = -1;
  bool recovered = false;
  int64_t step = 0;
  // The ids (world ranks) of the current members, to compute the expected sum.
  auto member_ids = [&] {
    std::vector<int64_t> ids(static_cast<size_t>(comm->size()));
    int64_t mine = id;
    comm->all_gather(&mine, ids.data(), 1, chorus::DataType::Int64);
    return ids;
  };
  std::vector<int64_t> ids;
  auto agree_on_step = [&](int64_t s) {
    comm->all_reduce(&s, &s, 1, chorus::DataType::Int64, chorus::ReduceOp::Min);
    return s;
  };
  if (mode == "replacement") {
    std::string addr = std::getenv("CHORUS_STORE_ADDR");
    size_t colon = addr.rfind(':');
    comm = chorus::Communicator::join_replacement(std::make_shared<chorus::TcpStore>(
        addr.substr(0, colon), static_cast<uint16_t>(std::stoi(addr.substr(colon + 1)))));
    id = comm->rank();
    say("JOINED rank " + std::to_string(id) + " of " + std::to_string(comm->size()));
    ids = member_ids();
    step = agree_on_step(INT64_MAX);
    recovered = true;
  } else {
    comm = chorus::Communicator::from_env();
    id = comm->rank();
    ids = member_ids();
  }
  int verified = 0;
  while (step < steps) {
    if (id == victim && step == kill_step && !recovered) {
      say("KILL " + std::to_string(mono_ns()));
      ::kill(::getpid(), SIGKILL);
    }
    std::vector<float> buf(count, static_cast<float>((id + 1) * (step + 1)));
    try {
      comm->all_reduce(buf, chorus::ReduceOp::Sum);
    } catch (const chorus::Error& e) {
      if (recovered) throw;
      say("CAUGHT " + std::string(chorus::to_string(e.code())) + " " + std::to_string(e.peer()) + " " +
          std::to_string(mono_ns()) + " " + e.what());
      long long t0 = mono_ns();
      comm = mode == "shrink" ? comm->shrink() : comm->replace_lost();
      say("RECOVERED " + std::to_string(comm->size()) + " " + std::to_string(comm->rank()) + " " +
          std::to_string((mono_ns() - t0) / 1000000));
      recovered = true;
      ids = member_ids();
      step = agree_on_step(step);
      continue;
    }
    double expected = 0;
    for (int64_t m : ids) expected += static_cast<double>((m + 1) * (step + 1));
    for (size_t i = 0; i < count; i += 997) {
      if (buf[i] != static_cast<float>(expected)) {
        std::fprintf(stderr, "id %d step %lld: element %zu is %g, expected %g\n", id, static_cast<long long>(step), i,
                     static_cast<double>(buf[i]), expected);
        return 1;
      }
    }
    ++verified;
    ++step;
  }
  say("DONE id " + std::to_string(id) + " size " + std::to_string(comm->size()) + " steps " + std::to_string(verified));
  return 0;
}

int count_dir(const char* path) {
  int n = 0;
  if (DIR* d = ::opendir(path)) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// One call of `coll` with algorithm `algo` on `count` floats per rank.
void run_collective(chorus::Communicator& comm, const std::string& coll, const chorus::CallOptions& opts,
                    std::vector<float>& in, std::vector<float>& out, size_t count) {
  using chorus::DataType;
  using chorus::ReduceOp;
  const int root = 1 % comm.size();
  if (coll == "allreduce") comm.all_reduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum, opts);
  else if (coll == "allgather") comm.all_gather(in.data(), out.data(), count, DataType::Float32, opts);
  else if (coll == "reducescatter") comm.reduce_scatter(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum, opts);
  else if (coll == "broadcast") comm.broadcast(in.data(), out.data(), count, DataType::Float32, root, opts);
  else if (coll == "reduce") comm.reduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum, root, opts);
  else if (coll == "alltoall") comm.all_to_all(in.data(), out.data(), count, DataType::Float32, opts);
  else if (coll == "gather") comm.gather(in.data(), out.data(), count, DataType::Float32, root, opts);
  else if (coll == "scatter") comm.scatter(in.data(), out.data(), count, DataType::Float32, root, opts);
  else if (coll == "barrier") comm.barrier(opts);
  else throw chorus::Error(chorus::ErrorCode::InvalidArgument, "unknown collective " + coll);
}

int kill_matrix(const std::string& coll, const std::string& algo, size_t count, int max_iters, int victim, int k) {
  const int fds_before = count_dir("/proc/self/fd"), threads_before = count_dir("/proc/self/task");
  auto comm = chorus::Communicator::from_env();
  const size_t n = static_cast<size_t>(comm->size());
  std::vector<float> in(count * n, 1.0f), out(count * n, 0.0f);
  chorus::CallOptions opts;
  opts.algorithm = algo;
  try {
    for (int i = 0; i < max_iters; ++i) {
      if (comm->rank() == victim && i + 1 == k) {
        std::fprintf(stderr, "KILL-BETWEEN-CALLS rank %d %lld\n", victim, mono_ns());
        std::fflush(stderr);
        ::kill(::getpid(), SIGKILL);
      }
      run_collective(*comm, coll, opts, in, out, count);
    }
  } catch (const chorus::Error& e) {
    say("CAUGHT " + std::string(chorus::to_string(e.code())) + " " + std::to_string(e.peer()) + " " +
        std::to_string(mono_ns()) + " " + e.what());
    long long t0 = mono_ns();
    comm.reset();
    long long ms = (mono_ns() - t0) / 1000000;
    say("CLEAN " + std::to_string(fds_before) + " " + std::to_string(count_dir("/proc/self/fd")) + " " +
        std::to_string(threads_before) + " " + std::to_string(count_dir("/proc/self/task")) + " " + std::to_string(ms));
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

int gather_fresh(size_t bytes, int reps) {
  auto world = chorus::Communicator::from_env();
  const int n = world->size(), r = world->rank();
  const size_t per = bytes / sizeof(float) / static_cast<size_t>(n);
  uint64_t missed = 0, wrong = 0;
  for (int rep = 0; rep < reps; ++rep) {
    std::unique_ptr<chorus::Communicator> split = rep > 0 ? world->split(0, r) : nullptr;
    chorus::Communicator* comm = rep > 0 ? split.get() : world.get();
    std::vector<float> in(per), out(r == 0 ? per * static_cast<size_t>(n) : 0);
    for (size_t i = 0; i < per; ++i) in[i] = static_cast<float>((r * 131 + rep * 7 + static_cast<int>(i)) % 4093);
    comm->gather(in.data(), out.data(), per, chorus::DataType::Float32, 0);
    for (size_t k = 0; k < out.size(); ++k) {
      const int q = static_cast<int>(k / per);
      const size_t i = k % per;
      wrong += out[k] != static_cast<float>((q * 131 + rep * 7 + static_cast<int>(i)) % 4093);
    }
    missed += comm->traffic().missed_wakeups;
  }
  say("GATHER-FRESH rank " + std::to_string(r) + " wrong " + std::to_string(wrong) + " missed " +
      std::to_string(missed));
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
  if (argc == 7 && std::strcmp(argv[1], "train-recover") == 0) {
    try {
      return train_recover(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]),
                           std::strtoull(argv[6], nullptr, 10));
    } catch (const chorus::Error& e) {
      std::fprintf(stderr, "test_worker: %s\n", e.what());
      return 1;
    }
  }
  if (argc == 8 && std::strcmp(argv[1], "kill-matrix") == 0) {
    try {
      return kill_matrix(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10), std::atoi(argv[5]), std::atoi(argv[6]),
                         std::atoi(argv[7]));
    } catch (const chorus::Error& e) {
      std::fprintf(stderr, "test_worker: %s\n", e.what());
      return 1;
    }
  }
  if (argc == 4 && std::strcmp(argv[1], "gather-fresh") == 0) {
    try {
      return gather_fresh(std::strtoull(argv[2], nullptr, 10), std::atoi(argv[3]));
    } catch (const chorus::Error& e) {
      std::fprintf(stderr, "test_worker: %s\n", e.what());
      return 1;
    }
  }
  if (argc == 5 && std::strcmp(argv[1], "kill-in-allreduce") == 0) {
    return kill_in_allreduce(std::atoi(argv[2]), std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
  }
  std::fprintf(stderr,
               "usage: test_worker hello | hybrid-traffic | kill-in-allreduce VICTIM DELAY_MS BYTES | "
               "train-recover MODE VICTIM KILL_STEP STEPS COUNT | kill-matrix COLL ALGO COUNT MAX_ITERS VICTIM K | "
               "gather-fresh BYTES REPS\n");
  return 2;
}
