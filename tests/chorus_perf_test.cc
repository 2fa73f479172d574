// chorus-perf, run as a subprocess under chorus-run: the table it prints is parsed and checked against the
// nccl-tests definitions (sizes, counts, bus-bandwidth factors), and every checked result must be right.
#include <chorus/communicator.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "subprocess.h"

namespace {

using ::testing::HasSubstr;
using chorus::testing::ExecImage;

constexpr const char* kChorusRun = CHORUS_BIN_DIR "/chorus-run";
constexpr const char* kChorusPerf = CHORUS_BIN_DIR "/chorus-perf";
constexpr int kRanks = 3;

struct Result {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

// Runs argv with `env` added to the environment, collecting stdout and stderr. A process still running
// after `limit` is killed and the test fails: nothing here may hang.
Result run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
           std::chrono::seconds limit = std::chrono::seconds(60)) {
  int out[2], err[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  const ExecImage image(argv, env);
  pid_t pid = ::fork();
  if (pid == 0) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    image.exec();
  }
  ::close(out[1]);
  ::close(err[1]);

  Result r;
  auto deadline = std::chrono::steady_clock::now() + limit;
  int fds[2] = {out[0], err[0]};
  std::string* sinks[2] = {&r.out, &r.err};
  while (fds[0] >= 0 || fds[1] >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ADD_FAILURE() << argv[0] << " still running after " << limit.count() << " s; killing it";
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p[2];
    nfds_t n = 0;
    for (int i = 0; i < 2; ++i)
      if (fds[i] >= 0) p[n++] = {fds[i], POLLIN, 0};
    if (::poll(p, n, static_cast<int>(left.count())) <= 0) continue;
    for (nfds_t k = 0; k < n; ++k) {
      if (p[k].revents == 0) continue;
      int i = p[k].fd == fds[0] ? 0 : 1;
      char buf[65536];
      ssize_t got = ::read(fds[i], buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else {
        ::close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// chorus-run -n ranks -- chorus-perf args...
Result run_perf(const std::vector<std::string>& args, int ranks = kRanks) {
  std::vector<std::string> argv{kChorusRun, "-n", std::to_string(ranks), "--timeout", "50", "--", kChorusPerf};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in(line);
  for (std::string f; in >> f;) fields.push_back(f);
  return fields;
}

// Rank 0's output with chorus-run's "[0] " prefix removed. Every stdout line must come from rank 0.
std::vector<std::string> rank0_lines(const Result& r) {
  std::vector<std::string> lines;
  for (const std::string& line : lines_of(r.out)) {
    EXPECT_EQ(line.rfind("[0] ", 0), 0u) << "only rank 0 prints to stdout: " << line;
    lines.push_back(line.substr(std::min<size_t>(4, line.size())));
  }
  return lines;
}

std::vector<std::vector<std::string>> data_rows(const std::vector<std::string>& lines) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : lines)
    if (!line.empty() && line[0] != '#') rows.push_back(fields_of(line));
  return rows;
}

// ---- what nccl-tests defines, written out independently of the tool ----

size_t type_size(const std::string& type) {
  if (type == "int8" || type == "uint8") return 1;
  if (type == "half" || type == "bfloat16") return 2;
  if (type == "int32" || type == "uint32" || type == "float") return 4;
  return 8;
}

struct Expected {
  size_t bytes;  // the "size" column
  size_t count;  // the "count" column: the count argument of the call
};

Expected expected_for(const std::string& coll, size_t size, const std::string& type, int n) {
  size_t ts = type_size(type);
  size_t count = size / ts;
  if (coll == "allgather" || coll == "reducescatter" || coll == "alltoall" || coll == "gather" || coll == "scatter") {
    size_t per_rank = count / n;
    return {per_rank * n * ts, per_rank};
  }
  return {count * ts, count};
}

double bus_factor(const std::string& coll, int n) {
  if (coll == "allreduce") return 2.0 * (n - 1) / n;
  if (coll == "broadcast" || coll == "reduce") return 1;
  return static_cast<double>(n - 1) / n;
}

std::string canonical(const std::string& coll) {
  std::string c = coll;
  c.erase(std::remove(c.begin(), c.end(), '_'), c.end());
  return c;  // all_to_all -> alltoall, ...
}

// ---- one collective, dtype and op through the whole table ----

struct PerfCase {
  std::string coll;  // as given on the command line
  std::string type;
  std::string op;  // "" for collectives without one
  int root = -1;   // for broadcast / reduce

  std::string redop() const { return op.empty() ? "none" : op; }
};

void PrintTo(const PerfCase& c, std::ostream* os) {
  *os << c.coll << "_" << c.type;
  if (!c.op.empty()) *os << "_" << c.op;
  if (c.root >= 0) *os << "_root" << c.root;
}

class ChorusPerfTable : public ::testing::TestWithParam<PerfCase> {};

TEST_P(ChorusPerfTable, RowsMatchNcclTestsDefinitionsAndNothingIsWrong) {
  const PerfCase& c = GetParam();
  std::vector<std::string> args{c.coll, "-b", "8", "-e", "64K", "-f", "4",   "-c",
                                "1",    "-n", "2", "-w", "1",   "-d", c.type};
  if (!c.op.empty()) args.insert(args.end(), {"-o", c.op});
  if (c.root >= 0) args.insert(args.end(), {"-r", std::to_string(c.root)});
  Result r = run_perf(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  std::vector<std::string> lines = rank0_lines(r);
  std::vector<std::vector<std::string>> rows = data_rows(lines);
  std::vector<size_t> sizes{8, 32, 128, 512, 2048, 8192, 32768};
  ASSERT_EQ(rows.size(), sizes.size()) << r.out;

  const std::string coll = canonical(c.coll);
  const double factor = bus_factor(coll, kRanks);
  for (size_t k = 0; k < rows.size(); ++k) {
    const std::vector<std::string>& f = rows[k];
    SCOPED_TRACE("row " + std::to_string(k) + " of\n" + r.out);
    ASSERT_EQ(f.size(), 14u);  // nccl-tests' 13, then the algorithm
    Expected e = expected_for(coll, sizes[k], c.type, kRanks);
    EXPECT_EQ(f[0], std::to_string(e.bytes));
    EXPECT_EQ(f[1], std::to_string(e.count));
    EXPECT_EQ(f[2], c.type);
    EXPECT_EQ(f[3], c.redop());
    EXPECT_EQ(f[4], std::to_string(c.root));
    for (size_t base : {5u, 9u}) {  // out of place, in place
      double time_us = std::stod(f[base]);
      double algbw = std::stod(f[base + 1]);
      double busbw = std::stod(f[base + 2]);
      EXPECT_GT(time_us, 0);
      // Each printed value is rounded: algbw to 2 decimals, the time to its last printed digit. A time of
      // 0.40 us may have been 0.395-0.405 (1.25%), so the bound follows the time's own rounding.
      const size_t point = f[base].find('.');
      const double half_digit =
          0.5 * std::pow(10.0, -static_cast<double>(point == std::string::npos ? 0 : f[base].size() - point - 1));
      EXPECT_NEAR(algbw, static_cast<double>(e.bytes) / 1e3 / time_us,
                  0.006 + algbw * (half_digit / (time_us - half_digit) + 0.001));
      EXPECT_NEAR(busbw, algbw * factor, 0.005 + 0.005 * factor + 1e-9);
      EXPECT_EQ(f[base + 3], "0") << "#wrong";
    }
    EXPECT_THAT(chorus::algorithm_names(coll), ::testing::Contains(f[13])) << "the cost model's choice";
  }
  EXPECT_THAT(lines, ::testing::Contains("# Out of bounds values : 0 OK"));
  EXPECT_THAT(lines, ::testing::Contains(::testing::StartsWith("# Avg bus bandwidth    : ")));
  EXPECT_THAT(lines, ::testing::Contains(
                         ::testing::MatchesRegex("#  Rank  2 Group  0 Pid +[0-9]+ on +[^ ]+ transport [a-z]+")));
}

INSTANTIATE_TEST_SUITE_P(Collectives, ChorusPerfTable,
                         ::testing::Values(PerfCase{"allreduce", "float", "sum"},       //
                                           PerfCase{"allreduce", "half", "avg"},        //
                                           PerfCase{"all_reduce", "bfloat16", "prod"},  //
                                           PerfCase{"allreduce", "int8", "avg"},        //
                                           PerfCase{"allreduce", "uint64", "max"},      //
                                           PerfCase{"allgather", "float", ""},          //
                                           PerfCase{"all_gather", "half", ""},          //
                                           PerfCase{"reducescatter", "float", "sum"},   //
                                           PerfCase{"reduce_scatter", "half", "avg"},   //
                                           PerfCase{"reducescatter", "int32", "min"},   //
                                           PerfCase{"broadcast", "float", "", 1},       //
                                           PerfCase{"broadcast", "int8", "", 0},        //
                                           PerfCase{"reduce", "float", "sum", 2},       //
                                           PerfCase{"reduce", "double", "avg", 0},      //
                                           PerfCase{"alltoall", "float", ""},           //
                                           PerfCase{"all_to_all", "uint8", ""},         //
                                           PerfCase{"gather", "float", "", 1},          //
                                           PerfCase{"gather", "int8", "", 0},           //
                                           PerfCase{"scatter", "float", "", 2},         //
                                           PerfCase{"scatter", "bfloat16", "", 0}),
                         ::testing::PrintToStringParamName());

// ---- the rest of the interface ----

TEST(ChorusPerf, AllTypesAndOpsAreChecked) {
  Result r = run_perf({"allreduce", "-b", "16", "-e", "1K", "-f", "8", "-n", "1", "-w", "0", "-d", "all", "-o", "all"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::vector<std::string>> rows = data_rows(rank0_lines(r));
  ASSERT_EQ(rows.size(), 10u * 5u * 3u) << r.out;  // types x ops x {16, 128, 1024}
  for (const auto& f : rows) {
    ASSERT_EQ(f.size(), 14u);
    EXPECT_EQ(f[8], "0") << f[2] << " " << f[3];
    EXPECT_EQ(f[12], "0") << f[2] << " " << f[3];
  }
  EXPECT_EQ(rows.front()[2], "int8");
  EXPECT_EQ(rows.back()[2], "bfloat16");
}

TEST(ChorusPerf, EveryRootInTurnWithRootMinusOne) {
  for (const char* coll : {"reduce", "gather", "scatter"}) {
    std::vector<std::string> args{coll, "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-r", "-1"};
    if (std::string(coll) == "reduce") args.insert(args.end(), {"-o", "max"});
    Result r = run_perf(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::vector<std::vector<std::string>> rows = data_rows(rank0_lines(r));
    ASSERT_EQ(rows.size(), 3u) << coll << "\n" << r.out;
    for (int root = 0; root < 3; ++root) {
      EXPECT_EQ(rows[root][4], std::to_string(root)) << coll;
      EXPECT_EQ(rows[root][8], "0") << coll;   // #wrong, out of place
      EXPECT_EQ(rows[root][12], "0") << coll;  // in place
    }
  }
}

TEST(ChorusPerf, FooterCountsSharedMemorySleepsAndMissedWakeUps) {
  // Every wait sleeps at once (CHORUS_SHM_SPIN=0), so the footer has sleeps to count; a missed wake-up (a sleep
  // that ran its whole slice although its data had come) is a bug, and the footer says so where there is one.
  ::setenv("CHORUS_SHM_SPIN", "0", 1);
  Result r = run_perf({"gather", "-b", "1M", "-e", "4M", "-f", "4", "-n", "3", "-w", "1"});
  ::unsetenv("CHORUS_SHM_SPIN");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = rank0_lines(r);
  EXPECT_THAT(lines, ::testing::Contains(::testing::MatchesRegex(
                         "# shared memory waits, all ranks: [1-9][0-9]* went to sleep, 0 missed wake-ups")))
      << r.out;
}

TEST(ChorusPerf, NoCheckPrintsNotApplicable) {
  Result r = run_perf({"allreduce", "-b", "64", "-e", "256", "-i", "64", "-n", "1", "-w", "1", "-c", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = rank0_lines(r);
  EXPECT_THAT(lines, ::testing::Contains(HasSubstr("step: 64(bytes)")));
  EXPECT_THAT(lines, ::testing::Contains(HasSubstr("validation: 0")));
  std::vector<std::vector<std::string>> rows = data_rows(lines);
  ASSERT_EQ(rows.size(), 4u) << r.out;  // 64, 128, 192, 256
  for (const auto& f : rows) {
    ASSERT_EQ(f.size(), 14u);
    EXPECT_EQ(f[8], "N/A");
    EXPECT_EQ(f[12], "N/A");
  }
  EXPECT_EQ(rows[2][0], "192");
}

TEST(ChorusPerf, RotateZeroReusesOneSlotAndStillChecks) {
  for (const char* rotate : {"0", "1"}) {
    Result r = run_perf({"alltoall", "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-w", "1", "--rotate", rotate});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::vector<std::vector<std::string>> rows = data_rows(rank0_lines(r));
    ASSERT_EQ(rows.size(), 3u) << r.out;
    for (const auto& f : rows) {
      EXPECT_EQ(f[8], "0") << r.out;   // #wrong, out of place
      EXPECT_EQ(f[12], "0") << r.out;  // in place
    }
  }
  EXPECT_EQ(run_perf({"allreduce", "--rotate", "2"}).exit_code, 2);
}

// -R 1: buffers from chorus::mem_alloc, which local peers read in place; every result is still checked.
TEST(ChorusPerf, RegisteredBuffersAreCheckedLikeAnyOther) {
  for (const char* coll :
       {"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter"}) {
    Result r = run_perf({coll, "-b", "48K", "-e", "3M", "-f", "8", "-n", "3", "-w", "1", "-R", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("buffers registered (chorus::mem_alloc, -R 1)"));
    std::vector<std::vector<std::string>> rows = data_rows(rank0_lines(r));
    ASSERT_EQ(rows.size(), 3u) << r.out;
    for (const auto& f : rows) {
      EXPECT_EQ(f[8], "0") << coll << "\n" << r.out;   // #wrong, out of place
      EXPECT_EQ(f[12], "0") << coll << "\n" << r.out;  // in place
    }
  }
  EXPECT_EQ(run_perf({"allreduce", "-R", "2"}).exit_code, 2);
}

TEST(ChorusPerf, ItersBySizeFollowsThePeersSchedule) {
  std::string path = ::testing::TempDir() + "chorus_perf_test_i." + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  Result r = run_perf({"allgather", "-b", "48K", "-e", "12M", "-f", "16", "-w", "0", "--iters-by-size", "--json", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("iters: by-size(200<=64K,40<=4M,10; 3 untimed)"));
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["options"]["iters_by_size"], true);
  ASSERT_EQ(j["results"].size(), 3u);  // 48 KiB, 768 KiB, 12 MiB
  const int expected[] = {200, 40, 10};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j["results"][i]["out_of_place"]["iters"], expected[i]) << j["results"][i]["size"];
    EXPECT_EQ(j["results"][i]["in_place"]["iters"], expected[i]);
    EXPECT_EQ(j["results"][i]["out_of_place"]["untimed"], 3) << "as the peers' harness warms up";
    EXPECT_EQ(j["results"][i]["out_of_place"]["wrong"], 0);
  }
  std::remove(path.c_str());
  // Without the flag every size gets -n.
  r = run_perf({"allgather", "-b", "48K", "-e", "48K", "-n", "3", "-w", "0", "--json", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream again(path);
  const nlohmann::json plain = nlohmann::json::parse(again);
  EXPECT_EQ(plain["results"][0]["out_of_place"]["iters"], 3);
  EXPECT_EQ(plain["results"][0]["out_of_place"]["untimed"], 1) << "as nccl-tests";
  std::remove(path.c_str());
}

TEST(ChorusPerf, InPlaceFirstPutsTheInPlaceBlockFirst) {
  std::string path = ::testing::TempDir() + "chorus_perf_test_p." + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  Result r = run_perf({"broadcast", "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-w", "1", "--in-place-first",
                       "--json", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = rank0_lines(r);
  auto title = std::find_if(lines.begin(), lines.end(),
                            [](const std::string& l) { return l.find("out-of-place") != std::string::npos; });
  ASSERT_NE(title, lines.end()) << r.out;
  EXPECT_LT(title->find("in-place"), title->find("out-of-place")) << *title;
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<std::vector<std::string>> rows = data_rows(lines);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    // The first block is the in-place measurement (the table rounds what the JSON holds).
    auto printed = [](double us) { return us >= 10000 ? 0.51 : us >= 100 ? 0.051 : 0.0051; };  // format_time
    const double in_place = j["results"][i]["in_place"]["time_us"].get<double>();
    const double out_of_place = j["results"][i]["out_of_place"]["time_us"].get<double>();
    EXPECT_NEAR(std::stod(rows[i][5]), in_place, printed(in_place)) << r.out;
    EXPECT_NEAR(std::stod(rows[i][9]), out_of_place, printed(out_of_place)) << r.out;
    EXPECT_EQ(rows[i][8], "0");
    EXPECT_EQ(rows[i][12], "0");
  }
  std::remove(path.c_str());
}

TEST(ChorusPerf, AggregatedIterationsAndTimeCombinations) {
  for (const char* average : {"0", "2", "3"}) {
    Result r = run_perf({"alltoall", "-b", "3K", "-e", "3K", "-n", "2", "-w", "0", "-m", "3", "-a", average}, 2);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::vector<std::vector<std::string>> rows = data_rows(rank0_lines(r));
    ASSERT_EQ(rows.size(), 1u) << r.out;
    EXPECT_EQ(rows[0][0], "3072");
    EXPECT_EQ(rows[0][1], "384");  // floats per peer
  }
}

// -m N > 1 issues each iteration's N calls as one group, as nccl-tests' -m does: small all_reduces are fused, so
// the last call (whose traffic --traffic shows) carries the whole group's data.
TEST(ChorusPerf, AggregatedAllReducesAreOneGroupAndFused) {
  // A fixed copy rate picks the built-in tuning's entry, whose estimates decide fusion (sanitizers' memcpy would
  // otherwise move the creation-time probe).
  ::setenv("CHORUS_COPY_GBPS", "35", 1);
  auto sent_with = [](const char* agg) {
    Result r = run_perf({"allreduce", "-b", "64", "-e", "64", "-n", "3", "-w", "1", "-m", agg, "--traffic"}, 2);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::vector<std::vector<std::string>> rows = data_rows(rank0_lines(r));
    EXPECT_EQ(rows.size(), 1u) << r.out;
    if (rows.size() != 1 || rows[0].size() < 17) return uint64_t{0};
    EXPECT_EQ(rows[0][8], "0") << r.out;  // #wrong, both blocks
    EXPECT_EQ(rows[0][12], "0") << r.out;
    EXPECT_EQ(rows[0][16], "yes") << "measured traffic matches the algorithm's formula: " << r.out;
    return static_cast<uint64_t>(std::stoull(rows[0][14]));
  };
  const uint64_t one = sent_with("1"), grouped = sent_with("8");
  ::unsetenv("CHORUS_COPY_GBPS");
  EXPECT_GT(one, 0u);
  // Any 2-rank all_reduce of the fused 512 bytes sends at least half of them; one call of 64 bytes at most 64.
  EXPECT_GE(grouped, 4 * one) << "one call sent " << one << " bytes, the group's last " << grouped;
}

TEST(ChorusPerf, JsonFileHoldsTheRows) {
  std::string path = ::testing::TempDir() + "chorus_perf_test." + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  Result r = run_perf({"allgather", "-b", "1K", "-e", "4K", "-f", "2", "-n", "1", "-w", "0", "--json", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["collective"], "allgather");
  EXPECT_EQ(j["nranks"], kRanks);
  EXPECT_EQ(j["options"]["rotate"], 1);
  EXPECT_EQ(j["options"]["registered"], false);
  ASSERT_EQ(j["results"].size(), 3u);
  EXPECT_EQ(j["results"][0]["size"], 1020u);  // 255 floats: 85 per rank
  EXPECT_EQ(j["results"][0]["count"], 85u);
  EXPECT_EQ(j["results"][0]["in_place"]["wrong"], 0);
  EXPECT_GT(j["results"][2]["out_of_place"]["time_us"].get<double>(), 0);
  // Each row says how much of the host's CPU time was stolen while it ran: a share, or null for a row too
  // short to judge (or a host that does not count it).
  for (const auto& row : j["results"]) {
    ASSERT_TRUE(row.contains("stolen_share")) << row.dump();
    if (!row["stolen_share"].is_null()) {
      EXPECT_GE(row["stolen_share"].get<double>(), 0.0);
      EXPECT_LE(row["stolen_share"].get<double>(), 1.0);
    }
    // Without --retry-stolen each row is timed once.
    ASSERT_EQ(row["stolen_attempts"].size(), 1u) << row.dump();
    EXPECT_EQ(row["stolen_attempts"][0], row["stolen_share"]);
  }
  // And the footer says it for the whole run (this machine's kernel counts steal).
  EXPECT_NE(r.out.find("# CPU time stolen by the hypervisor"), std::string::npos) << r.out;
  std::remove(path.c_str());
}

// The invariants of --retry-stolen in one JSON row: every attempt but the last was judged at or above the
// limit; fewer attempts than allowed means the last was under it or not judged; the row shows the last attempt,
// or the quietest when all were over. Returns whether the row was timed again.
bool CheckAttempts(const nlohmann::json& row, size_t max_attempts, double limit) {
  const nlohmann::json& attempts = row["stolen_attempts"];
  EXPECT_GE(attempts.size(), 1u) << row.dump();
  EXPECT_LE(attempts.size(), max_attempts) << row.dump();
  if (attempts.empty()) return false;
  auto over = [&](const nlohmann::json& a) { return !a.is_null() && a.get<double>() >= limit; };
  for (size_t i = 0; i + 1 < attempts.size(); ++i) EXPECT_TRUE(over(attempts[i])) << row.dump();
  if (attempts.size() < max_attempts) {
    EXPECT_FALSE(over(attempts.back())) << row.dump();
    EXPECT_EQ(row["stolen_share"], attempts.back()) << row.dump();
  } else if (over(attempts.back())) {
    double least = 2;
    for (const auto& a : attempts) least = std::min(least, a.get<double>());
    EXPECT_EQ(row["stolen_share"].get<double>(), least) << row.dump();
  }
  return attempts.size() > 1;
}

TEST(ChorusPerf, RetryStolenTimesRowsAgainAndKeepsTheQuietestAttempt) {
  // --stolen-limit 0 judges every row long enough to judge (20 ticks of CPU time: a 64 MiB row is) as stolen,
  // so each is timed again until the attempts run out, whatever this host's hypervisor does.
  std::string path = ::testing::TempDir() + "chorus_perf_test." + std::to_string(::getpid()) + ".retry.json";
  std::remove(path.c_str());
  Result r = run_perf({"allreduce", "-b", "64M", "-e", "64M", "-n", "5", "-w", "1", "--retry-stolen", "2",
                       "--stolen-limit", "0", "--json", path},
                      2);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("# Out of bounds values : 0 OK"));
  EXPECT_THAT(r.out, HasSubstr("again, up to 2 more times (--retry-stolen)"));
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["options"]["retry_stolen"], 2);
  EXPECT_EQ(j["options"]["stolen_limit"], 0.0);
  ASSERT_EQ(j["results"].size(), 1u);
  int retaken = 0;
  for (const auto& row : j["results"]) {
    retaken += CheckAttempts(row, 3, 0.0);
    // The row shown carries the checks of the first attempt (retakes are not checked).
    EXPECT_EQ(row["out_of_place"]["wrong"], 0) << row.dump();
    EXPECT_EQ(row["in_place"]["wrong"], 0) << row.dump();
    if (!row["stolen_attempts"][0].is_null()) {
      EXPECT_GT(row["stolen_attempts"].size(), 1u) << row.dump();
    }
  }
  EXPECT_GE(retaken, 1) << "a 64 MiB row runs for more than 20 ticks of CPU time\n" << r.out;
  if (retaken) {
    EXPECT_THAT(r.out, HasSubstr("(--retry-stolen), with "));
    EXPECT_THAT(r.out, HasSubstr("rows timed again"));
  }
  std::remove(path.c_str());

  // --algos rows are timed again the same way; their checks are those of the first attempt's first round.
  r = run_perf({"allreduce", "-b", "16M", "-e", "16M", "--algos", "ring,direct", "-n", "2", "--repeats", "2", "-w", "1",
                "--retry-stolen", "1", "--stolen-limit", "0", "--json", path},
               2);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("# Out of bounds values : 0 OK"));
  std::ifstream in2(path);
  ASSERT_TRUE(in2) << path;
  j = nlohmann::json::parse(in2);
  ASSERT_EQ(j["results"].size(), 1u);
  CheckAttempts(j["results"][0], 2, 0.0);
  EXPECT_EQ(j["results"][0]["forced"]["ring"]["wrong"], 0);
  EXPECT_EQ(j["results"][0]["forced"]["direct"]["wrong"], 0);
  EXPECT_EQ(j["results"][0]["auto"]["wrong"], 0);
  std::remove(path.c_str());
}

TEST(ChorusPerf, ShortRowsAreJudgedByTheTicksUpToTheirEnd) {
  // For each root in turn, a 1 KiB row (a few milliseconds: too short to judge alone) after the previous
  // root's 64 MiB row (long enough): from the second root on, each short row is judged by a span of 20 ticks
  // or more that ends with it.
  std::string path = ::testing::TempDir() + "chorus_perf_test." + std::to_string(::getpid()) + ".window.json";
  std::remove(path.c_str());
  Result r =
      run_perf({"broadcast", "-b", "1K", "-e", "64M", "-f", "65536", "-r", "-1", "-n", "2", "-w", "0", "--json", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["results"].size(), 2u * kRanks);
  int long_rows = 0, judged_short_rows = 0;
  for (size_t i = 0; i < j["results"].size(); ++i) {
    const nlohmann::json& row = j["results"][i];
    if (row["size"] == 1024u) {
      // Short: judged by a span, or not at all where none long enough had passed yet.
      ASSERT_FALSE(row["stolen_window_ticks"].is_null()) << row.dump();
      if (long_rows > 0) {
        EXPECT_GE(row["stolen_window_ticks"].get<uint64_t>(), 20u) << row.dump();
        ASSERT_FALSE(row["stolen_share"].is_null()) << row.dump();
        ++judged_short_rows;
      }
      if (row["stolen_window_ticks"] == 0u) {
        EXPECT_TRUE(row["stolen_share"].is_null()) << row.dump();
      }
    } else if (row["stolen_window_ticks"].is_null()) {
      ++long_rows;  // judged alone
      ASSERT_FALSE(row["stolen_share"].is_null()) << row.dump();
    }
    if (!row["stolen_share"].is_null()) {
      EXPECT_GE(row["stolen_share"].get<double>(), 0.0);
      EXPECT_LE(row["stolen_share"].get<double>(), 1.0);
    }
  }
  EXPECT_EQ(long_rows, kRanks) << "a 64 MiB row runs for more than 20 ticks of CPU time\n" << r.out;
  EXPECT_EQ(judged_short_rows, kRanks - 1) << r.out;
  std::remove(path.c_str());
}

TEST(ChorusPerf, RunsAloneWithoutALauncher) {
  Result r = run({kChorusPerf, "broadcast", "-b", "8", "-e", "8K", "-f", "32", "-n", "1", "-w", "1"},
                 {"CHORUS_RANK=0", "CHORUS_WORLD_SIZE=1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::vector<std::string>> rows = data_rows(lines_of(r.out));
  ASSERT_EQ(rows.size(), 3u) << r.out;
  EXPECT_EQ(rows[2][0], "8192");
  EXPECT_EQ(rows[2][4], "0");
}

// The header names the reduction kernels' instruction set; CHORUS_KERNELS=generic forces the portable ones,
// which still give right answers (every type and op checked), and an unknown name warns and is ignored.
TEST(ChorusPerf, HeaderNamesTheKernelsAndCHORUS_KERNELSChoosesThem) {
  const std::vector<std::string> args{kChorusRun, "-n", "2", "--timeout", "50", "--", kChorusPerf, "allreduce",
                                      "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-d", "all", "-o", "all"};
  Result generic = run(args, {"CHORUS_KERNELS=generic"});
  ASSERT_EQ(generic.exit_code, 0) << generic.out << generic.err;
  EXPECT_NE(generic.out.find("reduction kernels: generic"), std::string::npos) << generic.out;
  const auto rows = data_rows(rank0_lines(generic));
  ASSERT_EQ(rows.size(), 10u * 5u) << generic.out;  // every type and op
  for (const auto& f : rows) {
    ASSERT_EQ(f.size(), 14u);
    EXPECT_EQ(f[8], "0") << f[2] << " " << f[3];
    EXPECT_EQ(f[12], "0") << f[2] << " " << f[3];
  }
  Result unknown = run(args, {"CHORUS_KERNELS=sse9"});
  ASSERT_EQ(unknown.exit_code, 0) << unknown.out << unknown.err;
  EXPECT_NE(unknown.err.find("CHORUS_KERNELS=sse9: unknown"), std::string::npos) << unknown.err;
  EXPECT_EQ(unknown.out.find("reduction kernels: generic"), std::string::npos) << unknown.out;
}

// The header says where the cost model's figures came from: the built-in tuning's entry for the world size,
// and the kind of host it was measured on where CHORUS_COPY_GBPS (or rank 0's probe) picked among kinds.
TEST(ChorusPerf, HeaderNamesTheTuningEntry) {
  const std::vector<std::string> args{kChorusRun, "-n", "2",  "--timeout", "50", "--", kChorusPerf, "allreduce",
                                      "-b",       "1K", "-e", "1K",        "-n", "1",  "-w",        "0"};
  Result r = run(args, {"CHORUS_TRANSPORT=tcp", "CHORUS_COPY_GBPS=7.5"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("# cost model: built-in tuning (2 ranks entry"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("this one 7.5"), std::string::npos) << r.out;
}

TEST(ChorusPerf, BadUsageExitsWithTwo) {
  const std::vector<std::vector<std::string>> bad{
      {"allsum"},                       // unknown collective
      {},                               // no collective
      {"allreduce", "-d", "float128"},  // unknown type
      {"allreduce", "-o", "mulsum"},    // unknown op
      {"allreduce", "-b", "1X"},        // bad size
      {"allreduce", "-b", "2K", "-e", "1K"},
      {"allreduce", "-n", "0"},
      {"allreduce", "-a", "4"},                           // averaging modes are 0..3
      {"allreduce", "-a", "2", "--average", "1"},         // two averaging modes
      {"allreduce", "-a", "tree", "--algo", "ring"},      // two algorithms
      {"allreduce", "--algo", "tree", "--algos", "all"},  // forcing one and comparing all
      {"allreduce", "--algos", "ring,,tree"},
      {"allreduce", "--algo", ""},
      {"allreduce", "--average", "4"},
      {"allreduce", "--retry-stolen", "-1"},
      {"allreduce", "--stolen-limit", "1.5"},
      {"allreduce", "--no-such-flag"},
  };
  for (const auto& args : bad) {
    std::vector<std::string> argv{kChorusPerf};
    argv.insert(argv.end(), args.begin(), args.end());
    Result r = run(argv, {"CHORUS_RANK=0", "CHORUS_WORLD_SIZE=1"});
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << r.out << r.err;
    EXPECT_FALSE(r.err.empty()) << ::testing::PrintToString(args);
    EXPECT_EQ(r.out.find("# nThread"), std::string::npos);
  }
}

TEST(ChorusPerf, RootOutsideTheWorldIsAUsageError) {
  Result r = run_perf({"broadcast", "-b", "8", "-e", "8", "-r", "5"}, 2);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("--root 5"));
}

TEST(ChorusPerf, LibraryErrorsNameTheRank) {
  // No rendezvous information at all: from_env fails.
  Result r = run({kChorusPerf, "allreduce", "-b", "8", "-e", "8"},
                 {"CHORUS_RANK=1", "CHORUS_WORLD_SIZE=2", "CHORUS_STORE_ADDR=", "MASTER_ADDR=", "MASTER_PORT="});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("chorus-perf: rank 1: "));
}

// ---- choosing the algorithm ----

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

struct ForcedCase {
  std::string coll;
  std::string flag;  // -a or --algo
  std::string algo;
};

void PrintTo(const ForcedCase& c, std::ostream* os) { *os << c.coll << "_" << c.algo; }

class ChorusPerfForced : public ::testing::TestWithParam<ForcedCase> {};

TEST_P(ChorusPerfForced, EveryRowRanTheForcedAlgorithmAndIsRight) {
  const ForcedCase& c = GetParam();
  Result r = run_perf({c.coll, "-b", "8", "-e", "64K", "-f", "4", "-n", "2", "-w", "1", "-c", "1", c.flag, c.algo});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = rank0_lines(r);
  EXPECT_THAT(lines,
              ::testing::Contains("# Algorithm: " + c.algo + ", forced on every timed and checked call (CallOptions)"));
  std::vector<std::vector<std::string>> rows = data_rows(lines);
  ASSERT_EQ(rows.size(), 7u) << r.out;
  for (const auto& f : rows) {
    ASSERT_EQ(f.size(), 14u) << r.out;
    EXPECT_EQ(f[8], "0") << "out of place, size " << f[0];
    EXPECT_EQ(f[12], "0") << "in place, size " << f[0];
    EXPECT_EQ(f[13], c.algo) << "size " << f[0];
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ChorusPerfForced,
                         ::testing::Values(ForcedCase{"allreduce", "-a", "tree"},                //
                                           ForcedCase{"allreduce", "--algo", "direct"},          //
                                           ForcedCase{"allreduce", "-a", "reduce_broadcast"},    //
                                           ForcedCase{"allgather", "-a", "bruck"},               //
                                           ForcedCase{"reducescatter", "-a", "pairwise"},        //
                                           ForcedCase{"broadcast", "--algo", "chain"},           //
                                           ForcedCase{"reduce", "-a", "reduce_scatter_gather"},  //
                                           ForcedCase{"reduce", "-a", "linear"},                 //
                                           ForcedCase{"alltoall", "-a", "bruck"},                //
                                           ForcedCase{"gather", "-a", "linear"},                 //
                                           ForcedCase{"scatter", "--algo", "linear"}),
                         ::testing::PrintToStringParamName());

TEST(ChorusPerf, DashAWithADigitKeepsMeaningTheAveragingMode) {
  std::string path = ::testing::TempDir() + "chorus_perf_test_a." + std::to_string(::getpid()) + ".json";
  auto options_of = [&](const std::vector<std::string>& flags) {
    std::remove(path.c_str());
    std::vector<std::string> args{"allreduce", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "--json", path};
    args.insert(args.end(), flags.begin(), flags.end());
    Result r = run_perf(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::ifstream in(path);
    EXPECT_TRUE(in) << path;
    return in ? nlohmann::json::parse(in) : nlohmann::json();
  };
  nlohmann::json j = options_of({"-a", "2"});  // nccl-tests: the minimum over ranks
  EXPECT_EQ(j["options"]["average"], 2);
  EXPECT_EQ(j["options"]["algorithm"], "");
  EXPECT_THAT(chorus::algorithm_names("allreduce"),
              ::testing::Contains(j["results"][0]["out_of_place"]["algorithm"].get<std::string>()));

  j = options_of({"--average", "3", "--algo", "ring"});
  EXPECT_EQ(j["options"]["average"], 3);
  EXPECT_EQ(j["options"]["algorithm"], "ring");
  EXPECT_EQ(j["results"][0]["in_place"]["algorithm"], "ring");

  j = options_of({"-a", "0", "-a", "tree"});  // one of each kind
  EXPECT_EQ(j["options"]["average"], 0);
  EXPECT_EQ(j["options"]["algorithm"], "tree");
  std::remove(path.c_str());
}

TEST(ChorusPerf, UnknownAlgorithmIsAUsageErrorThatListsTheValidNames) {
  struct Case {
    std::vector<std::string> args;
    std::string named, coll;
  };
  const std::vector<Case> cases{
      {{"allreduce", "-a", "nosuch"}, "nosuch", "allreduce"},
      {{"allgather", "--algo", "tree"}, "tree", "allgather"},  // an all_reduce algorithm only
      {{"broadcast", "--algos", "binomial,ring"}, "ring", "broadcast"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"-b", "8", "-e", "8"});
    Result r = run_perf(args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("no algorithm named '" + c.named + "'"));
    EXPECT_THAT(r.err, HasSubstr("(valid: " + joined(chorus::algorithm_names(c.coll)) + ")"));
    EXPECT_EQ(r.out.find("# nThread"), std::string::npos) << r.out;
  }
}

// --algos-in-place: the side-by-side table times (and checks) in-place calls, here on registered buffers, as
// scripts/algo-bench.sh IN_PLACE=1 REGISTERED=1 sweeps them; it needs --algos.
TEST(ChorusPerf, AlgosInPlaceTimesAndChecksInPlaceCalls) {
  for (const char* coll : {"allreduce", "allgather", "reducescatter", "alltoall"}) {
    Result r = run_perf({coll, "--algos", "all", "--algos-in-place", "-R", "1", "-b", "48K", "-e", "3M", "-f", "8",
                         "-n", "2", "--repeats", "1", "-w", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("In place only; time in us per call")) << coll;
    const size_t n = chorus::algorithm_names(coll).size();
    std::vector<std::vector<std::string>> rows = data_rows(rank0_lines(r));
    ASSERT_EQ(rows.size(), 3u) << r.out;
    for (const auto& f : rows) {
      ASSERT_GT(f.size(), 9 + n) << r.out;
      EXPECT_EQ(f[9 + n], "0") << coll << ": #wrong over every algorithm\n" << r.out;
    }
  }
  EXPECT_EQ(run_perf({"allreduce", "--algos-in-place"}).exit_code, 2);
}

// ---- --algos: every algorithm side by side ----

// The table's column names: the header line that starts with "# size".
std::vector<std::string> column_names(const std::vector<std::string>& lines) {
  for (const std::string& line : lines) {
    std::vector<std::string> f = fields_of(line);
    if (f.size() > 1 && f[0] == "#" && f[1] == "size") return {f.begin() + 1, f.end()};
  }
  return {};
}

struct CompareCase {
  std::string coll;
  bool traffic = false;
};

void PrintTo(const CompareCase& c, std::ostream* os) { *os << c.coll << (c.traffic ? "_traffic" : ""); }

class ChorusPerfCompare : public ::testing::TestWithParam<CompareCase> {};

TEST_P(ChorusPerfCompare, OneColumnPerAlgorithmThenTheAutomaticChoice) {
  const CompareCase& c = GetParam();
  std::vector<std::string> args{c.coll, "--algos", "all", "-b", "8", "-e", "64K", "-f", "4", "-n", "2", "-w", "1"};
  if (c.traffic) args.push_back("--traffic");
  Result r = run_perf(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = rank0_lines(r);
  const std::vector<std::string> names = chorus::algorithm_names(c.coll);
  const size_t n = names.size();

  std::vector<std::string> expected_columns{"size", "count", "type", "redop", "root"};
  expected_columns.insert(expected_columns.end(), names.begin(), names.end());
  expected_columns.insert(expected_columns.end(), {"auto", "auto", "auto/best", "fastest", "#wrong"});
  if (c.traffic) {
    expected_columns.insert(expected_columns.end(), names.begin(), names.end());
    expected_columns.push_back("traffic");
  }
  EXPECT_EQ(column_names(lines), expected_columns) << r.out;

  std::vector<std::vector<std::string>> rows = data_rows(lines);
  ASSERT_EQ(rows.size(), 7u) << r.out;
  for (const auto& f : rows) {
    SCOPED_TRACE("size " + f[0] + " of\n" + r.out);
    ASSERT_EQ(f.size(), expected_columns.size());
    std::vector<double> times;
    for (size_t i = 0; i < n; ++i) times.push_back(std::stod(f[5 + i]));
    double ratio = std::stod(f[7 + n]);
    double best = *std::min_element(times.begin(), times.end());
    EXPECT_GT(best, 0);
    EXPECT_THAT(names, ::testing::Contains(f[6 + n])) << "auto";
    // auto/best is the chosen algorithm's own column over the fastest column.
    auto chosen = std::find(names.begin(), names.end(), f[6 + n]);
    ASSERT_NE(chosen, names.end());
    double auto_time = times[static_cast<size_t>(chosen - names.begin())];
    // Times are printed to 2 decimals (1 from 100 us, none from 10 ms), the ratio to 2 decimals.
    auto half_unit = [](double t) { return t >= 10000 ? 0.5 : t >= 100 ? 0.05 : 0.005; };
    double slack = ratio * (half_unit(auto_time) / auto_time + half_unit(best) / best) * 1.01 + 0.005 + 1e-9;
    EXPECT_NEAR(ratio, auto_time / best, slack);
    auto fastest = std::find(names.begin(), names.end(), f[8 + n]);
    ASSERT_NE(fastest, names.end()) << "fastest";
    EXPECT_EQ(times[static_cast<size_t>(fastest - names.begin())], best);
    EXPECT_EQ(f[9 + n], "0") << "#wrong over every algorithm";
    if (c.traffic) {
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(f[10 + n + i].find('!'), std::string::npos) << names[i];
      EXPECT_EQ(f.back(), "yes");
      // allgather ring: every rank sends the N - 1 blocks it does not own once.
      size_t ring = static_cast<size_t>(std::find(names.begin(), names.end(), "ring") - names.begin());
      if (c.coll == "allgather") {
        EXPECT_EQ(f[10 + n + ring], std::to_string((kRanks - 1) * std::stoull(f[1]) * 4));
      }
    }
  }
  EXPECT_THAT(lines, ::testing::Contains("# Fastest algorithm by size (sizes in bytes, K = 1024):"));
  for (const std::string& name : names)
    EXPECT_THAT(lines, ::testing::Contains(::testing::StartsWith("#   " + name + " "))) << r.out;
  EXPECT_THAT(lines, ::testing::Contains(::testing::StartsWith("# Crossovers: ")));
  EXPECT_THAT(lines, ::testing::Contains(::testing::StartsWith("# auto/best: worst ")));
  // The worst row's ratio is the chosen algorithm's forced time over the fastest time, both printed beside it.
  static const std::regex worst_re(
      R"(# auto/best: worst ([0-9.]+) at \S+ \(auto chose \S+: ([0-9.]+) us forced, [0-9.]+ us in the auto column; )"
      R"(fastest \S+ in ([0-9.]+) us\); geometric mean [0-9.]+)");
  std::smatch m;
  auto worst = std::find_if(lines.begin(), lines.end(),
                            [](const std::string& l) { return l.starts_with("# auto/best: worst "); });
  ASSERT_NE(worst, lines.end());
  ASSERT_TRUE(std::regex_match(*worst, m, worst_re)) << *worst;
  double chosen_us = std::stod(m[2].str()), fastest_us = std::stod(m[3].str());
  auto half_unit = [](double t) { return t >= 10000 ? 0.5 : t >= 100 ? 0.05 : 0.005; };
  double ratio = chosen_us / fastest_us;
  EXPECT_NEAR(std::stod(m[1].str()), ratio,
              ratio * (half_unit(chosen_us) / chosen_us + half_unit(fastest_us) / fastest_us) * 1.01 + 0.005 + 1e-9)
      << *worst;
  EXPECT_THAT(lines, ::testing::Contains("# Out of bounds values : 0 OK"));
}

INSTANTIATE_TEST_SUITE_P(Collectives, ChorusPerfCompare,
                         ::testing::Values(CompareCase{"allreduce"}, CompareCase{"allgather"},
                                           CompareCase{"allgather", true}),
                         ::testing::PrintToStringParamName());

TEST(ChorusPerf, AlgosTakesAListInItsOrderWithoutRepeats) {
  Result r = run_perf(
      {"allreduce", "--algos", "tree,ring,tree", "-b", "1K", "-e", "4K", "-f", "4", "-n", "1", "-w", "0", "-c", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = rank0_lines(r);
  std::vector<std::string> columns = column_names(lines);
  ASSERT_GE(columns.size(), 7u) << r.out;
  EXPECT_EQ(columns[5], "tree");
  EXPECT_EQ(columns[6], "ring");
  EXPECT_EQ(columns[7], "auto");
  for (const auto& f : data_rows(lines)) {
    ASSERT_EQ(f.size(), 12u);
    EXPECT_EQ(f[11], "N/A");  // #wrong without checking
  }
}

// ---- --traffic: measured bytes against the algorithm's formula ----

struct TrafficCase {
  std::string coll, algo;
};

void PrintTo(const TrafficCase& c, std::ostream* os) { *os << c.coll << "_" << c.algo; }

class ChorusPerfTraffic : public ::testing::TestWithParam<TrafficCase> {};

TEST_P(ChorusPerfTraffic, MeasuredBytesSentEqualThePrediction) {
  const TrafficCase& c = GetParam();
  Result r = run_perf({c.coll, "-a", c.algo, "--traffic", "-b", "8", "-e", "64K", "-f", "4", "-n", "2", "-w", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = rank0_lines(r);
  EXPECT_THAT(lines, ::testing::Contains(HasSubstr("the last timed out-of-place call")));
  std::vector<std::string> columns = column_names(lines);
  ASSERT_EQ(columns.size(), 18u) << r.out;
  EXPECT_EQ(columns[13], "algo");
  EXPECT_EQ(columns[14], "sent");
  EXPECT_EQ(columns[15], "predicted");
  EXPECT_EQ(columns[16], "ok");
  EXPECT_EQ(columns[17], "over_tcp");
  std::vector<std::vector<std::string>> rows = data_rows(lines);
  ASSERT_EQ(rows.size(), 7u) << r.out;
  for (const auto& f : rows) {
    SCOPED_TRACE("size " + f[0] + " of\n" + r.out);
    ASSERT_EQ(f.size(), 18u);
    EXPECT_EQ(f[13], c.algo);
    EXPECT_EQ(f[14], f[15]) << "measured, predicted";
    EXPECT_EQ(f[16], "yes");
    EXPECT_EQ(f[17], "0") << "one host, shared memory: nothing crosses over tcp";
    size_t count = std::stoull(f[1]);
    if (count >= kRanks) {
      EXPECT_GT(std::stoull(f[14]), 0u);
    }
    if (c.coll == "allgather") {  // ring and Bruck both send the N - 1 blocks a rank does not own, once each
      EXPECT_EQ(f[14], std::to_string((kRanks - 1) * count * 4));
    }
    if (c.coll == "gather") {  // the most any rank sends: a leaf's one block (the root sends nothing)
      EXPECT_EQ(f[14], std::to_string(count * 4));
    }
    if (c.coll == "scatter") {  // the root sends every block but its own
      EXPECT_EQ(f[14], std::to_string((kRanks - 1) * count * 4));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ChorusPerfTraffic,
                         ::testing::Values(TrafficCase{"allreduce", "ring"}, TrafficCase{"allreduce", "tree"},
                                           TrafficCase{"allreduce", "direct"}, TrafficCase{"allgather", "bruck"},
                                           TrafficCase{"allgather", "ring"}, TrafficCase{"gather", "linear"},
                                           TrafficCase{"scatter", "linear"}),
                         ::testing::PrintToStringParamName());

}  // namespace
