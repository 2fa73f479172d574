// Multi-process faults: a rank killed with SIGKILL in the middle of an all_reduce. Every survivor must
// raise PeerLost naming it, within 5 s of the death (the test prints the measured delays), not at its
// timeout. The ranks are separate processes started here, with the store hosted by this test.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "subprocess.h"

namespace chorus::testing {
namespace {

struct KillParam {
  int world_size;
  int victim;
  const char* transport;
};

class KillDuringAllReduce : public ::testing::TestWithParam<KillParam> {};

TEST_P(KillDuringAllReduce, SurvivorsRaisePeerLostNamingTheDeadRankWithinFiveSeconds) {
  const auto [n, victim, transport] = GetParam();
  TcpStoreServer server("127.0.0.1", 0);
  std::vector<Child> children;
  for (int r = 0; r < n; ++r) {
    children.push_back(spawn({worker_path(), "kill-in-allreduce", std::to_string(victim), "300",
                              std::to_string(8 << 20)},
                             {"CHORUS_RANK=" + std::to_string(r), "CHORUS_WORLD_SIZE=" + std::to_string(n),
                              "CHORUS_STORE_ADDR=127.0.0.1:" + std::to_string(server.port()),
                              "CHORUS_STORE_HOSTED=1", std::string("CHORUS_TRANSPORT=") + GetParam().transport,
                              "CHORUS_TIMEOUT_MS=60000"}));
  }
  wait_all(children, std::chrono::seconds(60));

  long long kill_ns = 0;
  std::istringstream victim_out(children[victim].output);
  std::string word;
  while (victim_out >> word)
    if (word == "KILL") victim_out >> kill_ns;
  ASSERT_GT(kill_ns, 0) << "victim output: " << children[victim].output;
  EXPECT_TRUE(WIFSIGNALED(children[victim].status) && WTERMSIG(children[victim].status) == SIGKILL);

  // Nothing is left in /dev/shm by any of the ranks, the killed one included (names end in -p<pid>).
  for (const Child& c : children) {
    std::string suffix = "-p" + std::to_string(c.pid);
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
      std::string name = entry.path().filename().string();
      EXPECT_FALSE(name.rfind("chorus-", 0) == 0 && name.size() > suffix.size() &&
                   name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          << "left behind: /dev/shm/" << name;
    }
  }
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    const Child& c = children[r];
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << "rank " << r << ": " << c.output;
    std::istringstream in(c.output);
    std::string tag, code;
    int peer = -2;
    long long caught_ns = 0;
    in >> tag >> code >> peer >> caught_ns;
    ASSERT_EQ(tag, "CAUGHT") << "rank " << r << ": " << c.output;
    EXPECT_EQ(code, "PeerLost") << "rank " << r << ": " << c.output;
    EXPECT_EQ(peer, victim) << "rank " << r << ": " << c.output;
    EXPECT_NE(c.output.find("rank " + std::to_string(victim)), std::string::npos) << c.output;
    double delay_ms = (caught_ns - kill_ns) / 1e6;
    std::printf("rank %d raised %s %.1f ms after rank %d was killed\n", r, code.c_str(), delay_ms, victim);
    EXPECT_LT(delay_ms, 5000.0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, KillDuringAllReduce,
                         ::testing::Values(KillParam{2, 1, "tcp"}, KillParam{3, 1, "tcp"}, KillParam{4, 0, "tcp"},
                                           KillParam{5, 3, "tcp"}, KillParam{2, 1, "shm"}, KillParam{3, 1, "shm"},
                                           KillParam{4, 0, "shm"}, KillParam{5, 3, "shm"}),
                         [](const ::testing::TestParamInfo<KillParam>& i) {
                           return std::string(i.param.transport) + "_" + std::to_string(i.param.world_size) +
                                  "ranks_victim" + std::to_string(i.param.victim);
                         });

}  // namespace
}  // namespace chorus::testing
