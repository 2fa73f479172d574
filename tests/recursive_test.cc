// The recursive algorithms of src/algo/recursive.cc, forced by name: all_reduce by recursive doubling and by
// Rabenseifner, all_gather by recursive doubling, reduce_scatter by recursive halving. Results against a
// serial reference for every dtype and op, edge counts, in place and out of place, on powers of two and on
// folded worlds, with small slices and with slices large enough that in-process sends are zero-copy; bitwise
// agreement of every rank's all_reduce result; and the bytes each rank moved against the registry's exact
// traffic and the closed formulas for powers of two.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <random>

#include "test_util.h"

namespace chorus::testing {
namespace {

enum class Algo { AllReduceDoubling, AllReduceRabenseifner, AllGatherDoubling, ReduceScatterHalving };

const char* algo_label(Algo a) {
  switch (a) {
    case Algo::AllReduceDoubling: return "AllReduceRecursiveDoubling";
    case Algo::AllReduceRabenseifner: return "AllReduceRabenseifner";
    case Algo::AllGatherDoubling: return "AllGatherRecursiveDoubling";
    case Algo::ReduceScatterHalving: return "ReduceScatterRecursiveHalving";
  }
  return "?";
}

const char* registry_name(Algo a) {
  switch (a) {
    case Algo::AllReduceDoubling: return "recursive_doubling";
    case Algo::AllReduceRabenseifner: return "rabenseifner";
    case Algo::AllGatherDoubling: return "recursive_doubling";
    case Algo::ReduceScatterHalving: return "recursive_halving";
  }
  return "?";
}

constexpr Algo kAlgos[] = {Algo::AllReduceDoubling, Algo::AllReduceRabenseifner, Algo::AllGatherDoubling,
                           Algo::ReduceScatterHalving};

bool reduces(Algo a) { return a != Algo::AllGatherDoubling; }

struct RecursiveParam {
  TransportKind transport;
  int world_size;
  Algo algo;
};

std::string param_name(const ::testing::TestParamInfo<RecursiveParam>& info) {
  return transport_label(info.param.transport) + "_" + std::to_string(info.param.world_size) + "ranks_" +
         algo_label(info.param.algo);
}

// Runs one call of `a` on this rank, checks its result and that the bytes moved are the registry's
// prediction; returns the operation's figures for formula checks.
OperationInfo run_and_check(Communicator& comm, Algo a, DataType t, ReduceOp op, size_t count, bool in_place,
                            const std::string& what) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = dtype_size(t), nn = static_cast<size_t>(n), rr = static_cast<size_t>(r);
  const CallOptions opts{registry_name(a)};
  std::vector<double> vals(nn);
  auto reduce_at = [&](size_t elem) {
    for (int q = 0; q < n; ++q) vals[static_cast<size_t>(q)] = input_value(t, op, q, elem);
    return reference_reduce(t, op, vals);
  };
  // One spare zero element at the end of each buffer: a write past the end changes it, and buffers are
  // never null for count 0.
  std::vector<char> send, recv;
  switch (a) {
    case Algo::AllReduceDoubling:
    case Algo::AllReduceRabenseifner: {
      send.assign((count + 1) * es, 0);
      recv.assign((count + 1) * es, 0);
      for (size_t i = 0; i < count; ++i) store_value(t, send.data(), i, input_value(t, op, r, i));
      char* in = in_place ? recv.data() : send.data();
      if (in_place) std::memcpy(in, send.data(), count * es);
      comm.all_reduce(in, recv.data(), count, t, op, opts);
      expect_elements(t, recv.data(), count, reduce_at, what);
      if (!in_place) expect_elements(t, send.data(), count, [&](size_t i) { return input_value(t, op, r, i); },
                                     what + " (input unchanged)");
      break;
    }
    case Algo::AllGatherDoubling: {
      recv.assign((nn * count + 1) * es, 0);
      send.assign((count + 1) * es, 0);
      char* mine = in_place ? recv.data() + rr * count * es : send.data();
      for (size_t i = 0; i < count; ++i) store_value(t, mine, i, movement_value(t, r, i));
      comm.all_gather(mine, recv.data(), count, t, opts);
      expect_elements(
          t, recv.data(), nn * count, [&](size_t i) { return movement_value(t, static_cast<int>(i / count), i % count); },
          what);
      break;
    }
    case Algo::ReduceScatterHalving: {
      send.assign((nn * count + 1) * es, 0);
      recv.assign((count + 1) * es, 0);
      for (size_t i = 0; i < nn * count; ++i) store_value(t, send.data(), i, input_value(t, op, r, i));
      char* out = in_place ? send.data() + rr * count * es : recv.data();
      comm.reduce_scatter(send.data(), out, count, t, op, opts);
      expect_elements(t, out, count, [&](size_t i) { return reduce_at(rr * count + i); }, what);
      break;
    }
  }
  for (const std::vector<char>* buf : {&send, &recv}) {
    expect_elements(t, buf->data() + buf->size() - es, 1, [](size_t) { return 0.0; }, what + " (guard element)");
  }
  OperationInfo info = comm.last_operation();
  EXPECT_EQ(info.algorithm, registry_name(a)) << what;
  EXPECT_EQ(info.bytes_sent, info.predicted_sent) << what;
  EXPECT_EQ(info.bytes_received, info.predicted_received) << what;
  return info;
}

CommOptions options(TransportKind transport, size_t slice_bytes) {
  CommOptions o;
  o.transport = transport;
  o.timeout = std::chrono::seconds(60);
  o.slice_bytes = slice_bytes;
  return o;
}

class RecursiveMatrix : public ::testing::TestWithParam<RecursiveParam> {};

// Every dtype and op, edge counts, in place and out of place, with 1 KiB slices.
TEST_P(RecursiveMatrix, MatchesReference) {
  const RecursiveParam p = GetParam();
  run_world(p.world_size, options(p.transport, 1024), [&](Communicator& comm) {
    for (DataType t : all_dtypes()) {
      for (ReduceOp op : reduces(p.algo) ? all_ops() : std::vector<ReduceOp>{ReduceOp::Sum}) {
        for (size_t count : edge_counts(p.world_size)) {
          for (bool in_place : {false, true}) {
            std::string what = "rank " + std::to_string(comm.rank()) + " " + std::string(to_string(t)) +
                               (reduces(p.algo) ? " " + std::string(to_string(op)) : "") + " count " +
                               std::to_string(count) + (in_place ? " in-place" : " out-of-place");
            run_and_check(comm, p.algo, t, op, count, in_place, what);
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  });
}

// Slices of 512 KiB: in-process sends over 64 KiB point into the sender's buffers until the receiver has
// copied them, and TCP sends queue, which is where a buffer rewritten too early or a wait in the wrong place
// would show.
TEST_P(RecursiveMatrix, LargeZeroCopySlices) {
  const RecursiveParam p = GetParam();
  run_world(p.world_size, options(p.transport, 512 * 1024), [&](Communicator& comm) {
    for (size_t count : {size_t{70001}, size_t{400000}}) {
      for (bool in_place : {false, true}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
          if (op == ReduceOp::Avg && !reduces(p.algo)) continue;
          std::string what = "rank " + std::to_string(comm.rank()) + " count " + std::to_string(count) + " " +
                             std::string(to_string(op)) + (in_place ? " in-place" : " out-of-place");
          run_and_check(comm, p.algo, DataType::Float32, op, count, in_place, what);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  });
}

std::vector<RecursiveParam> params() {
  std::vector<RecursiveParam> out;
  // The collective matrix covers correctness on every transport and size; these runs add the per-call traffic
  // assertion, on sizes that exercise the folding of non-powers of two and the wrap-around of rotations.
  for (TransportKind t : {TransportKind::InProc}) {
    for (int n : {3, 6, 9, 12}) {
      for (Algo a : kAlgos) out.push_back({t, n, a});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Worlds, RecursiveMatrix, ::testing::ValuesIn(params()), param_name);

// Recursive doubling has both partners combine a (+) b, in opposite orders, and Rabenseifner copies each
// part from the one rank that reduced it: on inputs where the order of additions matters, every rank must
// still end with the same bits.
TEST(RecursiveAllReduce, BitwiseIdenticalOnEveryRank) {
  for (int n : {3, 4, 6, 8}) {
    for (Algo a : {Algo::AllReduceDoubling, Algo::AllReduceRabenseifner}) {
      for (DataType t : {DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Avg}) {
          const size_t count = 3001, es = dtype_size(t);
          std::mutex mu;
          std::vector<std::vector<char>> results(static_cast<size_t>(n));
          run_world(n, options(TransportKind::InProc, 1024), [&](Communicator& comm) {
            std::mt19937 rng(static_cast<unsigned>(comm.rank() * 7919 + 1));
            std::uniform_real_distribution<double> dist(0.5, 1.5);
            std::vector<char> buf(count * es);
            for (size_t i = 0; i < count; ++i) store_value(t, buf.data(), i, dist(rng) * (i % 3 ? 1 : 1e-3));
            comm.all_reduce(buf.data(), buf.data(), count, t, op, CallOptions{registry_name(a)});
            std::lock_guard<std::mutex> lock(mu);
            results[static_cast<size_t>(comm.rank())] = std::move(buf);
          });
          for (int q = 1; q < n; ++q) {
            EXPECT_TRUE(results[static_cast<size_t>(q)] == results[0])
                << algo_label(a) << " " << to_string(t) << " " << to_string(op) << " on " << n << " ranks: rank " << q
                << " differs from rank 0";
          }
        }
      }
    }
  }
}

// The traffic of every rank of every world size up to 16, against the registry (in run_and_check) and
// against formulas computed here: for powers of two, recursive doubling sends log2(N) K, Rabenseifner
// 2(N-1)/N K (exactly when N divides the count, else within one element per range moved), and the
// all_gather and reduce_scatter (N-1)/N of the whole buffer.
TEST(RecursiveTraffic, FormulasForEveryRank) {
  for (int n = 2; n <= 16; ++n) {
    const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n))), lg = std::countr_zero(unsigned(p));
    const bool pow2 = p == n;
    run_world(n, options(TransportKind::InProc, 1024), [&](Communicator& comm) {
      const int r = comm.rank();
      const bool excluded = r < 2 * (n - p) && r % 2 == 0, folded = r < 2 * (n - p) && r % 2 == 1;
      for (size_t count : {size_t{5}, size_t{48}, size_t{1001}}) {
        const size_t es = 8;
        const uint64_t k = count * es, block = k;
        std::string what = "rank " + std::to_string(r) + " of " + std::to_string(n) + " count " + std::to_string(count);
        OperationInfo info;

        info = run_and_check(comm, Algo::AllReduceDoubling, DataType::Float64, ReduceOp::Sum, count, false, what);
        uint64_t want = excluded ? k : (lg + (folded ? 1 : 0)) * k;
        EXPECT_EQ(info.bytes_sent, want) << "recursive doubling " << what;
        EXPECT_EQ(info.bytes_received, want) << "recursive doubling " << what;

        info = run_and_check(comm, Algo::AllReduceRabenseifner, DataType::Float64, ReduceOp::Sum, count, false, what);
        if (pow2) {
          const double ideal = 2.0 * (n - 1) / n * static_cast<double>(k);
          if (count % static_cast<size_t>(n) == 0) {
            EXPECT_EQ(info.bytes_sent, static_cast<uint64_t>(ideal)) << "rabenseifner " << what;
            EXPECT_EQ(info.bytes_received, static_cast<uint64_t>(ideal)) << "rabenseifner " << what;
          } else {
            EXPECT_LE(std::abs(static_cast<double>(info.bytes_sent) - ideal), 2.0 * lg * es) << "rabenseifner " << what;
            EXPECT_LE(std::abs(static_cast<double>(info.bytes_received) - ideal), 2.0 * lg * es)
                << "rabenseifner " << what;
          }
        } else if (excluded) {
          EXPECT_EQ(info.bytes_sent, k) << "rabenseifner " << what;
          EXPECT_EQ(info.bytes_received, k) << "rabenseifner " << what;
        }

        info = run_and_check(comm, Algo::AllGatherDoubling, DataType::Float64, ReduceOp::Sum, count, false, what);
        if (pow2 || excluded) {
          EXPECT_EQ(info.bytes_sent, pow2 ? (n - 1) * block : block) << "all_gather " << what;
          EXPECT_EQ(info.bytes_received, (n - 1) * block) << "all_gather " << what;
        } else {
          // Every block but its own arrives once at a survivor (its partner's straight from the partner).
          EXPECT_EQ(info.bytes_received, (n - 1) * block) << "all_gather " << what;
        }

        info = run_and_check(comm, Algo::ReduceScatterHalving, DataType::Float64, ReduceOp::Sum, count, false, what);
        if (pow2 || excluded) {
          EXPECT_EQ(info.bytes_sent, pow2 ? (n - 1) * block : n * block) << "reduce_scatter " << what;
          EXPECT_EQ(info.bytes_received, pow2 ? (n - 1) * block : block) << "reduce_scatter " << what;
        }
        if (::testing::Test::HasFailure()) return;
      }
    });
  }
}

// CHORUS_ALGO selects the algorithms when the call does not.
TEST(RecursiveSelection, ChorusAlgoEnvironment) {
  for (const char* allreduce : {"recursive_doubling", "rabenseifner"}) {
    std::string spec = std::string("allreduce:") + allreduce + ";allgather:recursive_doubling;reducescatter:recursive_halving";
    setenv("CHORUS_ALGO", spec.c_str(), 1);
    run_world(5, options(TransportKind::InProc, 0), [&](Communicator& comm) {
      const int n = comm.size(), r = comm.rank();
      const size_t count = 13;
      std::vector<int32_t> send(n * count), recv(n * count);
      for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<int32_t>(r * 1000 + static_cast<int>(i));

      comm.all_reduce(send.data(), recv.data(), count, DataType::Int32, ReduceOp::Sum);
      EXPECT_EQ(comm.last_operation().algorithm, allreduce);
      EXPECT_TRUE(comm.last_operation().forced);
      EXPECT_EQ(recv[3], 1000 * (0 + 1 + 2 + 3 + 4) + 5 * 3);

      comm.all_gather(send.data(), recv.data(), count, DataType::Int32);
      EXPECT_EQ(comm.last_operation().algorithm, "recursive_doubling");
      for (int q = 0; q < n; ++q) EXPECT_EQ(recv[q * count + 3], q * 1000 + 3);

      comm.reduce_scatter(send.data(), recv.data(), count, DataType::Int32, ReduceOp::Sum);
      EXPECT_EQ(comm.last_operation().algorithm, "recursive_halving");
      int want = 0;
      for (int q = 0; q < n; ++q) want += q * 1000 + r * static_cast<int>(count) + 3;
      EXPECT_EQ(recv[3], want);
    });
  }
  unsetenv("CHORUS_ALGO");
}

}  // namespace
}  // namespace chorus::testing
