// CHORUS_ADAPT: the run-time choice among near-ties (core/adapt.h). The schedule and the decision are checked
// on a simulated clock against figures computed here by hand; the communicator tests check that every rank
// runs the same algorithm at every call, that results stay right while candidates alternate (synchronous and
// queued calls), and that bad settings are refused.
#include "core/adapt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>

#include "algo/registry.h"
#include "test_util.h"

namespace chorus::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- near_ties against a brute force

std::vector<int> brute_near_ties(const std::vector<double>& est, double margin) {
  double best = kInf;
  for (double e : est) best = std::min(best, e);
  std::vector<std::pair<double, int>> in;
  for (size_t i = 0; i < est.size(); ++i) {
    if (std::isfinite(est[i]) && est[i] <= best * margin) in.emplace_back(est[i], static_cast<int>(i));
  }
  std::sort(in.begin(), in.end());  // by estimate, then by index
  std::vector<int> out;
  for (size_t i = 0; i < in.size() && i < static_cast<size_t>(core::kAdaptMaxCandidates); ++i) {
    out.push_back(in[i].second);
  }
  return out;
}

TEST(AdaptNearTies, MatchesABruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t n = 1 + rng() % 8;
    std::vector<double> est(n);
    for (double& e : est) {
      const unsigned k = rng() % 10;
      // Inapplicable entries, exact ties and values near the margin all occur.
      e = k == 0 ? kInf : k < 3 ? 1.0 : 1.0 + (rng() % 40) / 100.0;
    }
    int got[core::kAdaptMaxCandidates];
    const int m = core::near_ties(est.data(), n, core::kAdaptMargin, got);
    EXPECT_EQ(std::vector<int>(got, got + m), brute_near_ties(est, core::kAdaptMargin)) << "trial " << trial;
  }
  int none[core::kAdaptMaxCandidates];
  const double all_inf[2] = {kInf, kInf};
  EXPECT_EQ(core::near_ties(all_inf, 2, core::kAdaptMargin, none), 0);
}

// ---- the schedule, on a simulated clock

TEST(AdaptState, TimesBlocksOfCallsAndTakesTheFastestMedian) {
  auto algos = algo::algorithms_for(algo::Collective::Broadcast);
  const algo::Algorithm* cand[2] = {&algos[0], &algos[1]};
  constexpr int kRounds = 3, kBlock = 4;
  core::AdaptState s(cand, 2, kRounds, kBlock);
  ASSERT_TRUE(s.exploring());
  ASSERT_EQ(s.exploration_calls(), 2u * kRounds * kBlock);
  // Candidate 0 takes 2 s a call, candidate 1 takes 1 s, except one call of its second block, preempted for
  // 100 s: that round's figure for it is (1 + 1 + 100) / 3, and the median over rounds rejects it.
  double t = 0;
  for (uint32_t call = 0; call < s.exploration_calls(); ++call) {
    const algo::Algorithm* a = s.next();
    const int expected = static_cast<int>(call / kBlock) % 2;
    ASSERT_EQ(a, cand[expected]) << "call " << call;
    const int round = static_cast<int>(call / (2 * kBlock));
    const double d = expected == 0 ? 2.0 : (round == 1 && call % kBlock == 2 ? 100.0 : 1.0);
    const double start = t;
    t += d;
    EXPECT_EQ(s.record(start, t), call + 1 == s.exploration_calls()) << "call " << call;
  }
  double figures[2];
  s.local_figures(figures);
  EXPECT_DOUBLE_EQ(figures[0], 2.0);
  EXPECT_DOUBLE_EQ(figures[1], 1.0);
  // The decision follows the agreed figures (the maximum over ranks), not this rank's.
  const double agreed[2] = {3.0, 5.0};
  EXPECT_EQ(s.decide(agreed), 0);
  EXPECT_FALSE(s.exploring());
  EXPECT_EQ(s.chosen(), cand[0]);
  ASSERT_EQ(s.relook_calls(), std::max(core::kAdaptRelookCalls, core::kAdaptRelookFactor * s.exploration_calls()));
  for (uint32_t i = 0; i < s.relook_calls(); ++i) {
    ASSERT_EQ(s.next(), cand[0]);
    EXPECT_FALSE(s.record(0, 1));  // decided calls are not timed
  }
  // Then every candidate is timed again, from the first.
  EXPECT_EQ(s.next(), cand[0]);
  EXPECT_TRUE(s.exploring());
  double again[2];
  s.record(0, 1);
  s.local_figures(again);
  EXPECT_EQ(again[1], kInf);  // the old figures were dropped
}

TEST(AdaptState, ABlockOfOneCallTimesTheCallItself) {
  auto algos = algo::algorithms_for(algo::Collective::AllReduce);
  const algo::Algorithm* cand[3] = {&algos[0], &algos[1], &algos[2]};
  core::AdaptState s(cand, 3, 2, 1);
  const double cost[3] = {5, 3, 4};
  double t = 100;
  for (uint32_t call = 0; call < s.exploration_calls(); ++call) {
    const algo::Algorithm* a = s.next();
    const int j = static_cast<int>(a - cand[0]);
    t += 1000;  // time between calls (the user's compute) does not count with blocks of one
    s.record(t, t + cost[j]);
  }
  double figures[3];
  s.local_figures(figures);
  EXPECT_DOUBLE_EQ(figures[0], 5);
  EXPECT_DOUBLE_EQ(figures[1], 3);
  EXPECT_DOUBLE_EQ(figures[2], 4);
  EXPECT_EQ(s.decide(figures), 1);
  // The model's choice (candidate 0) gives way only to a gain of kAdaptSwitchGain.
  const double close[3] = {1.0, 1.0 - core::kAdaptSwitchGain / 2, 2.0};
  EXPECT_EQ(s.decide(close), 0);
  const double clear[3] = {1.0, 0.99 - core::kAdaptSwitchGain, 0.9 - core::kAdaptSwitchGain};
  EXPECT_EQ(s.decide(clear), 2);
  const double none[3] = {kInf, kInf, kInf};  // no figure at all (cannot happen after a full exploration)
  EXPECT_EQ(s.decide(none), 0);
  // One candidate: nothing to time.
  core::AdaptState one(cand, 1, 4, 4);
  EXPECT_FALSE(one.exploring());
  EXPECT_EQ(one.next(), cand[0]);
}

TEST(AdaptState, BlocksLastAboutTwoMillisecondsByTheEstimate) {
  EXPECT_NEAR(core::adapt_block(1e-6), 2000, 1);  // 2 ms / 1 us, rounded up
  EXPECT_EQ(core::adapt_block(3e-4), 7);          // ceil(6.67)
  EXPECT_EQ(core::adapt_block(1e-3), core::kAdaptMinBlock);
  EXPECT_EQ(core::adapt_block(0.5), core::kAdaptMinBlock);
  EXPECT_EQ(core::adapt_block(1e-9), core::kAdaptMaxBlock);
  EXPECT_EQ(core::adapt_block(0), core::kAdaptMaxBlock);
}

// ---- on a communicator

std::string temp_path(const std::string& name) {
  return std::string(::testing::TempDir()) + "/" + name + "_" + std::to_string(::getpid()) + ".json";
}

// Measured tables under which binomial, scatter_allgather and chain broadcast of 64 KiB on 4 in-process ranks
// cost the same (450 us: blocks of adapt_block(450e-6) = 5 calls), so all three are near-ties there.
std::string tied_broadcast_tuning() {
  std::string path = temp_path("adapt_tied");
  std::ofstream(path) << R"({"chorus_tuning": 1, "transports": {"inproc": [{"world_size": 4, "alpha_us": 1,
      "overhead_us": 0.1, "beta_ns_per_byte": 0.1, "gamma_ns_per_byte": 0.1, "algorithms": {
        "broadcast/binomial": {"latency": 1, "bandwidth": 1, "measured": [[4096, 0.00045], [1048576, 0.00045]]},
        "broadcast/scatter_allgather": {"latency": 1, "bandwidth": 1, "measured": [[4096, 0.00045], [1048576, 0.00045]]},
        "broadcast/chain": {"latency": 1, "bandwidth": 1, "measured": [[4096, 0.00045], [1048576, 0.00045]]}}}]}})";
  return path;
}

struct CallRecord {
  std::string algorithm;
  bool adaptive = false;
  bool exploring = false;
};

TEST(Adaptive, EveryRankRunsTheSameAlgorithmAtEveryCallAndResultsStayRight) {
  const std::string path = tied_broadcast_tuning();
  ScopedEnv tuning("CHORUS_TUNING_FILE", path);
  ScopedEnv adapt("CHORUS_ADAPT", "1");
  constexpr int kRanks = 4, kCalls = 80;
  constexpr size_t kCount = 16384;  // 64 KiB of floats
  const uint32_t exploration = 3 * core::kAdaptDefaultRounds * core::adapt_block(450e-6);
  ASSERT_EQ(core::adapt_block(450e-6), 5);
  ASSERT_LT(exploration, static_cast<uint32_t>(kCalls));
  std::vector<std::vector<CallRecord>> seen(kRanks, std::vector<CallRecord>(kCalls));
  std::vector<uint64_t> operations(kRanks);
  run_world(kRanks, CommOptions{}, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> buf(kCount);
    for (int call = 0; call < kCalls; ++call) {
      const int root = call % kRanks;
      for (size_t i = 0; i < kCount; ++i) buf[i] = r == root ? static_cast<float>((call * 131 + i * 7) % 1000) : -1.f;
      comm.broadcast(buf.data(), buf.data(), kCount, DataType::Float32, root);
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(buf[i], static_cast<float>((call * 131 + i * 7) % 1000)) << "rank " << r << " call " << call;
      }
      const OperationInfo info = comm.last_operation();
      seen[r][call] = {info.algorithm, info.adaptive, info.exploring};
      EXPECT_FALSE(info.forced);
    }
    operations[r] = comm.traffic().operations;
  });
  std::remove(path.c_str());
  std::set<std::string> ran;
  for (int call = 0; call < kCalls; ++call) {
    for (int r = 1; r < kRanks; ++r) {
      EXPECT_EQ(seen[r][call].algorithm, seen[0][call].algorithm) << "call " << call << " rank " << r;
    }
    EXPECT_TRUE(seen[0][call].adaptive) << "call " << call;
    EXPECT_EQ(seen[0][call].exploring, static_cast<uint32_t>(call) < exploration) << "call " << call;
    ran.insert(seen[0][call].algorithm);
    if (static_cast<uint32_t>(call) >= exploration) {
      EXPECT_EQ(seen[0][call].algorithm, seen[0][exploration].algorithm) << "call " << call;
    }
  }
  EXPECT_EQ(ran, (std::set<std::string>{"binomial", "scatter_allgather", "chain"}));
  // The agreement is not an operation of its own.
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(operations[r], static_cast<uint64_t>(kCalls)) << "rank " << r;
}

TEST(Adaptive, QueuedCallsFollowTheSameScheduleOnEveryRank) {
  const std::string path = tied_broadcast_tuning();
  ScopedEnv tuning("CHORUS_TUNING_FILE", path);
  ScopedEnv adapt("CHORUS_ADAPT", "1");
  ScopedEnv rounds("CHORUS_ADAPT_ROUNDS", "2");
  constexpr int kRanks = 4, kCalls = 40;
  constexpr size_t kCount = 16384;
  std::vector<std::string> last(kRanks);
  run_world(kRanks, CommOptions{}, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<std::vector<float>> bufs(kCalls, std::vector<float>(kCount));
    std::vector<Work> works;
    for (int call = 0; call < kCalls; ++call) {
      const int root = (call * 3) % kRanks;
      for (size_t i = 0; i < kCount; ++i) bufs[call][i] = r == root ? static_cast<float>(call * 1000 + i % 997) : 0.f;
      works.push_back(comm.broadcast_async(bufs[call].data(), bufs[call].data(), kCount, DataType::Float32, root));
    }
    for (Work& w : works) w.wait();
    for (int call = 0; call < kCalls; ++call) {
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(bufs[call][i], static_cast<float>(call * 1000 + i % 997)) << "rank " << r << " call " << call;
      }
    }
    const OperationInfo info = comm.last_operation();
    EXPECT_TRUE(info.adaptive);
    EXPECT_FALSE(info.exploring);  // 3 candidates x 2 rounds x 5 calls = 30 < 40
    last[r] = info.algorithm;
  });
  std::remove(path.c_str());
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(last[r], last[0]) << "rank " << r;
}

// Calls with CallOptions::registered have shapes of their own: under tables where the heap-buffer times make
// binomial the clear choice and the registered ones tie three algorithms, interleaved calls of one size keep
// apart, the registered ones timing their near-ties and the heap ones never adaptive.
TEST(Adaptive, RegisteredCallsTimeTheNearTiesOfTheirOwnTables) {
  std::string path = temp_path("adapt_registered");
  std::ofstream(path) << R"({"chorus_tuning": 1, "transports": {"inproc": [{"world_size": 4, "alpha_us": 1,
      "overhead_us": 0.1, "beta_ns_per_byte": 0.1, "gamma_ns_per_byte": 0.1, "algorithms": {
        "broadcast/binomial": {"latency": 1, "bandwidth": 1, "measured": [[4096, 0.00045], [1048576, 0.00045]],
                               "registered": [[4096, 0.00045], [1048576, 0.00045]]},
        "broadcast/scatter_allgather": {"latency": 1, "bandwidth": 1, "measured": [[4096, 0.0045], [1048576, 0.0045]],
                                        "registered": [[4096, 0.00045], [1048576, 0.00045]]},
        "broadcast/chain": {"latency": 1, "bandwidth": 1, "measured": [[4096, 0.0045], [1048576, 0.0045]],
                            "registered": [[4096, 0.00045], [1048576, 0.00045]]}}}]}})";
  ScopedEnv tuning("CHORUS_TUNING_FILE", path);
  ScopedEnv adapt("CHORUS_ADAPT", "1");
  constexpr int kRanks = 4, kCalls = 80;
  constexpr size_t kCount = 16384;  // 64 KiB of floats
  std::vector<std::vector<CallRecord>> seen(kRanks, std::vector<CallRecord>(2 * kCalls));
  run_world(kRanks, CommOptions{}, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> buf(kCount);
    CallOptions registered;
    registered.registered = true;
    for (int call = 0; call < 2 * kCalls; ++call) {
      const bool reg = call % 2 == 1;
      for (size_t i = 0; i < kCount; ++i) buf[i] = r == 0 ? static_cast<float>((call * 17 + i) % 1000) : -1.f;
      comm.broadcast(buf.data(), buf.data(), kCount, DataType::Float32, 0, reg ? registered : CallOptions{});
      ASSERT_EQ(buf[kCount - 1], static_cast<float>((call * 17 + kCount - 1) % 1000)) << "rank " << r;
      const OperationInfo info = comm.last_operation();
      seen[r][call] = {info.algorithm, info.adaptive, info.exploring};
      EXPECT_EQ(info.registered_tables, reg);
    }
  });
  std::remove(path.c_str());
  std::set<std::string> ran_registered;
  for (int call = 0; call < 2 * kCalls; ++call) {
    for (int r = 1; r < kRanks; ++r) EXPECT_EQ(seen[r][call].algorithm, seen[0][call].algorithm) << call;
    if (call % 2 == 0) {
      EXPECT_FALSE(seen[0][call].adaptive) << "heap call " << call;
      EXPECT_EQ(seen[0][call].algorithm, "binomial") << "heap call " << call;
    } else {
      EXPECT_TRUE(seen[0][call].adaptive) << "registered call " << call;
      ran_registered.insert(seen[0][call].algorithm);
    }
  }
  EXPECT_EQ(ran_registered, (std::set<std::string>{"binomial", "scatter_allgather", "chain"}));
}

TEST(Adaptive, OffByDefaultAndNeverOverridesAForcedAlgorithm) {
  const std::string path = tied_broadcast_tuning();
  ScopedEnv tuning("CHORUS_TUNING_FILE", path);
  run_world(4, CommOptions{}, [&](Communicator& comm) {
    std::vector<float> buf(16384, 1.f);
    comm.broadcast(buf.data(), buf.data(), buf.size(), DataType::Float32, 0);
    EXPECT_FALSE(comm.last_operation().adaptive);
  });
  ScopedEnv adapt("CHORUS_ADAPT", "1");
  run_world(4, CommOptions{}, [&](Communicator& comm) {
    std::vector<float> buf(16384, 1.f);
    CallOptions forced;
    forced.algorithm = "scatter_allgather";
    for (int i = 0; i < 60; ++i) {
      comm.broadcast(buf.data(), buf.data(), buf.size(), DataType::Float32, 0, forced);
      const OperationInfo info = comm.last_operation();
      ASSERT_EQ(info.algorithm, "scatter_allgather");
      ASSERT_FALSE(info.adaptive);
      ASSERT_TRUE(info.forced);
    }
  });
  std::remove(path.c_str());
}

TEST(Adaptive, BadSettingsAreRefusedAtCreation) {
  for (auto [name, value] : {std::pair{"CHORUS_ADAPT", "2"}, std::pair{"CHORUS_ADAPT", "yes"},
                             std::pair{"CHORUS_ADAPT_ROUNDS", "0"}, std::pair{"CHORUS_ADAPT_ROUNDS", "1000"}}) {
    ScopedEnv on("CHORUS_ADAPT", "1");
    ScopedEnv bad(name, value);
    const std::string what = expect_error(
        ErrorCode::InvalidArgument, [] { Communicator::create(std::make_shared<MemoryStore>(), 0, 1, CommOptions{}); });
    EXPECT_NE(what.find(name), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace chorus::testing
