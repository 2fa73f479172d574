// chorus-overlap, run as a subprocess with 2 ranks under chorus-run, for each mode and policy on a tiny model:
// it must exit cleanly, verify its own results, and end with a parseable `overlap:` line whose figures are
// sane. No timing targets: the machine may be loaded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "subprocess.h"

namespace chorus::testing {
namespace {

using ::testing::HasSubstr;

struct OverlapRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr, merged
};

OverlapRun run_overlap(const std::vector<std::string>& args, int ranks = 2) {
  std::vector<std::string> argv{
      std::string(CHORUS_BIN_DIR) + "/chorus-run",    "-n", std::to_string(ranks), "--timeout", "100", "--",
      std::string(CHORUS_BIN_DIR) + "/chorus-overlap"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<Child> job{spawn(argv, {}, /*merge_stderr=*/true)};
  wait_all(job, std::chrono::seconds(180));
  OverlapRun r;
  r.output = job[0].output;
  r.exit_code = WIFEXITED(job[0].status) ? WEXITSTATUS(job[0].status) : -1;
  return r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

struct Summary {
  std::string mode, policy;
  double step_ms = 0, compute_ms = 0, comm_ms = 0, exposed_pct = 0;
};

// "[0] overlap: mode=fine policy=ready_order step_ms=1.2 compute_ms=1.0 comm_ms=0.4 exposed_pct=16.6"
std::optional<Summary> parse_summary(const std::string& line) {
  static const std::regex re(
      R"(^(?:\[0\] )?overlap: mode=(\S+) policy=(\S+) step_ms=(\S+) compute_ms=(\S+) comm_ms=(\S+) exposed_pct=(\S+)$)");
  std::smatch m;
  if (!std::regex_match(line, m, re)) return std::nullopt;
  Summary s{m[1], m[2], std::stod(m[3]), std::stod(m[4]), std::stod(m[5]), std::stod(m[6])};
  return s;
}

// Checks that the figures are positive and consistent with each other. How much is exposed is a timing and
// belongs in the benchmark (docs/overlap.md), not here: under load a step can measure faster than the
// compute-only median (modelled compute sleeps; real compute competes for the cores), so exposed_pct may be
// a little negative.
void expect_sane(const Summary& s) {
  EXPECT_GT(s.step_ms, 0);
  EXPECT_GT(s.compute_ms, 0);
  EXPECT_GT(s.comm_ms, 0);
  // exposed_pct is computed from the unrounded times; the line prints the times to 0.001 ms and the share to
  // 0.01, so recomputing it from the printed times is exact only up to what that rounding can move it: a
  // short step (a 0.1 ms step moves by about 0.5 points per 0.0005 ms) needs more room than a fixed 0.1.
  const double half_ms = 0.0005, half_pct = 0.005;
  const double rounding =
      100.0 * half_ms * (1.0 / s.step_ms + std::abs(s.compute_ms) / (s.step_ms * s.step_ms)) + half_pct;
  EXPECT_NEAR(s.exposed_pct, 100.0 * (s.step_ms - s.compute_ms) / s.step_ms, rounding + 1e-9);
  EXPECT_LE(s.exposed_pct, 100);
}

struct ModeCase {
  std::string name;
  std::vector<std::string> args;
  std::string mode, policy;
  bool real_compute = false;
};
void PrintTo(const ModeCase& c, std::ostream* os) { *os << c.name; }

std::string case_name(const ::testing::TestParamInfo<ModeCase>& info) { return info.param.name; }

class ChorusOverlap : public ::testing::TestWithParam<ModeCase> {};

TEST_P(ChorusOverlap, EndsWithASaneSummaryLine) {
  const ModeCase& c = GetParam();
  std::vector<std::string> args{"--model", "resnet50", "--scale", "0.02",     "--compute-ms",
                                "30",      "--steps",  "3",       "--warmup", "1"};
  args.insert(args.end(), c.args.begin(), c.args.end());
  OverlapRun r = run_overlap(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("checked results: 0 wrong elements OK"));
  std::vector<std::string> lines = lines_of(r.output);
  ASSERT_FALSE(lines.empty());
  std::optional<Summary> s = parse_summary(lines.back());
  ASSERT_TRUE(s.has_value()) << "last line: " << lines.back() << "\n" << r.output;
  EXPECT_EQ(s->mode, c.mode);
  EXPECT_EQ(s->policy, c.policy);
  expect_sane(*s);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ChorusOverlap,
    ::testing::Values(
        ModeCase{"none", {"--mode", "none"}, "none", "-"}, ModeCase{"coarse", {"--mode", "coarse"}, "coarse", "-"},
        ModeCase{"fine_ready_order", {"--mode", "fine", "--policy", "ready_order"}, "fine", "ready_order"},
        ModeCase{"fine_front_first",
                 {"--mode", "fine", "--policy", "front_first", "--partition-mb", "0.05"},
                 "fine",
                 "front_first"},
        ModeCase{"fine_largest_first", {"--mode", "fine", "--policy", "largest_first"}, "fine", "largest_first"},
        ModeCase{"fine_copies_real_compute",
                 {"--mode", "fine", "--policy", "ready_order", "--bucket-view", "0", "--compute", "real"},
                 "fine",
                 "ready_order",
                 true}),
    case_name);

// A sweep prints one summary line per configuration, in order, the last one last.
TEST(ChorusOverlapSweep, OneSummaryLinePerConfiguration) {
  OverlapRun r = run_overlap({"--model", "bert-base", "--scale", "0.005", "--compute-ms", "20", "--steps", "2",
                              "--warmup", "1", "--mode", "all", "--policy", "all", "--bucket-mb", "0.1,1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<Summary> summaries;
  for (const std::string& line : lines_of(r.output))
    if (std::optional<Summary> s = parse_summary(line)) summaries.push_back(*s);
  ASSERT_EQ(summaries.size(), 2u + 2u * 3u) << r.output;
  EXPECT_EQ(summaries[0].mode, "none");
  EXPECT_EQ(summaries[1].mode, "coarse");
  EXPECT_EQ(summaries.back().mode, "fine");
  EXPECT_EQ(summaries.back().policy, "largest_first");
  for (const Summary& s : summaries) expect_sane(s);
  EXPECT_TRUE(parse_summary(lines_of(r.output).back()).has_value());
}

TEST(ChorusOverlapModels, UniformModelAndAutomaticCompute) {
  OverlapRun r =
      run_overlap({"--model", "uniform", "--uniform-mb", "0.01", "--steps", "2", "--warmup", "1", "--mode", "coarse"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("100 layers"));
  std::optional<Summary> s = parse_summary(lines_of(r.output).back());
  ASSERT_TRUE(s.has_value()) << r.output;
  expect_sane(*s);
}

TEST(ChorusOverlapUsage, BadFlagsAreUsageErrors) {
  OverlapRun r = run_overlap({"--mode", "sideways"}, 1);
  EXPECT_NE(r.exit_code, 0);
  r = run_overlap({"--policy", "fastest"}, 1);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("largest_first"));
}

}  // namespace
}  // namespace chorus::testing
