// chorus-run, driven as a subprocess with small `sh -c` programs as its ranks.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kChorusRun = CHORUS_BIN_DIR "/chorus-run";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// True while pid exists and is not a zombie (a rank reparented to an init that does not reap is a zombie).
bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

struct Result {
  int status = -1;  // the raw wait status
  std::string out, err;
  double seconds = 0;

  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

// One chorus-run process with pipes on its stdout and stderr. Its stdin is a pipe held open, so a rank that
// wrongly inherited it would block reading it.
class Launcher {
 public:
  explicit Launcher(const std::vector<std::string>& args) {
    int out[2], err[2], in[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    std::vector<char*> argv{const_cast<char*>(kChorusRun)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Whatever runs this test (a background shell ignores SIGINT), chorus-run starts with the defaults.
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execv(kChorusRun, argv.data());
      ::_exit(99);
    }
    ::close(out[1]);
    ::close(err[1]);
    ::close(in[0]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    stdin_fd_ = in[1];
  }

  ~Launcher() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (int fd : {out_fd_, err_fd_, stdin_fd_})
      if (fd >= 0) ::close(fd);
  }

  pid_t pid() const { return pid_; }

  // Closes the read end of chorus-run's stdout, as `chorus-run ... | head -1` does after one line.
  void close_stdout() {
    ::close(out_fd_);
    out_fd_ = -1;
  }

  // The next line chorus-run writes to stdout (without the newline), or "" after `timeout`.
  std::string read_line(milliseconds timeout = milliseconds(5000)) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      size_t nl = result_.out.find('\n', consumed_);
      if (nl != std::string::npos) {
        std::string line = result_.out.substr(consumed_, nl - consumed_);
        consumed_ = nl + 1;
        return line;
      }
      if (Clock::now() >= deadline || !pump(deadline)) return "";
    }
  }

  // Collects all output and the exit status. A chorus-run still running after `limit` is killed and the test
  // fails: nothing here may hang.
  Result wait(seconds limit = seconds(20)) {
    auto deadline = start_ + limit;
    while (pump(deadline)) {
    }
    if (out_fd_ >= 0 || err_fd_ >= 0) {
      ADD_FAILURE() << "chorus-run still running after " << limit.count() << " s; killing it";
      ::kill(pid_, SIGKILL);
      while (pump(Clock::now() + seconds(5))) {
      }
    }
    ::waitpid(pid_, &result_.status, 0);
    result_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    pid_ = -1;
    return result_;
  }

 private:
  // Reads what arrives before deadline. False once both pipes are closed or the deadline passed.
  bool pump(Clock::time_point deadline) {
    std::vector<pollfd> fds;
    for (int fd : {out_fd_, err_fd_})
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    if (fds.empty()) return false;
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left)) <= 0) return true;
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      char buf[65536];
      ssize_t n = ::read(p.fd, buf, sizeof buf);
      bool is_out = p.fd == out_fd_;
      if (n > 0) {
        (is_out ? result_.out : result_.err).append(buf, static_cast<size_t>(n));
      } else {
        ::close(p.fd);
        (is_out ? out_fd_ : err_fd_) = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1, stdin_fd_ = -1;
  Clock::time_point start_;
  Result result_;
  size_t consumed_ = 0;  // of result_.out, by read_line
};

Result run(const std::vector<std::string>& args) { return Launcher(args).wait(); }

// A rank program that prints everything chorus-run tells a rank about itself.
constexpr const char* kPrintEnvironment =
    "echo \"rank=$CHORUS_RANK world=$CHORUS_WORLD_SIZE local=$CHORUS_LOCAL_RANK "
    "local_world=$CHORUS_LOCAL_WORLD_SIZE store=$CHORUS_STORE_ADDR hosted=$CHORUS_STORE_HOSTED\"";

TEST(ChorusRun, EveryRankSeesItsEnvironmentAndOutputIsPrefixed) {
  Result r = run({"-n", "3", "--", "sh", "-c",
                  std::string(kPrintEnvironment) + "; echo \"oops $CHORUS_RANK\" >&2; printf \"last $CHORUS_RANK\""});
  ASSERT_EQ(r.exit_code(), 0) << r.err;

  std::vector<std::string> out = lines_of(r.out);
  std::vector<std::string> err = lines_of(r.err);
  EXPECT_EQ(out.size(), 6u) << r.out;
  EXPECT_EQ(err.size(), 3u) << r.err;
  EXPECT_EQ(r.out.back(), '\n') << "a final partial line is completed";
  std::set<std::string> store_addrs;
  for (int rank = 0; rank < 3; ++rank) {
    std::string p = "[" + std::to_string(rank) + "] ";
    std::string r_text = std::to_string(rank);
    std::regex env_line("\\[" + r_text + "\\] rank=" + r_text + " world=3 local=" + r_text +
                        " local_world=3 store=(127\\.0\\.0\\.1:[0-9]+) hosted=1");
    auto env =
        std::find_if(out.begin(), out.end(), [&](const std::string& l) { return std::regex_match(l, env_line); });
    ASSERT_NE(env, out.end()) << "rank " << rank << " in\n" << r.out;
    std::smatch m;
    std::regex_match(*env, m, env_line);
    store_addrs.insert(m[1]);
    EXPECT_THAT(out, testing::Contains(p + "last " + std::to_string(rank)));
    EXPECT_THAT(err, testing::Contains(p + "oops " + std::to_string(rank)));
  }
  EXPECT_EQ(store_addrs.size(), 1u) << "all ranks share one store";
  EXPECT_THAT(store_addrs, Not(testing::Contains("127.0.0.1:0")));
}

TEST(ChorusRun, WorldSizeAndRankOffsetNumberTheRanks) {
  Result r = run({"-n", "2", "--world-size", "6", "--rank-offset", "4", "--store-addr", "127.0.0.1:1", "sh", "-c",
                  kPrintEnvironment});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(lines_of(r.out),
              testing::UnorderedElementsAre("[4] rank=4 world=6 local=0 local_world=2 store=127.0.0.1:1 hosted=1",
                                            "[5] rank=5 world=6 local=1 local_world=2 store=127.0.0.1:1 hosted=1"));
}

TEST(ChorusRun, FirstHostOfALargerWorldHostsTheStore) {
  Result r = run({"-n", "1", "--world-size", "3", "sh", "-c", kPrintEnvironment});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(std::regex_match(
      r.out, std::regex(R"(\[0\] rank=0 world=3 local=0 local_world=1 store=127\.0\.0\.1:[0-9]+ hosted=1\n)")))
      << r.out;
  EXPECT_THAT(r.err, HasSubstr("other hosts cannot reach")) << "warns that a loopback store serves one host only";

  r = run({"-n", "1", "--world-size", "3", "--store-host", "0.0.0.0", "sh", "-c", "echo $CHORUS_STORE_ADDR"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(r.out, testing::StartsWith("[0] 127.0.0.1:")) << "local ranks reach a wildcard-bound store on loopback";
  EXPECT_THAT(r.err, HasSubstr("--store-addr THIS_HOST:")) << "tells how to start the other hosts";
}

TEST(ChorusRun, ExtraEnvironmentAndNoPrefix) {
  Result r = run({"-x", "FOO=bar", "--env", "EQ=a=b", "--no-prefix", "-n", "2", "sh", "-c", "echo \"$FOO $EQ\""});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "bar a=b\nbar a=b\n");
}

TEST(ChorusRun, BindCorePutsEachLocalRankOnOneCpuOfItsOwn) {
  // --bind core: local rank i runs on the i-th CPU that chorus-run may use, wrapping around; without it every
  // rank may run on all of them (as the launcher may: it inherits this test's affinity).
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  std::vector<int> allowed;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mine)) allowed.push_back(cpu);
  ASSERT_FALSE(allowed.empty());
  const char* kShowCpus = "grep Cpus_allowed_list /proc/self/status | cut -f2";
  const int n = static_cast<int>(allowed.size()) + 1;  // one more rank than CPUs: the last wraps to the first
  Result r = run({"-n", std::to_string(n), "--bind", "core", "--", "sh", "-c", kShowCpus});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::vector<std::string> expected;
  for (int rank = 0; rank < n; ++rank) {
    expected.push_back("[" + std::to_string(rank) + "] " +
                       std::to_string(allowed[static_cast<size_t>(rank) % allowed.size()]));
  }
  EXPECT_THAT(lines_of(r.out), testing::UnorderedElementsAreArray(expected));

  std::string own;
  {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) own = line.substr(line.find('\t') + 1);
  }
  ASSERT_FALSE(own.empty());
  r = run({"-n", "2", "--", "sh", "-c", kShowCpus});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(lines_of(r.out), testing::UnorderedElementsAre("[0] " + own, "[1] " + own));

  // Bound ranks still form a communicator and get right results (the library counts the CPUs of the host's
  // ranks together: two ranks on two CPUs are not oversubscribed, three on two are).
  r = run({"-n", "2", "--bind", "core", "--", CHORUS_BIN_DIR "/chorus-perf", "allreduce", "-b", "8", "-e", "4096", "-n",
           "3", "-w", "1", "-c", "1"});
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
}

TEST(ChorusRun, ProgramArgumentsBelongToTheProgram) {
  // -n and --help after the program are the program's; so is a second --.
  Result r = run({"-n", "1", "sh", "-c", "printf '%s,' \"$@\"", "arg0", "-n", "5", "--help", "--", "-x"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "[0] -n,5,--help,--,-x,\n");

  r = run({"-n", "1", "--", "sh", "-c", "printf '%s,' \"$@\"", "arg0", "-b", "8"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "[0] -b,8,\n");
}

TEST(ChorusRun, RanksReadStdinFromDevNull) {
  // chorus-run's own stdin is a pipe that stays open: a rank reading it would hang.
  Result r = run({"-n", "2", "--timeout", "5", "sh", "-c", "cat; echo done"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_THAT(lines_of(r.out), testing::UnorderedElementsAre("[0] done", "[1] done"));
}

TEST(ChorusRun, LinesOfDifferentRanksNeverMix) {
  Result r = run({"-n", "4", "sh", "-c", "seq 1 20000 | sed \"s/^/rank$CHORUS_RANK-line/\""});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::vector<std::string> out = lines_of(r.out);
  ASSERT_EQ(out.size(), 4u * 20000u);
  std::regex line(R"(\[([0-3])\] rank([0-3])-line[0-9]+)");
  std::vector<int> next(4, 1);
  for (const std::string& l : out) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l;
    ASSERT_EQ(m[1], m[2]) << l;
    int rank = std::stoi(m[1]);
    ASSERT_EQ(l, "[" + std::to_string(rank) + "] rank" + std::to_string(rank) + "-line" + std::to_string(next[rank]++))
        << "each rank's lines in order";
  }
}

TEST(ChorusRun, FailedRankStopsTheJob) {
  Result r = run({"-n", "4", "sh", "-c",
                  "echo $$; if [ \"$CHORUS_RANK\" = 1 ]; then sleep 0.3; echo \"failing at $(date +%s.%N)\" >&2; "
                  "exit 3; fi; exec sleep 60"});
  auto ended = std::chrono::system_clock::now();
  EXPECT_LT(r.seconds, 10.0);
  std::smatch failed_at;
  ASSERT_TRUE(std::regex_search(r.err, failed_at, std::regex(R"(failing at ([0-9.]+))"))) << r.err;
  double stop_s = std::chrono::duration<double>(ended.time_since_epoch()).count() - std::stod(failed_at[1]);
  std::printf(
      "[ measured ] 4 ranks, rank 1 exits 3 after 0.3 s: chorus-run ended %.1f ms after the failure, "
      "%.3f s after its start\n",
      stop_s * 1e3, r.seconds);
  EXPECT_EQ(r.exit_code(), 3) << r.err;
  EXPECT_THAT(r.err, testing::ContainsRegex(R"(rank 1 \(pid [0-9]+\) exited with status 3; stopping the other 3)"));
  EXPECT_LT(r.err.find("[1] failing at"), r.err.find("chorus-run: rank 1")) << "the rank's last words come first";
  for (const std::string& l : lines_of(r.out)) {
    pid_t pid = std::stoi(l.substr(l.find(' ') + 1));
    EXPECT_FALSE(process_alive(pid)) << l << " still runs";
  }
}

TEST(ChorusRun, RankKilledBySignal) {
  Result r = run({"-n", "3", "sh", "-c", "if [ \"$CHORUS_RANK\" = 2 ]; then kill -9 $$; fi; exec sleep 60"});
  std::printf("[ measured ] a job whose rank 2 killed itself ended %.1f ms after its start\n", r.seconds * 1e3);
  EXPECT_LT(r.seconds, 10.0);
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(r.exit_code(), 128 + 9) << r.err;
  EXPECT_THAT(r.err, testing::ContainsRegex(R"(rank 2 \(pid [0-9]+\) was killed by signal 9 \(SIGKILL\))"));
}

TEST(ChorusRun, TimeoutStopsTheJob) {
  Result r = run({"--timeout", "0.5", "-n", "2", "sleep", "60"});
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_EQ(r.exit_code(), 124) << r.err;
  EXPECT_THAT(r.err, HasSubstr("timed out"));
}

TEST(ChorusRun, RanksThatIgnoreSigtermAreKilledAfterTheGracePeriod) {
  Result r = run({"--timeout", "0.5", "--grace-ms", "300", "-n", "2", "sh", "-c", "trap '' TERM; echo up; sleep 60"});
  std::printf("[ measured ] --timeout 0.5 --grace-ms 300 with ranks ignoring SIGTERM ended in %.3f s\n", r.seconds);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_GE(r.seconds, 0.75);
  EXPECT_EQ(r.exit_code(), 124) << r.err;
  EXPECT_THAT(r.err, HasSubstr("still running 300 ms after SIGTERM; sending SIGKILL"));
}

TEST(ChorusRun, ProgramThatCannotBeExecuted) {
  Result r = run({"-n", "2", "/nonexistent/chorus-test-program", "x"});
  EXPECT_EQ(r.exit_code(), 127);
  EXPECT_THAT(r.err,
              HasSubstr("chorus-run: cannot execute '/nonexistent/chorus-test-program': No such file or directory"));

  r = run({"-n", "2", "chorus-test-program-not-on-path"});
  EXPECT_EQ(r.exit_code(), 127);
  EXPECT_THAT(r.err, HasSubstr("cannot execute 'chorus-test-program-not-on-path': No such file or directory"));
}

TEST(ChorusRun, StoreIsLiveWhileRanksRun) {
  // The hosted store authenticates its clients with the token chorus-run generated for the job.
  Launcher launcher({"-n", "1", "--", "sh", "-c", "echo $CHORUS_STORE_ADDR $CHORUS_AUTH_TOKEN; sleep 2"});
  std::string line = launcher.read_line();
  std::smatch m;
  ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(\[0\] (127\.0\.0\.1):([0-9]+) ([0-9a-f]{64}))"))) << line;
  {
    chorus::TcpStoreOptions options;
    options.auth_token = m[3];
    chorus::TcpStore store(m[1], static_cast<uint16_t>(std::stoi(m[2])), options);
    store.set("chorus-run-test", "hello");
    EXPECT_EQ(store.get("chorus-run-test", milliseconds(5000)), "hello");
    EXPECT_EQ(store.add("counter", 2), 2);
  }
  Result r = launcher.wait();
  EXPECT_EQ(r.exit_code(), 0) << r.err;
}

// The launcher that hosts the store of a multi-host job keeps it up after its own ranks ended, while ranks of
// other hosts (here: this test's client) are still connected, and closes it once they leave; --store-linger
// and --timeout bound the wait.
TEST(ChorusRun, HostedStoreOutlivesItsRanksWhileOtherHostsUseIt) {
  char dir_template[] = "/tmp/chorus-run-linger-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string go = std::string(dir_template) + "/go";
  // The rank prints the store's address, waits until the test's client has connected, and ends.
  const std::string rank = "echo $CHORUS_STORE_ADDR; while [ ! -e " + go + " ]; do sleep 0.02; done";

  // Starts a launcher of rank 0 of 2 with `extra` options, connects a client to its store as another host's rank
  // would (a launcher of a larger world generates no token), lets the rank end, and hands both to `check`.
  auto with_client = [&](std::vector<std::string> extra,
                         const std::function<void(Launcher&, std::unique_ptr<chorus::TcpStore>&)>& check) {
    std::vector<std::string> args{"-n", "1", "--world-size", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "sh", "-c", rank});
    Launcher launcher(args);
    std::string line = launcher.read_line();
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(\[0\] (127\.0\.0\.1):([0-9]+))"))) << line;
    chorus::TcpStoreOptions no_token;
    no_token.auth_token = "";
    auto client = std::make_unique<chorus::TcpStore>(m[1], static_cast<uint16_t>(std::stoi(m[2])), no_token);
    // A first request: the server has accepted the connection (not merely the kernel) before the rank ends.
    client->set("connected", "1");
    { std::ofstream touch(go); }
    check(launcher, client);
    std::remove(go.c_str());
  };

  with_client({}, [&](Launcher& launcher, std::unique_ptr<chorus::TcpStore>& client) {
    std::this_thread::sleep_for(milliseconds(2500));  // the rank has ended by now
    EXPECT_TRUE(process_alive(launcher.pid())) << "the store must stay up while another host's rank uses it";
    client->set("late", "still served");
    EXPECT_EQ(client->get("late", milliseconds(5000)), "still served");
    auto left = Clock::now();
    client.reset();
    Result r = launcher.wait();
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - left).count(), 5.0) << "closes once the last client left";
    EXPECT_THAT(r.err, HasSubstr("keeping the rendezvous store up for the 1 client of other hosts")) << r.err;
  });
  with_client({"--store-linger", "1"}, [&](Launcher& launcher, std::unique_ptr<chorus::TcpStore>& client) {
    Result r = launcher.wait();
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_THAT(r.err,
                HasSubstr("closing the rendezvous store with 1 client still connected after --store-linger 1 s"));
    EXPECT_THROW(client->set("gone", "x"), chorus::Error) << "the store closed after --store-linger";
  });
  with_client({}, [&](Launcher& launcher, std::unique_ptr<chorus::TcpStore>&) {
    std::this_thread::sleep_for(milliseconds(2500));  // lingering by now
    ::kill(launcher.pid(), SIGTERM);
    Result r = launcher.wait();
    EXPECT_EQ(r.exit_code(), 128 + SIGTERM) << "a signal ends the linger and the launcher's status says so";
    EXPECT_THAT(r.err, HasSubstr("received SIGTERM; closing the rendezvous store with 1 client still connected"));
  });
  with_client({"--timeout", "2"}, [&](Launcher& launcher, std::unique_ptr<chorus::TcpStore>&) {
    Result r = launcher.wait();
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_LT(r.seconds, 10.0);
    EXPECT_THAT(r.err, HasSubstr("closing the rendezvous store with 1 client still connected: the job's --timeout"));
  });
  ::rmdir(dir_template);
}

TEST(ChorusRun, SigintIsForwardedToTheRanks) {
  Launcher launcher({"-n", "2", "sh", "-c", "echo up; exec sleep 60"});
  ASSERT_EQ(launcher.read_line().substr(3), " up");
  ASSERT_EQ(launcher.read_line().substr(3), " up");
  auto sent = Clock::now();
  ::kill(launcher.pid(), SIGINT);
  Result r = launcher.wait();
  double stop_s = std::chrono::duration<double>(Clock::now() - sent).count();
  std::printf("[ measured ] SIGINT to chorus-run: the job ended %.1f ms later\n", stop_s * 1e3);
  EXPECT_LT(stop_s, 0.9) << "sleep dies of SIGINT itself, before the grace period";
  EXPECT_EQ(r.exit_code(), 128 + SIGINT) << r.err;
  EXPECT_THAT(r.err, HasSubstr("received SIGINT; forwarding it to 2 ranks"));
}

TEST(ChorusRun, RanksDieWithTheLauncher) {
  Launcher launcher({"-n", "2", "sh", "-c", "echo $$; exec sleep 60"});
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    std::string line = launcher.read_line();
    ASSERT_FALSE(line.empty());
    pids.push_back(std::stoi(line.substr(line.find(' ') + 1)));
  }
  ::kill(launcher.pid(), SIGKILL);
  launcher.wait();
  auto deadline = Clock::now() + seconds(5);
  for (pid_t pid : pids) {
    while (process_alive(pid) && Clock::now() < deadline) ::usleep(10'000);
    EXPECT_FALSE(process_alive(pid)) << "rank pid " << pid << " outlived its launcher";
  }
}

TEST(ChorusRun, ClosedOutputEndsTheJobAsInAPipeline) {
  Launcher launcher({"-n", "2", "yes"});
  ASSERT_EQ(launcher.read_line().substr(3), " y");
  launcher.close_stdout();
  Result r = launcher.wait();
  EXPECT_EQ(r.exit_code(), 128 + SIGPIPE) << r.err;
  EXPECT_THAT(r.err, HasSubstr("was killed by signal 13 (SIGPIPE)"));
}

TEST(ChorusRun, StorePortInUse) {
  chorus::TcpStoreServer taken("127.0.0.1", 0);
  Result r = run({"-n", "1", "--store-port", std::to_string(taken.port()), "true"});
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cannot host the rendezvous store on 127.0.0.1:" + std::to_string(taken.port())));
}

struct BadUsage {
  std::string name;
  std::vector<std::string> args;
  std::string message;
};

class ChorusRunUsage : public ::testing::TestWithParam<BadUsage> {};

TEST_P(ChorusRunUsage, ExitsWithStatus2AndSaysWhy) {
  Result r = run(GetParam().args);
  EXPECT_EQ(r.exit_code(), 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(GetParam().message));
  EXPECT_EQ(r.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    ChorusRun, ChorusRunUsage,
    ::testing::Values(
        BadUsage{"MissingN", {"true"}, "--np is required"},
        BadUsage{"ZeroRanks", {"-n", "0", "true"}, "must be at least 1"},
        BadUsage{"NoProgram", {"-n", "2"}, "no program given"},
        BadUsage{"UnknownOption", {"-n", "2", "--bogus", "true"}, "unknown option '--bogus'"},
        BadUsage{"WorldSmallerThanN", {"-n", "4", "--world-size", "2", "true"}, "--world-size 2 is smaller than -n 4"},
        BadUsage{"OffsetBeyondWorld",
                 {"-n", "2", "--world-size", "4", "--rank-offset", "3", "--store-addr", "h:1", "true"},
                 "but --world-size is 4"},
        BadUsage{"OffsetWithoutStoreAddr",
                 {"-n", "2", "--world-size", "4", "--rank-offset", "2", "true"},
                 "needs --store-addr"},
        BadUsage{"MalformedStoreAddr", {"-n", "1", "--store-addr", "nohostport", "true"}, "is not HOST:PORT"},
        BadUsage{"StoreAddrAndStorePort", {"-n", "1", "--store-addr", "h:1", "--store-port", "5", "true"}, "excludes"},
        BadUsage{"EnvWithoutValue", {"-n", "1", "-x", "FOO", "true"}, "is not KEY=VALUE"},
        BadUsage{"EnvOverridingLauncherVariable", {"-n", "1", "-x", "CHORUS_RANK=7", "true"}, "cannot set CHORUS_RANK"},
        BadUsage{"ZeroTimeout", {"-n", "1", "--timeout", "0", "true"}, "must be greater than 0"},
        BadUsage{"UnknownBinding", {"-n", "1", "--bind", "socket", "true"}, "socket not in {none,core}"}),
    [](const ::testing::TestParamInfo<BadUsage>& info) { return info.param.name; });

}  // namespace
