// Traffic accounting: the bytes each rank really sends and receives equal every algorithm's formula, and
// the textbook figures hold (ring all_reduce sends 2(N-1)/N x K per rank whatever N, recursive doubling
// log2(N) x K, Rabenseifner 2(N-1)/N x K for powers of two, ring all_gather and reduce_scatter (N-1)/N x K).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "test_util.h"

namespace chorus::testing {
namespace {

struct TrafficParam {
  std::string collective;  // registry name
  std::string algorithm;
  TransportKind transport;
  int world_size;
};

std::string traffic_name(const ::testing::TestParamInfo<TrafficParam>& i) {
  return i.param.collective + "_" + i.param.algorithm + "_" + transport_label(i.param.transport) + "_" +
         std::to_string(i.param.world_size) + "ranks";
}

// Runs one call of the collective with the forced algorithm; returns this rank's last_operation().
OperationInfo run_once(Communicator& comm, const std::string& coll, const std::string& algo, size_t count,
                       int root) {
  const int n = comm.size();
  std::vector<float> a(count * n + 1, 1.0f), b(count * n + 1, 0.0f);
  CallOptions o{algo};
  if (coll == "allreduce") comm.all_reduce(a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum, o);
  if (coll == "allgather") comm.all_gather(a.data(), b.data(), count, DataType::Float32, o);
  if (coll == "reducescatter") comm.reduce_scatter(a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum, o);
  if (coll == "broadcast") comm.broadcast(a.data(), b.data(), count, DataType::Float32, root, o);
  if (coll == "reduce") comm.reduce(a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum, root, o);
  if (coll == "alltoall") comm.all_to_all(a.data(), b.data(), count, DataType::Float32, o);
  if (coll == "gather") comm.gather(a.data(), b.data(), count, DataType::Float32, root, o);
  if (coll == "scatter") comm.scatter(a.data(), b.data(), count, DataType::Float32, root, o);
  return comm.last_operation();
}

class AlgorithmTraffic : public ::testing::TestWithParam<TrafficParam> {};

TEST_P(AlgorithmTraffic, MeasuredEqualsTheFormulaOnEveryRank) {
  const TrafficParam p = GetParam();
  CommOptions opts;
  opts.transport = p.transport;
  opts.slice_bytes = 4096;
  opts.timeout = std::chrono::seconds(60);
  // Counts: tiny, not divisible by N, and many slices.
  for (size_t count : {size_t{1}, size_t{5}, static_cast<size_t>(p.world_size) * 1000 + 3, size_t{100000}}) {
    std::mutex mu;
    uint64_t total_sent = 0, total_received = 0;
    run_world(p.world_size, opts, [&](Communicator& comm) {
      int root = p.world_size - 1;
      TrafficCounters before = comm.traffic();
      OperationInfo info = run_once(comm, p.collective, p.algorithm, count, root);
      TrafficCounters after = comm.traffic();
      std::string what = p.collective + "/" + p.algorithm + " rank " + std::to_string(comm.rank()) + " count " +
                         std::to_string(count);
      EXPECT_EQ(info.algorithm, p.algorithm) << what;
      EXPECT_TRUE(info.forced) << what;
      EXPECT_EQ(info.bytes_sent, info.predicted_sent) << what;
      EXPECT_EQ(info.bytes_received, info.predicted_received) << what;
      // The communicator's totals moved by exactly the operation's figures.
      EXPECT_EQ(after.bytes_sent - before.bytes_sent, info.bytes_sent) << what;
      EXPECT_EQ(after.bytes_received - before.bytes_received, info.bytes_received) << what;
      EXPECT_EQ(after.operations, before.operations + 1) << what;
      std::lock_guard<std::mutex> lock(mu);
      total_sent += info.bytes_sent;
      total_received += info.bytes_received;
    });
    EXPECT_EQ(total_sent, total_received) << "every byte sent is received, count " << count;
  }
}

std::vector<TrafficParam> traffic_params() {
  std::vector<TrafficParam> v;
  for (const char* coll : {"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "gather",
                           "scatter"}) {
    for (const std::string& algo : algorithm_names(coll)) {
      for (int n : {2, 3, 4, 5, 8}) v.push_back({coll, algo, TransportKind::InProc, n});
      v.push_back({coll, algo, TransportKind::Tcp, 3});
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, AlgorithmTraffic, ::testing::ValuesIn(traffic_params()), traffic_name);

// The textbook formulas, checked on real runs with K = 4 MiB (divisible by every N used, so exact).
struct FormulaParam {
  const char* collective;
  const char* algorithm;
  int world_size;
  // Expected bytes sent per rank for K bytes (K as nccl-tests counts it).
  double (*expected)(double k, int n);
};

std::string formula_name(const ::testing::TestParamInfo<FormulaParam>& i) {
  return std::string(i.param.collective) + "_" + i.param.algorithm + "_" + std::to_string(i.param.world_size) +
         "ranks";
}

class TextbookFormulas : public ::testing::TestWithParam<FormulaParam> {};

TEST_P(TextbookFormulas, EveryRankSendsWhatTheFormulaSays) {
  const FormulaParam p = GetParam();
  const size_t k_bytes = size_t{4} << 20;
  const std::string coll = p.collective;
  // count argument: per rank for all_reduce; per block for all_gather / reduce_scatter.
  size_t count = coll == "allreduce" ? k_bytes / 4 : k_bytes / 4 / static_cast<size_t>(p.world_size);
  CommOptions opts;
  opts.transport = TransportKind::InProc;
  run_world(p.world_size, opts, [&](Communicator& comm) {
    OperationInfo info = run_once(comm, coll, p.algorithm, count, 0);
    double want = p.expected(static_cast<double>(k_bytes), p.world_size);
    EXPECT_EQ(static_cast<double>(info.bytes_sent), want) << coll << "/" << p.algorithm << " rank " << comm.rank();
    EXPECT_EQ(static_cast<double>(info.bytes_received), want) << coll << "/" << p.algorithm << " rank " << comm.rank();
  });
}

double ring_all_reduce(double k, int n) { return 2.0 * (n - 1) / n * k; }
double ring_block(double k, int n) { return (n - 1.0) / n * k; }
double recursive_doubling(double k, int n) { return std::log2(n) * k; }

INSTANTIATE_TEST_SUITE_P(
    Formulas, TextbookFormulas,
    ::testing::Values(FormulaParam{"allreduce", "ring", 2, ring_all_reduce}, FormulaParam{"allreduce", "ring", 4, ring_all_reduce},
                      FormulaParam{"allreduce", "ring", 8, ring_all_reduce},
                      FormulaParam{"allreduce", "recursive_doubling", 2, recursive_doubling},
                      FormulaParam{"allreduce", "recursive_doubling", 4, recursive_doubling},
                      FormulaParam{"allreduce", "recursive_doubling", 8, recursive_doubling},
                      FormulaParam{"allreduce", "rabenseifner", 2, ring_all_reduce},
                      FormulaParam{"allreduce", "rabenseifner", 4, ring_all_reduce},
                      FormulaParam{"allreduce", "rabenseifner", 8, ring_all_reduce},
                      FormulaParam{"allgather", "ring", 4, ring_block}, FormulaParam{"allgather", "ring", 8, ring_block},
                      FormulaParam{"reducescatter", "ring", 4, ring_block},
                      FormulaParam{"reducescatter", "ring", 8, ring_block}),
    formula_name);

// Ring all_reduce's per-rank traffic does not grow with N (it tends to 2K); with K not divisible by N the
// formula holds to within one element per segment sent.
TEST(TextbookFormulas, RingTrafficIsIndependentOfWorldSizeWithinRounding) {
  for (int n : {3, 5, 6, 7}) {
    const size_t count = 1000003;  // prime: never divisible
    run_world(n, CommOptions{}, [&](Communicator& comm) {
      OperationInfo info = run_once(comm, "allreduce", "ring", count, 0);
      double k = count * 4.0, want = 2.0 * (n - 1) / n * k;
      EXPECT_LE(std::abs(static_cast<double>(info.bytes_sent) - want), 2.0 * (n - 1) * 4) << n << " ranks";
      EXPECT_LT(static_cast<double>(info.bytes_sent), 2 * k);
    });
  }
}

TEST(CallOptionsAndEnvironment, UnknownAlgorithmIsInvalidArgumentAndLeavesTheCommunicatorUsable) {
  run_world(2, CommOptions{}, [](Communicator& comm) {
    std::vector<float> v(8, 1.0f);
    try {
      comm.all_reduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum, CallOptions{"bruck"});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("valid: ring, tree"), std::string::npos) << e.what();
    }
    comm.all_reduce(v, ReduceOp::Sum);
    EXPECT_EQ(v[0], 2.0f);
    EXPECT_FALSE(comm.last_operation().forced);
  });
}

TEST(CallOptionsAndEnvironment, ChorusAlgoForcesPerCollectiveAndRejectsBadNames) {
  ::setenv("CHORUS_ALGO", "allreduce:tree; allgather:bruck", 1);
  run_world(3, CommOptions{}, [](Communicator& comm) {
    std::vector<float> v(8, 1.0f), all(24);
    comm.all_reduce(v, ReduceOp::Sum);
    EXPECT_EQ(comm.last_operation().algorithm, "tree");
    EXPECT_TRUE(comm.last_operation().forced);
    comm.all_gather(v, all);
    EXPECT_EQ(comm.last_operation().algorithm, "bruck");
    // A call's option beats the environment.
    comm.all_reduce(v.data(), v.data(), 8, DataType::Float32, ReduceOp::Sum, CallOptions{"ring"});
    EXPECT_EQ(comm.last_operation().algorithm, "ring");
  });
  // One name applies to every collective that has it.
  ::setenv("CHORUS_ALGO", "recursive_doubling", 1);
  run_world(2, CommOptions{}, [](Communicator& comm) {
    std::vector<float> v(8, 1.0f), all(16);
    comm.all_reduce(v, ReduceOp::Sum);
    EXPECT_EQ(comm.last_operation().algorithm, "recursive_doubling");
    comm.all_gather(v, all);
    EXPECT_EQ(comm.last_operation().algorithm, "recursive_doubling");
    comm.broadcast(v, 0);  // broadcast has no recursive_doubling: the cost model chooses
    EXPECT_FALSE(comm.last_operation().forced);
  });
  auto store = std::make_shared<MemoryStore>();
  for (const char* bad : {"allreduce:bruck", "nosuchalgo", "allreduce=ring", "frobnicate:ring"}) {
    ::setenv("CHORUS_ALGO", bad, 1);
    try {
      Communicator::create(store, 0, 1);
      ADD_FAILURE() << bad << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("CHORUS_ALGO"), std::string::npos) << e.what();
    }
  }
  ::unsetenv("CHORUS_ALGO");
}

TEST(CallOptionsAndEnvironment, RanksForcingDifferentAlgorithmsGetMismatch) {
  int mismatches = 0;
  std::mutex mu;
  run_world(2, CommOptions{}, [&](Communicator& comm) {
    std::vector<float> v(1000, 1.0f);
    try {
      comm.all_reduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum,
                      CallOptions{comm.rank() == 0 ? "ring" : "recursive_doubling"});
      comm.barrier();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
      std::lock_guard<std::mutex> lock(mu);
      ++mismatches;
    }
  });
  EXPECT_EQ(mismatches, 2);
}

}  // namespace
}  // namespace chorus::testing
