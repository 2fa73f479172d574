// The kill matrix: seeded trials that kill one rank (SIGKILL, through CHORUS_FAULT=kill at a random data
// frame) in the middle of a collective, for every collective and algorithm family, 3 and 5 ranks, tcp and
// shm. Every survivor must raise PeerLost or Aborted naming the dead rank within 2 s of the death, and leave
// no file descriptor, thread or shared-memory segment behind once its communicator is destroyed.
//
// CHORUS_KILL_TRIALS (default 100) and CHORUS_KILL_SEED (default 1) choose the trials;
// scripts/kill-matrix.sh runs a longer series and summarises it.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "subprocess.h"

namespace chorus::testing {
namespace {

struct Family {
  const char* coll;
  const char* algo;
};

// Every algorithm family of every collective (hierarchical runs as one host here).
const std::vector<Family>& families() {
  // clang-format off
  static const std::vector<Family> f = {
      {"allreduce", "ring"},        {"allreduce", "tree"},           {"allreduce", "recursive_doubling"},
      {"allreduce", "rabenseifner"}, {"allreduce", "reduce_broadcast"}, {"allreduce", "direct"},
      {"allreduce", "hierarchical"}, {"allgather", "ring"},          {"allgather", "recursive_doubling"},
      {"allgather", "bruck"},       {"reducescatter", "ring"},       {"reducescatter", "recursive_halving"},
      {"reducescatter", "pairwise"}, {"broadcast", "binomial"},      {"broadcast", "scatter_allgather"},
      {"broadcast", "chain"},       {"reduce", "binomial"},          {"reduce", "reduce_scatter_gather"},
      {"reduce", "linear"},         {"alltoall", "pairwise"},        {"alltoall", "bruck"},
      {"gather", "linear"},         {"scatter", "linear"},           {"barrier", "dissemination"},
  };
  // clang-format on
  return f;
}

long long env_or(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

struct Trial {
  int index;
  const char* transport;
  int n;
  Family family;
  size_t count;
  int victim;
  int frame;
};

std::string describe(const Trial& t) {
  return "trial " + std::to_string(t.index) + ": " + t.transport + " " + std::to_string(t.n) + " ranks, " +
         t.family.coll + "/" + t.family.algo + " " + std::to_string(t.count) + " floats, kill rank " +
         std::to_string(t.victim) + " at frame " + std::to_string(t.frame);
}

long long kill_time(const std::string& output) {
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string a, b, word;
    int rank;
    long long ns = 0;
    if (line.rfind("KILL-BETWEEN-CALLS", 0) == 0) {
      std::istringstream k(line);
      k >> a >> word >> rank >> ns;
      return ns;
    }
    if (l >> a >> b >> word >> rank >> ns && a == "CHORUS_FAULT" && b == "kill") return ns;
  }
  return 0;
}

TEST(KillMatrix, EverySurvivorNamesTheDeadRankWithinTwoSecondsAndLeaksNothing) {
  const int trials = static_cast<int>(env_or("CHORUS_KILL_TRIALS", 100));
  const unsigned seed = static_cast<unsigned>(env_or("CHORUS_KILL_SEED", 1));
  std::mt19937 rng(seed);
  const size_t counts[] = {1, 64, 4096, 65536};
  std::vector<pid_t> pids;
  std::map<std::string, std::vector<double>> delays;  // by transport
  int failures_before = 0;
  for (int i = 0; i < trials; ++i) {
    Trial t;
    t.index = i;
    t.transport = i % 2 == 0 ? "tcp" : "shm";
    t.n = (i / 2) % 2 == 0 ? 3 : 5;
    // Every family in turn (23 of them, an odd number, so each meets both transports and both world sizes
    // over the trials); the size, the victim and the frame are drawn.
    t.family = families()[static_cast<size_t>(i) % families().size()];
    t.count = counts[rng() % 4];
    t.victim = static_cast<int>(rng() % static_cast<unsigned>(t.n));
    t.frame = 1 + static_cast<int>(rng() % 40);
    SCOPED_TRACE(describe(t));

    TcpStoreServer server("127.0.0.1", 0);
    std::vector<Child> children;
    for (int r = 0; r < t.n; ++r) {
      children.push_back(spawn({worker_path(), "kill-matrix", t.family.coll, t.family.algo, std::to_string(t.count),
                                "1000000", std::to_string(t.victim), std::to_string(t.frame)},
                               {"CHORUS_RANK=" + std::to_string(r), "CHORUS_WORLD_SIZE=" + std::to_string(t.n),
                                "CHORUS_STORE_ADDR=127.0.0.1:" + std::to_string(server.port()),
                                "CHORUS_STORE_HOSTED=1", std::string("CHORUS_TRANSPORT=") + t.transport,
                                "CHORUS_TIMEOUT_MS=30000",
                                "CHORUS_FAULT=kill:rank=" + std::to_string(t.victim) + ",frame=" +
                                    std::to_string(t.frame)},
                               /*merge_stderr=*/true));
      pids.push_back(children.back().pid);
    }
    wait_all(children, std::chrono::seconds(60));

    const Child& victim = children[static_cast<size_t>(t.victim)];
    const long long killed_ns = kill_time(victim.output);
    EXPECT_TRUE(WIFSIGNALED(victim.status) && WTERMSIG(victim.status) == SIGKILL) << victim.output;
    ASSERT_GT(killed_ns, 0) << "the victim did not report its kill: " << victim.output;
    for (int r = 0; r < t.n; ++r) {
      if (r == t.victim) continue;
      const Child& c = children[static_cast<size_t>(r)];
      SCOPED_TRACE("rank " + std::to_string(r) + " said: " + c.output);
      EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0);
      size_t at = c.output.find("CAUGHT ");
      ASSERT_NE(at, std::string::npos);
      std::istringstream in(c.output.substr(at));
      std::string tag, code;
      int peer = -2;
      long long caught_ns = 0;
      in >> tag >> code >> peer >> caught_ns;
      EXPECT_TRUE(code == "PeerLost" || code == "Aborted") << code;
      EXPECT_EQ(peer, t.victim);
      EXPECT_NE(c.output.find("rank " + std::to_string(t.victim)), std::string::npos);
      double ms = (caught_ns - killed_ns) / 1e6;
      EXPECT_LT(ms, 2000.0);
      delays[t.transport].push_back(ms);
      at = c.output.find("CLEAN ");
      ASSERT_NE(at, std::string::npos);
      std::istringstream clean(c.output.substr(at + 6));
      int fds_before = -1, fds_after = -2, threads_before = -1, threads_after = -2;
      long long destroy_ms = -1;
      clean >> fds_before >> fds_after >> threads_before >> threads_after >> destroy_ms;
      EXPECT_EQ(fds_after, fds_before) << "file descriptors leaked";
      EXPECT_EQ(threads_after, threads_before) << "threads leaked";
      EXPECT_LT(destroy_ms, 2000) << "destroying the failed communicator took too long";
    }
    if (::testing::Test::HasFailure() && failures_before++ >= 3) {
      FAIL() << "stopping after several failed trials";
    }
  }

  // No trial left a shared-memory segment behind (names end in -p<pid>), not even the killed ranks.
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    std::string name = entry.path().filename().string();
    if (name.rfind("chorus-", 0) != 0) continue;
    for (pid_t pid : pids) {
      std::string suffix = "-p" + std::to_string(pid);
      EXPECT_FALSE(name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          << "left behind: /dev/shm/" << name;
    }
  }
  for (auto& [transport, v] : delays) {
    std::sort(v.begin(), v.end());
    std::printf("kill matrix %s: %zu survivors, detection after the kill: median %.1f ms, p90 %.1f ms, max %.1f ms\n",
                transport.c_str(), v.size(), v[v.size() / 2], v[v.size() * 9 / 10], v.back());
  }
}

}  // namespace
}  // namespace chorus::testing
