// The Bruck all_gather and all_to_all (src/algo/bruck.cc) and the pairwise reduce_scatter
// (src/algo/pairwise.cc), forced by name. Beyond collectives_test's matrix (which checks results with 1 KiB
// slices, where every in-process send is eager), this checks the bytes each rank moved on every call against
// the registry's exact traffic formulas and an independent count, and runs slices large enough that
// in-process sends point into the algorithms' buffers until consumed (zero-copy).
#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>

#include "test_util.h"

namespace chorus::testing {
namespace {

enum class Algo { AllGatherBruck, AllToAllBruck, ReduceScatterPairwise };

const char* algo_label(Algo a) {
  switch (a) {
    case Algo::AllGatherBruck:
      return "AllGatherBruck";
    case Algo::AllToAllBruck:
      return "AllToAllBruck";
    case Algo::ReduceScatterPairwise:
      return "ReduceScatterPairwise";
  }
  return "?";
}

struct BruckParam {
  TransportKind transport;
  int world_size;
  Algo algo;
};

std::string param_name(const ::testing::TestParamInfo<BruckParam>& info) {
  return transport_label(info.param.transport) + "_" + std::to_string(info.param.world_size) + "ranks_" +
         algo_label(info.param.algo);
}

// Bytes each rank sends (and receives) in one call, computed here independently of the registry.
uint64_t expected_traffic(Algo a, int n, size_t count, size_t esize) {
  uint64_t block = count * esize;
  if (a == Algo::AllToAllBruck) {
    uint64_t blocks = 0;  // a block at rotated index i takes popcount(i) hops
    for (int i = 1; i < n; ++i) blocks += static_cast<uint64_t>(std::popcount(static_cast<unsigned>(i)));
    return blocks * block;
  }
  return static_cast<uint64_t>(n - 1) * block;  // every block but its own arrives once
}

// Runs one call of `a` on this rank and checks its result and its traffic.
void run_and_check(Communicator& comm, Algo a, DataType t, ReduceOp op, size_t count, bool in_place,
                   const std::string& what) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = dtype_size(t), nn = static_cast<size_t>(n), rr = static_cast<size_t>(r);
  std::vector<char> send, recv;
  switch (a) {
    case Algo::AllGatherBruck: {
      CallOptions opts{"bruck"};
      recv.assign(nn * count * es + 1, 0);
      send.assign(count * es + 1, 0);
      char* mine = in_place ? recv.data() + rr * count * es : send.data();
      for (size_t i = 0; i < count; ++i) store_value(t, mine, i, movement_value(t, r, i));
      comm.all_gather(mine, recv.data(), count, t, opts);
      expect_elements(
          t, recv.data(), nn * count,
          [&](size_t i) { return movement_value(t, static_cast<int>(i / count), i % count); }, what);
      break;
    }
    case Algo::AllToAllBruck: {
      CallOptions opts{"bruck"};
      send.assign(nn * count * es + 1, 0);
      recv.assign(nn * count * es + 1, 0);
      char* in = in_place ? recv.data() : send.data();
      for (size_t i = 0; i < nn * count; ++i) store_value(t, in, i, movement_value(t, r, i));
      comm.all_to_all(in, recv.data(), count, t, opts);
      expect_elements(
          t, recv.data(), nn * count,
          [&](size_t i) { return movement_value(t, static_cast<int>(i / count), rr * count + i % count); }, what);
      break;
    }
    case Algo::ReduceScatterPairwise: {
      CallOptions opts{"pairwise"};
      send.assign(nn * count * es + 1, 0);
      recv.assign(count * es + 1, 0);
      for (size_t i = 0; i < nn * count; ++i) store_value(t, send.data(), i, input_value(t, op, r, i));
      char* out = in_place ? send.data() + rr * count * es : recv.data();
      comm.reduce_scatter(send.data(), out, count, t, op, opts);
      std::vector<double> vals(nn);
      expect_elements(
          t, out, count,
          [&](size_t i) {
            for (int q = 0; q < n; ++q) vals[static_cast<size_t>(q)] = input_value(t, op, q, rr * count + i);
            return reference_reduce(t, op, vals);
          },
          what);
      break;
    }
  }
  OperationInfo info = comm.last_operation();
  uint64_t want = n == 1 ? 0 : expected_traffic(a, n, count, es);
  EXPECT_EQ(info.algorithm, a == Algo::ReduceScatterPairwise ? "pairwise" : "bruck") << what;
  EXPECT_EQ(info.bytes_sent, info.predicted_sent) << what;
  EXPECT_EQ(info.bytes_received, info.predicted_received) << what;
  EXPECT_EQ(info.predicted_sent, want) << what;
  EXPECT_EQ(info.predicted_received, want) << what;
}

class BruckMatrix : public ::testing::TestWithParam<BruckParam> {
 protected:
  CommOptions options(size_t slice_bytes) const {
    CommOptions o;
    o.transport = GetParam().transport;
    o.timeout = std::chrono::seconds(60);
    o.slice_bytes = slice_bytes;
    return o;
  }
};

// Every dtype (and op), edge counts, in place and out of place, with 1 KiB slices.
TEST_P(BruckMatrix, MatchesReference) {
  const BruckParam p = GetParam();
  run_world(p.world_size, options(1024), [&](Communicator& comm) {
    const bool reduces = p.algo == Algo::ReduceScatterPairwise;
    for (DataType t : all_dtypes()) {
      for (ReduceOp op : reduces ? all_ops() : std::vector<ReduceOp>{ReduceOp::Sum}) {
        for (size_t count : edge_counts(p.world_size)) {
          for (bool in_place : {false, true}) {
            std::string what = "rank " + std::to_string(comm.rank()) + " " + std::string(to_string(t)) +
                               (reduces ? " " + std::string(to_string(op)) : "") + " count " + std::to_string(count) +
                               (in_place ? " in-place" : " out-of-place");
            run_and_check(comm, p.algo, t, op, count, in_place, what);
          }
        }
      }
    }
  });
}

// Slices of 512 KiB: in-process sends over 64 KiB point into the sender's buffers until the receiver has
// copied them, which is where a buffer reused too early or a wait in the wrong place would show.
TEST_P(BruckMatrix, LargeZeroCopySlices) {
  const BruckParam p = GetParam();
  run_world(p.world_size, options(512 * 1024), [&](Communicator& comm) {
    for (size_t count : {size_t{70001}, size_t{140001}}) {
      for (bool in_place : {false, true}) {
        for (int rep = 0; rep < 2; ++rep) {
          std::string what = "rank " + std::to_string(comm.rank()) + " count " + std::to_string(count) +
                             (in_place ? " in-place" : " out-of-place");
          run_and_check(comm, p.algo, DataType::Float32, ReduceOp::Sum, count, in_place, what);
        }
      }
    }
  });
}

std::vector<BruckParam> params() {
  std::vector<BruckParam> out;
  // The collective matrix covers correctness on every transport and size; these runs add the per-call traffic
  // assertion, on sizes that exercise the folding of non-powers of two and the wrap-around of rotations.
  for (TransportKind t : {TransportKind::InProc}) {
    for (int n : {3, 6, 9, 12}) {
      for (Algo a : {Algo::AllGatherBruck, Algo::AllToAllBruck, Algo::ReduceScatterPairwise}) out.push_back({t, n, a});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Worlds, BruckMatrix, ::testing::ValuesIn(params()), param_name);

// CHORUS_ALGO selects the algorithms when the call does not.
TEST(BruckSelection, ChorusAlgoEnvironment) {
  setenv("CHORUS_ALGO", "allgather:bruck;alltoall:bruck;reducescatter:pairwise", 1);
  CommOptions o;
  o.transport = TransportKind::InProc;
  o.timeout = std::chrono::seconds(60);
  run_world(5, o, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    const size_t count = 13;
    std::vector<int32_t> send(n * count), recv(n * count);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<int32_t>(r * 1000 + static_cast<int>(i));

    comm.all_gather(send.data(), recv.data(), count, DataType::Int32);
    EXPECT_EQ(comm.last_operation().algorithm, "bruck");
    EXPECT_TRUE(comm.last_operation().forced);
    for (int q = 0; q < n; ++q) EXPECT_EQ(recv[q * count + 3], q * 1000 + 3);

    comm.all_to_all(send.data(), recv.data(), count, DataType::Int32);
    EXPECT_EQ(comm.last_operation().algorithm, "bruck");
    for (int q = 0; q < n; ++q) EXPECT_EQ(recv[q * count + 3], q * 1000 + r * static_cast<int>(count) + 3);

    comm.reduce_scatter(send.data(), recv.data(), count, DataType::Int32, ReduceOp::Sum);
    EXPECT_EQ(comm.last_operation().algorithm, "pairwise");
    int want = 0;
    for (int q = 0; q < n; ++q) want += q * 1000 + r * static_cast<int>(count) + 3;
    EXPECT_EQ(recv[3], want);
  });
  unsetenv("CHORUS_ALGO");
}

// The traffic formulas as the registry states them, for every rank of every world size up to 16.
TEST(BruckTraffic, FormulasForEveryRank) {
  CommOptions o;
  o.transport = TransportKind::InProc;
  o.timeout = std::chrono::seconds(60);
  for (int n = 2; n <= 16; ++n) {
    run_world(n, o, [&](Communicator& comm) {
      for (Algo a : {Algo::AllGatherBruck, Algo::AllToAllBruck, Algo::ReduceScatterPairwise}) {
        run_and_check(comm, a, DataType::Float64, ReduceOp::Sum, 5,
                      /*in_place=*/false, std::string(algo_label(a)) + " on " + std::to_string(n));
      }
    });
  }
}

}  // namespace
}  // namespace chorus::testing
