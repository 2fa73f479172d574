// Communicator::from_env under every launcher it supports: chorus-run, the variables of torchrun (with and
// without its agent store), Open MPI, MPICH/Hydra and Slurm, and the real mpirun of Open MPI and MPICH.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "subprocess.h"

namespace chorus::testing {
namespace {

// A port that was free a moment ago (the store binds it with SO_REUSEADDR).
uint16_t free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// Every rank printed its HELLO line and exited 0.
void expect_hellos(std::vector<Child>& children, int n) {
  wait_all(children, std::chrono::seconds(60));
  std::string all;
  for (auto& c : children) {
    all += c.output;
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.output;
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(all.find("HELLO rank " + std::to_string(r) + " of " + std::to_string(n)), std::string::npos) << all;
  }
}

struct EnvStyle {
  const char* name;
  // The variables for rank r of n, with the store reachable at 127.0.0.1:port.
  std::function<std::vector<std::string>(int r, int n, uint16_t port)> env;
};

class LauncherEnvironment : public ::testing::TestWithParam<EnvStyle> {};

TEST_P(LauncherEnvironment, RanksFindEachOther) {
  const int n = 3;
  uint16_t port = free_port();
  std::vector<Child> children;
  for (int r = 0; r < n; ++r) {
    auto env = GetParam().env(r, n, port);
    env.push_back("CHORUS_TIMEOUT_MS=30000");
    children.push_back(spawn({worker_path(), "hello"}, env, /*merge_stderr=*/true));
  }
  expect_hellos(children, n);
}

std::string at(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

INSTANTIATE_TEST_SUITE_P(
    Styles, LauncherEnvironment,
    ::testing::Values(
        EnvStyle{"Chorus",
                 [](int r, int n, uint16_t p) {
                   return std::vector<std::string>{"CHORUS_RANK=" + std::to_string(r),
                                                   "CHORUS_WORLD_SIZE=" + std::to_string(n),
                                                   "CHORUS_STORE_ADDR=" + at(p)};
                 }},
        EnvStyle{"Torchrun",
                 [](int r, int n, uint16_t p) {
                   return std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(n),
                                                   "LOCAL_RANK=" + std::to_string(r), "MASTER_ADDR=127.0.0.1",
                                                   "MASTER_PORT=" + std::to_string(p)};
                 }},
        EnvStyle{"OpenMpi",
                 [](int r, int n, uint16_t p) {
                   return std::vector<std::string>{"OMPI_COMM_WORLD_RANK=" + std::to_string(r),
                                                   "OMPI_COMM_WORLD_SIZE=" + std::to_string(n),
                                                   "MASTER_ADDR=localhost", "MASTER_PORT=" + std::to_string(p)};
                 }},
        EnvStyle{"MpichHydra",
                 [](int r, int n, uint16_t p) {
                   return std::vector<std::string>{"PMI_RANK=" + std::to_string(r), "PMI_SIZE=" + std::to_string(n),
                                                   "CHORUS_STORE_ADDR=" + at(p)};
                 }},
        EnvStyle{"Slurm",
                 [](int r, int n, uint16_t p) {
                   return std::vector<std::string>{"SLURM_PROCID=" + std::to_string(r),
                                                   "SLURM_NTASKS=" + std::to_string(n), "MASTER_ADDR=127.0.0.1",
                                                   "MASTER_PORT=" + std::to_string(p)};
                 }}),
    [](const auto& info) { return std::string(info.param.name); });

// Binds a listening socket on 127.0.0.1:port (0: any); returns the fd or -1.
int listen_on(uint16_t port, uint16_t* bound) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  socklen_t len = sizeof(a);
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(s, 16) != 0) {
    ::close(s);
    return -1;
  }
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  *bound = ntohs(a.sin_port);
  return s;
}

// Under torchrun's agent store, MASTER_PORT is torch's; Chorus must take the next port and leave it alone.
TEST(LauncherEnvironment, TorchrunAgentStoreKeepsItsPort) {
  // Hold a port P for "torch" whose successor is free too (other tests run in parallel).
  int torch_store = -1;
  uint16_t port = 0;
  for (int attempt = 0; attempt < 100 && torch_store < 0; ++attempt) {
    int s = listen_on(0, &port);
    uint16_t next = 0;
    int probe = port < 65535 ? listen_on(static_cast<uint16_t>(port + 1), &next) : -1;
    if (probe >= 0) {
      ::close(probe);
      torch_store = s;
    } else {
      ::close(s);
    }
  }
  ASSERT_GE(torch_store, 0);
  const int n = 2;
  std::vector<Child> children;
  for (int r = 0; r < n; ++r) {
    children.push_back(spawn({worker_path(), "hello"},
                             {"RANK=" + std::to_string(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                              "MASTER_PORT=" + std::to_string(port), "TORCHELASTIC_USE_AGENT_STORE=True",
                              "CHORUS_TIMEOUT_MS=30000"},
                             true));
  }
  expect_hellos(children, n);
  ::close(torch_store);
}

TEST(LauncherEnvironment, NoLauncherIsAClearErrorAndASingleRankNeedsNoStore) {
  std::vector<Child> none{spawn({worker_path(), "hello"}, {}, true)};
  wait_all(none, std::chrono::seconds(30));
  EXPECT_TRUE(WIFEXITED(none[0].status) && WEXITSTATUS(none[0].status) == 1) << none[0].output;
  EXPECT_NE(none[0].output.find("no launcher environment"), std::string::npos) << none[0].output;
  EXPECT_NE(none[0].output.find("CHORUS_RANK"), std::string::npos) << none[0].output;

  std::vector<Child> no_store{spawn({worker_path(), "hello"}, {"RANK=0", "WORLD_SIZE=2"}, true)};
  wait_all(no_store, std::chrono::seconds(30));
  EXPECT_NE(no_store[0].output.find("no store address"), std::string::npos) << no_store[0].output;

  std::vector<Child> single{spawn({worker_path(), "hello"}, {"CHORUS_RANK=0", "CHORUS_WORLD_SIZE=1"}, true)};
  expect_hellos(single, 1);
}

// The real launchers. scripts/setup.sh installs Open MPI and MPICH, so these run wherever the suite runs.
bool have(const char* program) { return ::access(program, X_OK) == 0; }

TEST(RealLaunchers, OpenMpiMpirun) {
  const char* mpirun = "/usr/bin/mpirun.openmpi";
  ASSERT_TRUE(have(mpirun)) << mpirun << " is missing: run scripts/setup.sh (it installs openmpi-bin)";
  uint16_t port = free_port();
  std::vector<Child> job{spawn({mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "3", "-x",
                                "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + std::to_string(port), worker_path(),
                                "hello"},
                               {"OMPI_MCA_btl=self,tcp", "CHORUS_TIMEOUT_MS=30000"}, true)};
  wait_all(job, std::chrono::seconds(120));
  EXPECT_TRUE(WIFEXITED(job[0].status) && WEXITSTATUS(job[0].status) == 0) << job[0].output;
  for (int r = 0; r < 3; ++r) EXPECT_NE(job[0].output.find("HELLO rank " + std::to_string(r) + " of 3"), std::string::npos) << job[0].output;
}

TEST(RealLaunchers, MpichHydraMpiexec) {
  const char* mpiexec = "/usr/bin/mpiexec.hydra";
  ASSERT_TRUE(have(mpiexec)) << mpiexec << " is missing: run scripts/setup.sh (it installs mpich)";
  uint16_t port = free_port();
  std::vector<Child> job{spawn({mpiexec, "-np", "3", "-genv", "CHORUS_STORE_ADDR", at(port), worker_path(), "hello"},
                               {"CHORUS_TIMEOUT_MS=30000"}, true)};
  wait_all(job, std::chrono::seconds(120));
  EXPECT_TRUE(WIFEXITED(job[0].status) && WEXITSTATUS(job[0].status) == 0) << job[0].output;
  for (int r = 0; r < 3; ++r) EXPECT_NE(job[0].output.find("HELLO rank " + std::to_string(r) + " of 3"), std::string::npos) << job[0].output;
}

}  // namespace
}  // namespace chorus::testing
