// The cost model's inputs: tuning files (read, written, rejected when malformed), calibration, and the
// effect of a tuning file on the automatic choice.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "base/cpu.h"
#include "subprocess.h"
#include "test_util.h"
#include "tune/cost_model.h"

namespace chorus::testing {
namespace {

std::string temp_path(const std::string& name) {
  return std::string(::testing::TempDir()) + "/" + name + "_" + std::to_string(::getpid()) + ".json";
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Link figures as chorus-tune would write them, without algorithms.
LinkFigures link_figures(int world_size, const std::string& transport) {
  LinkFigures f;
  f.alpha_us = 1;
  f.overhead_us = 0.5;
  f.beta_ns_per_byte = 0.1;
  f.gamma_ns_per_byte = 0.2;
  f.world_size = world_size;
  f.transport = transport;
  return f;
}

TEST(TuningFile, RoundTripsAndPicksTheNearestWorldSize) {
  tune::Tuning t;
  algo::Calibration ring;
  ring.latency = 1.5;
  ring.bandwidth = 0.5;
  t.transports["tcp"] = {{2, {1e-6, 2e-6, 3e-9, 4e-9}, {{"allreduce/ring", ring}}}, {8, {5e-6, 6e-6, 7e-9, 8e-9}, {}}};
  std::string path = temp_path("roundtrip");
  write_file(path, tune::tuning_to_json(t));
  tune::Tuning back = tune::load_tuning_file(path);
  ASSERT_EQ(back.transports.at("tcp").size(), 2u);
  EXPECT_DOUBLE_EQ(back.transports.at("tcp")[1].link.beta, 7e-9);
  EXPECT_DOUBLE_EQ(back.transports.at("tcp")[0].algorithms.at("allreduce/ring").latency, 1.5);
  auto cal = tune::calibration_for(back.transports.at("tcp")[0], algo::Collective::AllReduce);
  EXPECT_DOUBLE_EQ(cal[0].bandwidth, 0.5);  // ring is first
  EXPECT_DOUBLE_EQ(cal[1].latency, 1.0);    // tree: not calibrated
  EXPECT_DOUBLE_EQ(tune::entry_for(&back, "tcp", 3).link.alpha, 1e-6);  // nearest is 2
  EXPECT_DOUBLE_EQ(tune::entry_for(&back, "tcp", 7).link.alpha, 5e-6);  // nearest is 8
  // A transport the file lacks falls back to the built-in tuning.
  EXPECT_DOUBLE_EQ(tune::entry_for(&back, "inproc", 4).link.alpha, tune::entry_for(nullptr, "inproc", 4).link.alpha);
  std::remove(path.c_str());
}

TEST(TuningFile, MalformedFilesAreClearErrors) {
  std::string path = temp_path("bad");
  for (const char* text : {"not json", "{}", R"({"chorus_tuning": 2, "transports": {}})",
                           R"({"chorus_tuning": 1, "transports": {"tcp": [{"world_size": 2}]}})",
                           R"({"chorus_tuning": 1, "transports": {"tcp": [{"world_size": 2, "alpha_us": -1,
                               "overhead_us": 1, "beta_ns_per_byte": 1, "gamma_ns_per_byte": 1}]}})"}) {
    write_file(path, text);
    try {
      tune::load_tuning_file(path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  std::remove(path.c_str());
  // A communicator refuses a broken CHORUS_TUNING_FILE at creation rather than guessing.
  write_file(path, "{");
  ::setenv("CHORUS_TUNING_FILE", path.c_str(), 1);
  try {
    Communicator::create(std::make_shared<MemoryStore>(), 0, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  }
  ::unsetenv("CHORUS_TUNING_FILE");
  std::remove(path.c_str());
}

// The same calls choose differently under figures that favour latency or bandwidth.
TEST(TuningFile, FiguresChangeTheAutomaticChoice) {
  std::string latency_bound = temp_path("latency"), bandwidth_bound = temp_path("bandwidth");
  auto file = [](double alpha_us, double beta_ns) {
    return fmt::format(R"({{"chorus_tuning": 1, "transports": {{"inproc": [{{"world_size": 8, "alpha_us": {},
        "overhead_us": 0.1, "beta_ns_per_byte": {}, "gamma_ns_per_byte": 0.1}}]}}}})",
                       alpha_us, beta_ns);
  };
  write_file(latency_bound, file(1000, 0.001));  // messages are very expensive: few rounds win
  write_file(bandwidth_bound, file(0.01, 10));   // bytes are very expensive: least traffic wins
  std::string a, b;
  ::setenv("CHORUS_TUNING_FILE", latency_bound.c_str(), 1);
  run_world(8, CommOptions{}, [&](Communicator& comm) {
    if (comm.rank() == 0) a = comm.automatic_algorithm("broadcast", 1 << 18, DataType::Float32);
  });
  ::setenv("CHORUS_TUNING_FILE", bandwidth_bound.c_str(), 1);
  run_world(8, CommOptions{}, [&](Communicator& comm) {
    if (comm.rank() == 0) b = comm.automatic_algorithm("broadcast", 1 << 18, DataType::Float32);
  });
  ::unsetenv("CHORUS_TUNING_FILE");
  // 1 MiB over 8 ranks: with costly messages the binomial tree's 3 rounds win; with costly bytes the chain,
  // where every rank sends the data once (the binomial root sends it 3 times).
  EXPECT_EQ(a, "binomial");
  EXPECT_EQ(b, "chain");
  std::remove(latency_bound.c_str());
  std::remove(bandwidth_bound.c_str());
}

// A measured table decides within its sizes, at its world size only; past its ends its order carries on,
// scaled by the formula; at other world sizes the formula decides.
TEST(TuningFile, MeasuredTimesDecideWhereTheyExist) {
  // Figures under which the formula prefers binomial for broadcast (costly messages); measurements say the
  // chain is faster from 1 KiB to 1 MiB.
  std::string path = temp_path("measured");
  write_file(path, R"({"chorus_tuning": 1, "transports": {"inproc": [{"world_size": 8, "alpha_us": 1000,
      "overhead_us": 0.1, "beta_ns_per_byte": 0.001, "gamma_ns_per_byte": 0.1, "algorithms": {
        "broadcast/binomial": {"latency": 1, "bandwidth": 1, "measured": [[1024, 0.002], [1048576, 0.02]]},
        "broadcast/chain": {"latency": 1, "bandwidth": 1, "measured": [[1024, 0.001], [1048576, 0.01]]},
        "broadcast/scatter_allgather": {"latency": 1, "bandwidth": 1, "measured": [[1024, 0.004], [1048576, 0.04]]}}}]}})");
  ::setenv("CHORUS_TUNING_FILE", path.c_str(), 1);
  std::string inside, below, above, other_size;
  run_world(8, CommOptions{}, [&](Communicator& comm) {
    if (comm.rank() != 0) return;
    inside = comm.automatic_algorithm("broadcast", 1 << 16, DataType::Float32);  // 256 KiB: measured
    below = comm.automatic_algorithm("broadcast", 16, DataType::Float32);        // 64 B: below the table
    above = comm.automatic_algorithm("broadcast", 1 << 22, DataType::Float32);   // 16 MiB: above it
  });
  run_world(7, CommOptions{}, [&](Communicator& comm) {
    if (comm.rank() == 0) other_size = comm.automatic_algorithm("broadcast", 1 << 16, DataType::Float32);
  });
  ::unsetenv("CHORUS_TUNING_FILE");
  EXPECT_EQ(inside, "chain");
  EXPECT_EQ(below, "chain");
  EXPECT_EQ(above, "chain");
  EXPECT_EQ(other_size, "binomial");  // measured at 8 ranks: not used at 7
  std::remove(path.c_str());

  // Interpolation is linear in log-log between points, and nothing outside the range.
  algo::Calibration c;
  c.measured = {{1024, 1e-3}, {4096, 4e-3}};
  EXPECT_NEAR(c.measured_time(2048), 2e-3, 1e-9);
  EXPECT_LT(c.measured_time(512), 0);
  EXPECT_LT(c.measured_time(8192), 0);
  // Malformed points are clear errors.
  EXPECT_THROW(tune::parse_tuning(R"({"chorus_tuning": 1, "transports": {"tcp": [{"world_size": 2, "alpha_us": 1,
      "overhead_us": 1, "beta_ns_per_byte": 1, "gamma_ns_per_byte": 1, "algorithms": {"allreduce/ring":
      {"latency": 1, "bandwidth": 1, "measured": [[0, 1]]}}}]}})",
                                   "test"),
               Error);
}

// A call of `bytes` bytes of float32 on `size` ranks, for the cost model's estimates.
algo::CallShape float_call(algo::Collective coll, int size, size_t bytes) {
  algo::CallShape s;
  s.coll = coll;
  s.size = size;
  s.esize = 4;
  s.count = bytes / 4;
  return s;
}

// Past either end of a measured table the estimate is the time measured at that end, scaled by how the formula
// (with its corrections) grows from there: continuous at the ends, and the measured order carries on.
TEST(TuningFile, PastTheMeasuredSizesTheEndsTimeIsScaledByTheFormula) {
  const algo::Algorithm* chain = algo::find_algorithm(algo::Collective::Broadcast, "chain");
  const algo::Algorithm* binomial = algo::find_algorithm(algo::Collective::Broadcast, "binomial");
  ASSERT_NE(chain, nullptr);
  ASSERT_NE(binomial, nullptr);
  algo::LinkModel link;  // the defaults: 20 us per message, 0.4 ns per byte
  auto shape = [](size_t bytes) { return float_call(algo::Collective::Broadcast, 8, bytes); };
  algo::Calibration cal;
  cal.corrections = {{1024, 1.5}, {1 << 20, 0.5}};
  cal.measured = {{1024, 1e-3}, {1 << 20, 1e-2}};
  for (const algo::Algorithm* a : {chain, binomial}) {
    const double formula_small = algo::formula_estimate(*a, shape(1024), link, cal);
    const double formula_large = algo::formula_estimate(*a, shape(1 << 20), link, cal);
    // Inside: the measurement. At the ends: the measurement (continuous).
    EXPECT_NEAR(algo::estimate(*a, shape(1 << 10), link, cal), 1e-3, 1e-12) << a->name;
    EXPECT_NEAR(algo::estimate(*a, shape(1 << 20), link, cal), 1e-2, 1e-12) << a->name;
    // Above: 1 MiB's time times the formula's growth from 1 MiB.
    for (size_t bytes : {size_t{2} << 20, size_t{64} << 20}) {
      const double want = 1e-2 * algo::formula_estimate(*a, shape(bytes), link, cal) / formula_large;
      EXPECT_NEAR(algo::estimate(*a, shape(bytes), link, cal), want, want * 1e-9) << a->name << " " << bytes;
      EXPECT_GT(want, 1e-2) << a->name;
    }
    // Below: 1 KiB's time times the formula's shrinking to 16 B.
    const double want = 1e-3 * algo::formula_estimate(*a, shape(16), link, cal) / formula_small;
    EXPECT_NEAR(algo::estimate(*a, shape(16), link, cal), want, want * 1e-9) << a->name;
    EXPECT_LT(want, 1e-3) << a->name;
  }
  // Without a measured table: the formula with its corrections.
  algo::Calibration bare;
  bare.corrections = cal.corrections;
  EXPECT_DOUBLE_EQ(algo::estimate(*chain, shape(64 << 20), link, bare),
                   algo::formula_estimate(*chain, shape(64 << 20), link, bare));
  // A call of no bytes has no size to scale by: the formula.
  EXPECT_DOUBLE_EQ(algo::estimate(*chain, shape(0), link, cal), algo::formula_estimate(*chain, shape(0), link, cal));
}

// An algorithm the calibration says nothing about (newer than the tuning file, or than the host kind's tables)
// is estimated at its bare formula times the best calibrated algorithm's estimate / bare formula: it wins where
// its formula beats that algorithm's formula, not because a bare formula undercuts measured times.
TEST(TuningFile, AnAlgorithmWithoutFiguresIsScaledLikeTheBestCalibratedOne) {
  const auto algos = algo::algorithms_for(algo::Collective::Reduce);
  auto index = [&](const char* name) {
    const algo::Algorithm* a = algo::find_algorithm(algo::Collective::Reduce, name);
    EXPECT_NE(a, nullptr) << name;
    return static_cast<size_t>(a - algos.data());
  };
  const size_t binomial = index("binomial"), rsg = index("reduce_scatter_gather"), linear = index("linear");
  algo::LinkModel link;  // the defaults: 20 us per message, 0.4 ns per byte
  auto shape = [](size_t bytes) { return float_call(algo::Collective::Reduce, 4, bytes); };
  auto bare = [&](size_t i, const algo::CallShape& s) {
    return algo::formula_estimate(algos[i], s, link, algo::Calibration{});
  };
  // Measured times far above every formula: with bare formulas beside them, linear would win everywhere.
  std::vector<algo::Calibration> cal(algos.size());
  cal[binomial].measured = {{8, 1e-3}, {double{64 << 20}, 10.0}};
  cal[rsg].measured = {{8, 2e-3}, {double{64 << 20}, 5.0}};
  int linear_chosen = 0;
  for (size_t bytes : {size_t{8}, size_t{4096}, size_t{1} << 20, size_t{64} << 20}) {
    const algo::CallShape s = shape(bytes);
    double est[16];
    const algo::Algorithm& chosen = algo::choose_algorithm(s, link, cal.data(), est);
    EXPECT_DOUBLE_EQ(est[binomial], algo::estimate(algos[binomial], s, link, cal[binomial])) << bytes;
    EXPECT_DOUBLE_EQ(est[rsg], algo::estimate(algos[rsg], s, link, cal[rsg])) << bytes;
    const size_t best = est[binomial] <= est[rsg] ? binomial : rsg;
    const double want = bare(linear, s) * est[best] / bare(best, s);
    EXPECT_NEAR(est[linear], want, want * 1e-12) << bytes;
    EXPECT_LT(bare(linear, s), est[best]) << bytes;  // the bare formula alone would have won
    const bool formula_wins = bare(linear, s) < bare(best, s);
    EXPECT_EQ(&chosen == &algos[linear], formula_wins) << bytes;
    linear_chosen += formula_wins;
  }
  EXPECT_GT(linear_chosen, 0);  // one hop for small messages
  EXPECT_LT(linear_chosen, 4);  // N-1 inputs into the root for large ones
  // Without a calibration: the bare formulas.
  double est[16];
  algo::choose_algorithm(shape(4096), link, nullptr, est);
  for (size_t i = 0; i < algos.size(); ++i) EXPECT_DOUBLE_EQ(est[i], bare(i, shape(4096))) << algos[i].name;
}

// Between two measured world sizes, the tables of both are interpolated in log(time) against log(world size);
// below the smallest or above the largest nothing is extrapolated, and an algorithm measured at only one of
// the two keeps the formula.
// A tuning whose 2- and 4-rank inproc entries time every all_reduce algorithm three ways: with heap buffers
// (ring fastest), with registered ones out of place from 64 KiB (direct fastest) and in place (recursive doubling
// fastest). The fourth host's 2-rank shm measurements have this shape: reading registered memory in place
// reorders the algorithms, and in-place calls order them differently again.
std::string registered_tuning_text() {
  std::string algos;
  for (const algo::Algorithm& a : algo::algorithms_for(algo::Collective::AllReduce)) {
    const std::string name = a.name;
    const double heap = name == "ring" ? 1e-4 : 5e-4;
    const double reg = name == "direct" ? 1e-5 : name == "ring" ? 2e-4 : 5e-4;
    const double in_place = name == "recursive_doubling" ? 1e-5 : 5e-4;
    algos += fmt::format(R"({}"allreduce/{}": {{"latency": 1, "bandwidth": 1, "measured": [[1024, {}], [67108864, {}]],
        "registered": [[65536, {}], [67108864, {}]], "registered_in_place": [[131072, {}], [67108864, {}]]}})",
                         algos.empty() ? "" : ", ", name, heap / 10, heap, reg / 10, reg, in_place / 10, in_place);
  }
  std::string entries;
  for (int n : {2, 4}) {
    entries += fmt::format(R"({}{{"world_size": {}, "alpha_us": 1, "overhead_us": 0.1, "beta_ns_per_byte": 0.1,
        "gamma_ns_per_byte": 0.1, "algorithms": {{{}}}}})",
                           entries.empty() ? "" : ", ", n, algos);
  }
  return R"({"chorus_tuning": 1, "transports": {"inproc": [)" + entries + "]}}";
}

TEST(TuningFile, RegisteredTablesRoundTripAndReplaceTheMeasuredOnesFromTheirFirstSize) {
  const tune::Tuning t = tune::parse_tuning(registered_tuning_text(), "test");
  const tune::Tuning back = tune::parse_tuning(tune::tuning_to_json(t), "again");
  std::vector<algo::Calibration> cal =
      tune::calibration_for(tune::entry_for(&back, "inproc", 2), algo::Collective::AllReduce);
  ASSERT_EQ(cal[0].registered.size(), 2u);  // ring
  EXPECT_DOUBLE_EQ(cal[0].registered[0].first, 65536);
  EXPECT_DOUBLE_EQ(cal[0].registered[1].second, 2e-4);
  EXPECT_DOUBLE_EQ(tune::use_registered(cal), 65536);  // where the registered tables start
  // The heap point at 1 KiB stays (below the registered range); the one at 64 MiB gives way.
  ASSERT_EQ(cal[0].measured.size(), 3u);
  EXPECT_DOUBLE_EQ(cal[0].measured[0].first, 1024);
  EXPECT_DOUBLE_EQ(cal[0].measured[0].second, 1e-5);
  EXPECT_DOUBLE_EQ(cal[0].measured[1].first, 65536);
  EXPECT_DOUBLE_EQ(cal[0].measured[2].second, 2e-4);
  std::vector<algo::Calibration> in_place =
      tune::calibration_for(tune::entry_for(&back, "inproc", 2), algo::Collective::AllReduce);
  EXPECT_DOUBLE_EQ(tune::use_registered(in_place, true), 131072);
  ASSERT_EQ(in_place[0].measured.size(), 3u);  // 1 KiB heap, then the in-place table's two points
  EXPECT_DOUBLE_EQ(in_place[0].measured[1].first, 131072);
  EXPECT_DOUBLE_EQ(in_place[0].measured[2].second, 5e-4);
  // Without registered tables nothing changes and the answer says so.
  std::vector<algo::Calibration> plain(3);
  plain[1].measured = {{1024, 1e-3}};
  EXPECT_EQ(tune::use_registered(plain), 0);
  EXPECT_EQ(plain[1].measured.size(), 1u);

  std::string path = temp_path("badregistered");
  write_file(path, R"({"chorus_tuning": 1, "transports": {"tcp": [{"world_size": 2, "alpha_us": 1,
      "overhead_us": 1, "beta_ns_per_byte": 1, "gamma_ns_per_byte": 1, "algorithms": {
      "allreduce/ring": {"latency": 1, "bandwidth": 1, "registered": [[65536, -1]]}}}]}})");
  try {
    tune::load_tuning_file(path);
    ADD_FAILURE() << "accepted a negative time";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("algorithms.allreduce/ring.registered"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// CallOptions::registered: the automatic choice uses the registered tables where they exist, every buffer
// still gives the right sum, and last_operation() says which tables chose.
TEST(TuningFile, RegisteredCallsChooseFromTheRegisteredTables) {
  std::string path = temp_path("registered");
  write_file(path, registered_tuning_text());
  ScopedEnv file("CHORUS_TUNING_FILE", path);
  CallOptions registered;
  registered.registered = true;
  run_world(2, CommOptions{}, [&](Communicator& comm) {
    EXPECT_EQ(comm.automatic_algorithm("allreduce", 1 << 18, DataType::Float32), "ring");
    EXPECT_EQ(comm.automatic_algorithm("allreduce", 1 << 18, DataType::Float32, registered), "direct");
    // 1 KiB: below the registered tables, the heap table decides either way.
    EXPECT_EQ(comm.automatic_algorithm("allreduce", 256, DataType::Float32, registered), "ring");
    // In place: the in-place tables from their first size (128 KiB here), the heap tables below it and for
    // heap buffers; each answer is what the calls below run.
    EXPECT_EQ(comm.automatic_algorithm("allreduce", 1 << 18, DataType::Float32, registered, true),
              "recursive_doubling");
    EXPECT_EQ(comm.automatic_algorithm("allreduce", 16384, DataType::Float32, registered, true), "ring");
    EXPECT_EQ(comm.automatic_algorithm("allreduce", 16384, DataType::Float32, registered, false), "direct");
    EXPECT_EQ(comm.automatic_algorithm("allreduce", 1 << 18, DataType::Float32, CallOptions{}, true), "ring");

    const size_t count = size_t{1} << 18;  // 1 MiB
    float* reg = static_cast<float*>(mem_alloc(2 * count * sizeof(float)));
    std::vector<float> heap(2 * count);
    // A heap buffer under the registered flag is slower, never wrong: both kinds, out of place then in place.
    for (float* buf : {reg, heap.data()}) {
      for (bool in_place : {false, true}) {
        for (size_t k = 0; k < count; ++k) buf[k] = static_cast<float>(comm.rank() + 1) * static_cast<float>(k % 97);
        float* out = in_place ? buf : buf + count;
        comm.all_reduce(buf, out, count, DataType::Float32, ReduceOp::Sum, registered);
        OperationInfo info = comm.last_operation();
        EXPECT_EQ(info.algorithm, in_place ? "recursive_doubling" : "direct");
        EXPECT_TRUE(info.registered_tables);
        EXPECT_FALSE(info.forced);
        for (size_t k = 0; k < count; k += 7) ASSERT_EQ(out[k], 3.0f * static_cast<float>(k % 97)) << k;
      }
    }
    mem_free(reg);
    // Below the registered tables' first size the heap tables choose, and the call says so; the in-place
    // tables here start at 128 KiB, above the out-of-place ones.
    comm.all_reduce(heap.data(), heap.data() + count, 256, DataType::Float32, ReduceOp::Sum, registered);
    EXPECT_EQ(comm.last_operation().algorithm, "ring");
    EXPECT_FALSE(comm.last_operation().registered_tables);
    comm.all_reduce(heap.data(), heap.data(), 16384, DataType::Float32, ReduceOp::Sum, registered);  // 64 KiB
    EXPECT_EQ(comm.last_operation().algorithm, "ring");
    EXPECT_FALSE(comm.last_operation().registered_tables);
    comm.all_reduce(heap.data(), heap.data() + count, 16384, DataType::Float32, ReduceOp::Sum, registered);
    EXPECT_EQ(comm.last_operation().algorithm, "direct");
    // The same calls without the flag: the heap tables, in the same communicator (the choices are cached apart).
    for (float* out : {heap.data(), heap.data() + count}) {
      comm.all_reduce(heap.data(), out, count, DataType::Float32, ReduceOp::Sum);
      EXPECT_EQ(comm.last_operation().algorithm, "ring");
      EXPECT_FALSE(comm.last_operation().registered_tables);
    }
    comm.all_reduce(heap.data(), heap.data(), count, DataType::Float32, ReduceOp::Sum, registered);
    EXPECT_EQ(comm.last_operation().algorithm, "recursive_doubling");
    // A forced algorithm wins over either table.
    comm.all_reduce(heap.data(), heap.data(), count, DataType::Float32, ReduceOp::Sum,
                    CallOptions{.algorithm = "tree", .registered = true});
    EXPECT_EQ(comm.last_operation().algorithm, "tree");
    EXPECT_TRUE(comm.last_operation().forced);
  });
  // 3 ranks: no table of its own, and the heap tables interpolated between 2 and 4; registered calls choose
  // from those too.
  run_world(3, CommOptions{}, [&](Communicator& comm) {
    std::vector<float> v(size_t{1} << 18, 1.0f);
    comm.all_reduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum, registered);
    EXPECT_FALSE(comm.last_operation().registered_tables);
    EXPECT_EQ(comm.last_operation().algorithm, comm.automatic_algorithm("allreduce", v.size(), DataType::Float32));
    EXPECT_EQ(v[12345], 3.0f);
  });
  std::remove(path.c_str());
}

// Ranks that disagree on CallOptions::registered, or call one in place and one not under it, where that changes
// the choice, fail the call with Error(Mismatch) on both ranks rather than hanging or computing something.
TEST(TuningFile, RanksDisagreeingOnRegisteredGetMismatch) {
  std::string path = temp_path("registered_mismatch");
  write_file(path, registered_tuning_text());
  ScopedEnv file("CHORUS_TUNING_FILE", path);
  for (bool disagree_on_in_place : {false, true}) {
    int mismatches = 0;
    std::mutex mu;
    run_world(2, CommOptions{}, [&](Communicator& comm) {
      std::vector<float> v(size_t{1} << 18, 1.0f), out(v.size());
      CallOptions opts;
      // Either one rank says registered and the other not, or both do and one calls in place.
      opts.registered = disagree_on_in_place || comm.rank() == 0;
      float* recv = disagree_on_in_place && comm.rank() == 1 ? out.data() : v.data();
      try {
        comm.all_reduce(v.data(), recv, v.size(), DataType::Float32, ReduceOp::Sum, opts);
        comm.barrier();
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
        EXPECT_NE(std::string(e.what()).find("registered flag"), std::string::npos) << e.what();
        std::lock_guard<std::mutex> lock(mu);
        ++mismatches;
      }
    });
    EXPECT_EQ(mismatches, 2) << (disagree_on_in_place ? "in place on one rank only" : "registered on one rank only");
  }
  std::remove(path.c_str());
}

// The Reducer's buckets of 64 KiB and more are registered memory, and their all_reduces (in place) say so: with
// the tables above, 4 ranks run recursive doubling (log2(4) x K bytes sent per rank), the in-place choice,
// rather than the ring the heap tables choose or direct, the out-of-place one (both 2 x 3/4 x K).
TEST(TuningFile, ReducerBucketsOfRegisteredSizeChooseFromTheRegisteredTables) {
  std::string path = temp_path("registered_reducer");
  write_file(path, registered_tuning_text());
  ScopedEnv file("CHORUS_TUNING_FILE", path);
  const size_t count = (size_t{1} << 20) / sizeof(float);
  run_world(4, CommOptions{}, [&](Communicator& comm) {
    ReducerOptions o;
    o.first_bucket_bytes = size_t{1} << 20;
    o.bucket_cap_bytes = size_t{1} << 20;
    Reducer r(comm, o);
    std::vector<float> g(count);
    r.add_parameter("w", g.data(), count, DataType::Float32);
    for (size_t k = 0; k < count; ++k) g[k] = static_cast<float>(comm.rank() * 4 + static_cast<int>(k % 8));
    r.mark_ready(size_t{0});
    r.finalize();
    for (size_t k = 0; k < count; k += 13) ASSERT_EQ(g[k], 6.0f + static_cast<float>(k % 8)) << k;  // the mean
    const uint64_t sent = r.traffic().bytes_sent;
    EXPECT_GE(sent, uint64_t{2} << 20);
    EXPECT_LT(sent, (uint64_t{2} << 20) + (uint64_t{64} << 10)) << "ring or direct would send 1.5 MiB";
  });
  std::remove(path.c_str());
}

TEST(TuningFile, WorldSizesBetweenMeasuredOnesInterpolateTheirTables) {
  // Figures under which the formula prefers binomial (costly messages). Measured: binomial wins at 4 ranks,
  // the chain at 8. At 6, with w = log(6/4) / log(8/4) = 0.585, binomial takes 10 us x 4^w = 22.5 us at 1 KiB
  // and the chain 20 us x 0.5^w = 13.3 us (the formula, with 1 ms per message, puts every algorithm in ms).
  const std::string text = R"({"chorus_tuning": 1, "transports": {"inproc": [
      {"world_size": 4, "alpha_us": 1000, "overhead_us": 0.1, "beta_ns_per_byte": 0.001, "gamma_ns_per_byte": 0.1,
       "algorithms": {
        "broadcast/binomial": {"latency": 1, "bandwidth": 1, "measured": [[1024, 1e-5], [1048576, 1e-4]]},
        "broadcast/chain": {"latency": 1, "bandwidth": 1, "measured": [[1024, 2e-5], [1048576, 2e-4]]},
        "broadcast/scatter_allgather": {"latency": 1, "bandwidth": 1, "measured": [[1024, 1e-3]]}}},
      {"world_size": 8, "alpha_us": 1000, "overhead_us": 0.1, "beta_ns_per_byte": 0.001, "gamma_ns_per_byte": 0.1,
       "algorithms": {
        "broadcast/binomial": {"latency": 1, "bandwidth": 1, "measured": [[1024, 4e-5], [1048576, 4e-4]]},
        "broadcast/chain": {"latency": 1, "bandwidth": 1, "measured": [[1024, 1e-5], [2097152, 2e-4]]}}}]}})";
  const tune::Tuning t = tune::parse_tuning(text, "test");
  std::vector<algo::Calibration> cal = tune::calibration_for(tune::entry_for(&t, "inproc", 6),
                                                             algo::Collective::Broadcast);
  for (algo::Calibration& c : cal) c.measured.clear();  // as a communicator of 6 ranks does first
  int lo = -1, hi = -1;
  EXPECT_EQ(tune::interpolate_measured(&t, "inproc", 6, algo::Collective::Broadcast, cal, &lo, &hi), 2);
  EXPECT_EQ(lo, 4);
  EXPECT_EQ(hi, 8);
  const double w = std::log(1.5) / std::log(2.0);
  auto find = [&](const char* name) -> const algo::Calibration& {
    auto algos = algo::algorithms_for(algo::Collective::Broadcast);
    for (size_t i = 0; i < algos.size(); ++i) {
      if (std::string(algos[i].name) == name) return cal[i];
    }
    throw std::runtime_error(name);
  };
  EXPECT_NEAR(find("binomial").measured_time(1024), 1e-5 * std::pow(4.0, w), 1e-15);
  EXPECT_NEAR(find("chain").measured_time(1024), 2e-5 * std::pow(0.5, w), 1e-15);
  // Only the byte counts both tables cover: the chain's 2 MiB point at 8 ranks is beyond the 4-rank table.
  EXPECT_DOUBLE_EQ(find("chain").measured.back().first, 1048576);
  // Measured at 4 ranks only: no table at 6, the formula decides.
  EXPECT_TRUE(find("scatter_allgather").measured.empty());
  // Measured world sizes, and sizes outside them, get nothing.
  for (int n : {4, 8, 3, 9}) {
    std::vector<algo::Calibration> none(cal.size());
    EXPECT_EQ(tune::interpolate_measured(&t, "inproc", n, algo::Collective::Broadcast, none, &lo, &hi), 0) << n;
    EXPECT_EQ(lo, 0);
  }

  // And a communicator uses them: 6 ranks choose the chain at 256 KiB, where 4 ranks measured binomial faster
  // and the formula alone prefers binomial too, and at 64 B, below the interpolated tables, whose order at 1 KiB
  // carries on; 9 ranks (beyond the tables' world sizes) follow the formula.
  std::string path = temp_path("interpolated");
  write_file(path, text);
  ScopedEnv file("CHORUS_TUNING_FILE", path);
  std::string at4, at6, at6_small, at9;
  run_world(4, CommOptions{}, [&](Communicator& comm) {
    if (comm.rank() == 0) at4 = comm.automatic_algorithm("broadcast", 1 << 16, DataType::Float32);
  });
  run_world(6, CommOptions{}, [&](Communicator& comm) {
    if (comm.rank() != 0) return;
    at6 = comm.automatic_algorithm("broadcast", 1 << 16, DataType::Float32);
    at6_small = comm.automatic_algorithm("broadcast", 16, DataType::Float32);  // 64 B: below the tables
  });
  run_world(9, CommOptions{}, [&](Communicator& comm) {
    if (comm.rank() == 0) at9 = comm.automatic_algorithm("broadcast", 1 << 16, DataType::Float32);
  });
  EXPECT_EQ(at4, "binomial");
  EXPECT_EQ(at6, "chain");
  EXPECT_EQ(at6_small, "chain");
  EXPECT_EQ(at9, "binomial");
  std::remove(path.c_str());
}

TEST(TuningFile, MeasuredTablesApplyOnlyInTheCoreRegimeTheyWereMeasuredIn) {
  // Regimes: at most one rank per core, or more; unknown (0) matches either.
  EXPECT_TRUE(tune::same_core_regime(0.5, 1.0));
  EXPECT_TRUE(tune::same_core_regime(2.0, 4.0));
  EXPECT_FALSE(tune::same_core_regime(1.0, 1.5));
  EXPECT_FALSE(tune::same_core_regime(2.0, 0.25));
  EXPECT_TRUE(tune::same_core_regime(0, 3.0));
  EXPECT_TRUE(tune::same_core_regime(3.0, 0));

  // A table that makes the chain win at 64 KiB, where the formula (1 ms per message) prefers binomial, measured
  // either in this host's regime or in the other one. An in-process world of 4 has 4 ranks on this host.
  const double here = 4.0 / base::usable_cores();
  auto text = [](int world, double rpc) {
    return fmt::format(R"({{"chorus_tuning": 1, "transports": {{"inproc": [
      {{"world_size": {}, "ranks_per_core": {}, "alpha_us": 1000, "overhead_us": 0.1, "beta_ns_per_byte": 0.001,
       "gamma_ns_per_byte": 0.1, "algorithms": {{
        "broadcast/binomial": {{"latency": 1, "bandwidth": 1, "measured": [[1024, 4e-5], [1048576, 4e-4]]}},
        "broadcast/chain": {{"latency": 1, "bandwidth": 1, "measured": [[1024, 1e-5], [1048576, 1e-4]]}}}}}}]}}}})",
                       world, rpc);
  };
  const double other = here > 1 ? 0.5 : 2.0;
  // The field survives a write and a read.
  const tune::Tuning parsed = tune::parse_tuning(text(4, other), "test");
  EXPECT_DOUBLE_EQ(parsed.transports.at("inproc").front().ranks_per_core, other);
  const tune::Tuning again = tune::parse_tuning(tune::tuning_to_json(parsed), "again");
  EXPECT_DOUBLE_EQ(again.transports.at("inproc").front().ranks_per_core, other);

  std::string path = temp_path("regime");
  auto choice = [&](const std::string& file) {
    write_file(path, file);
    ScopedEnv env("CHORUS_TUNING_FILE", path);
    std::string chosen;
    run_world(4, CommOptions{}, [&](Communicator& comm) {
      EXPECT_EQ(comm.local_size(), 4);
      EXPECT_DOUBLE_EQ(comm.ranks_per_core(), here);
      if (comm.rank() == 0) chosen = comm.automatic_algorithm("broadcast", 1 << 14, DataType::Float32);
    });
    return chosen;
  };
  EXPECT_EQ(choice(text(4, here)), "chain");      // measured in this host's regime: the table decides
  EXPECT_EQ(choice(text(4, other)), "binomial");  // the other regime: the formula decides
  EXPECT_EQ(choice(text(4, 0)), "chain");         // not recorded (older files): the table decides

  // Interpolation needs both neighbours in this host's regime.
  const tune::Tuning two = tune::parse_tuning(
      R"({"chorus_tuning": 1, "transports": {"inproc": [
        {"world_size": 4, "ranks_per_core": 2, "alpha_us": 1, "overhead_us": 0.1, "beta_ns_per_byte": 0.001,
         "gamma_ns_per_byte": 0.1, "algorithms": {"broadcast/chain": {"latency": 1, "bandwidth": 1,
         "measured": [[1024, 1e-5]]}}},
        {"world_size": 8, "ranks_per_core": 4, "alpha_us": 1, "overhead_us": 0.1, "beta_ns_per_byte": 0.001,
         "gamma_ns_per_byte": 0.1, "algorithms": {"broadcast/chain": {"latency": 1, "bandwidth": 1,
         "measured": [[1024, 2e-5]]}}}]}})",
      "two");
  std::vector<algo::Calibration> cal(algo::algorithms_for(algo::Collective::Broadcast).size());
  int lo = 0, hi = 0;
  EXPECT_EQ(tune::interpolate_measured(&two, "inproc", 6, algo::Collective::Broadcast, cal, &lo, &hi, 3.0), 1);
  EXPECT_EQ(tune::interpolate_measured(&two, "inproc", 6, algo::Collective::Broadcast, cal, &lo, &hi, 0.375), 0);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(tune::interpolate_measured(&two, "inproc", 6, algo::Collective::Broadcast, cal, &lo, &hi), 1);
  std::remove(path.c_str());
}

// Entries measured on two kinds of host for one transport and world size: the copy rate (CHORUS_COPY_GBPS here,
// measured by rank 0 otherwise) picks the nearer kind, the same one on every rank.
TEST(TuningFile, EntriesFromSeveralKindsOfHostApplyToTheNearestKind) {
  EXPECT_DOUBLE_EQ(tune::host_distance(10, 10), 0.0);
  EXPECT_NEAR(tune::host_distance(40, 10), std::log(4.0), 1e-12);
  EXPECT_NEAR(tune::host_distance(10, 40), std::log(4.0), 1e-12);
  EXPECT_DOUBLE_EQ(tune::host_distance(0, 40), 0.0);  // unknown matches any host
  EXPECT_DOUBLE_EQ(tune::host_distance(40, 0), 0.0);

  // The chain wins at 16 KiB on the slow-copy host (6 GB/s), binomial on the fast one (40 GB/s); alpha tells
  // the entries apart, and at a millisecond or more per message keeps the untabled algorithms out.
  auto entry = [](int world, double copy, double alpha_us, double binomial, double chain) {
    return fmt::format(R"({{"world_size": {}, "copy_gbps": {}, "alpha_us": {}, "overhead_us": 0.1,
       "beta_ns_per_byte": 0.001, "gamma_ns_per_byte": 0.1, "algorithms": {{
        "broadcast/binomial": {{"latency": 1, "bandwidth": 1, "measured": [[1024, {}], [1048576, {}]]}},
        "broadcast/chain": {{"latency": 1, "bandwidth": 1, "measured": [[1024, {}], [1048576, {}]]}}}}}})",
                       world, copy, alpha_us, binomial, 10 * binomial, chain, 10 * chain);
  };
  const std::string text = fmt::format(R"({{"chorus_tuning": 1, "transports": {{"inproc": [{}, {}, {}, {}]}}}})",
                                       entry(4, 6, 1000, 4e-5, 1e-5), entry(4, 40, 2000, 1e-5, 4e-5),
                                       entry(8, 6, 3000, 8e-5, 2e-5), entry(8, 40, 4000, 2e-5, 8e-5));
  const tune::Tuning t = tune::parse_tuning(text, "kinds");
  EXPECT_TRUE(tune::has_host_kinds(t));
  EXPECT_TRUE(tune::distinguishes_hosts(&t));
  const tune::Tuning again = tune::parse_tuning(tune::tuning_to_json(t), "again");
  EXPECT_DOUBLE_EQ(again.transports.at("inproc")[1].copy_gbps, 40.0);
  EXPECT_FALSE(tune::has_host_kinds(
      tune::parse_tuning(fmt::format(R"({{"chorus_tuning": 1, "transports": {{"inproc": [{}, {}]}}}})",
                                     entry(4, 6, 1000, 4e-5, 1e-5), entry(8, 40, 4000, 2e-5, 8e-5)),
                         "one kind per world size")));

  EXPECT_DOUBLE_EQ(tune::entry_for(&t, "inproc", 4, 5.0).link.alpha, 1e-3);
  EXPECT_DOUBLE_EQ(tune::entry_for(&t, "inproc", 4, 30.0).link.alpha, 2e-3);
  EXPECT_DOUBLE_EQ(tune::entry_for(&t, "inproc", 4, 0).link.alpha, 1e-3);  // unknown: the first
  EXPECT_DOUBLE_EQ(tune::entry_for(&t, "inproc", 7, 100.0).link.alpha, 4e-3);
  // The geometric middle between 6 and 40 is 15.5: the nearer kind by ratio, not by difference.
  EXPECT_DOUBLE_EQ(tune::entry_for(&t, "inproc", 4, 14.0).link.alpha, 1e-3);
  EXPECT_DOUBLE_EQ(tune::entry_for(&t, "inproc", 4, 17.0).link.alpha, 2e-3);

  // Interpolating for 6 ranks takes both neighbours from the nearer kind.
  const double w = std::log(6.0 / 4) / std::log(8.0 / 4);
  for (double copy : {6.0, 40.0}) {
    std::vector<algo::Calibration> cal(algo::algorithms_for(algo::Collective::Broadcast).size());
    int lo = 0, hi = 0;
    ASSERT_EQ(tune::interpolate_measured(&t, "inproc", 6, algo::Collective::Broadcast, cal, &lo, &hi, 0, copy), 2);
    const double at4 = copy < 10 ? 1e-5 : 4e-5, at8 = copy < 10 ? 2e-5 : 8e-5;  // the chain at 1 KiB
    const double expect = std::exp((1 - w) * std::log(at4) + w * std::log(at8));
    bool found = false;
    for (size_t i = 0; i < cal.size(); ++i) {
      if (algo::algorithms_for(algo::Collective::Broadcast)[i].name != std::string_view("chain")) continue;
      found = true;
      ASSERT_FALSE(cal[i].measured.empty());
      EXPECT_NEAR(cal[i].measured.front().second, expect, expect * 1e-9) << copy;
    }
    EXPECT_TRUE(found);
  }

  // Whole communicators: the choice follows CHORUS_COPY_GBPS, every rank reports rank 0's figure.
  std::string path = temp_path("kinds");
  write_file(path, text);
  ScopedEnv file("CHORUS_TUNING_FILE", path);
  for (const auto& [copy, want] : {std::pair<const char*, const char*>{"6", "chain"},
                                   {"40", "binomial"},
                                   {"12.5", "chain"},
                                   {"200", "binomial"}}) {
    ScopedEnv rate("CHORUS_COPY_GBPS", copy);
    std::vector<std::string> chosen(4);
    std::vector<double> seen(4);
    std::string source;
    run_world(4, CommOptions{}, [&](Communicator& comm) {
      chosen[static_cast<size_t>(comm.rank())] = comm.automatic_algorithm("broadcast", 1 << 12, DataType::Float32);
      seen[static_cast<size_t>(comm.rank())] = comm.copy_rate_gbps();
      if (comm.rank() == 0) source = comm.tuning_source();
    });
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(chosen[static_cast<size_t>(r)], want) << copy << " rank " << r;
      EXPECT_DOUBLE_EQ(seen[static_cast<size_t>(r)], std::strtod(copy, nullptr)) << r;
    }
    EXPECT_NE(source.find("GB/s"), std::string::npos) << source;
  }
  // Not set: rank 0 measures this host, and every rank gets its figure (ctest sets it for every test:
  // tests/CMakeLists.txt).
  {
    ::unsetenv("CHORUS_COPY_GBPS");
    std::vector<double> seen(3);
    run_world(3, CommOptions{},
              [&](Communicator& comm) { seen[static_cast<size_t>(comm.rank())] = comm.copy_rate_gbps(); });
    EXPECT_GT(seen[0], 0.05);
    EXPECT_LT(seen[0], 10000.0);
    EXPECT_EQ(seen[1], seen[0]);
    EXPECT_EQ(seen[2], seen[0]);
    // As published (three decimals): the probe's figure once past the tuning's highest line, where rank 0
    // stopped copying (a second call that asks no more copies nothing more).
    EXPECT_NEAR(seen[0], base::copy_rate_gbps(tune::copy_rate_settles_at(&t)), 0.001);
  }
  // A bad figure fails creation, naming the variable, before anything is published.
  for (const char* bad : {"fast", "0", "-3", "4x", "nan"}) {
    ScopedEnv rate("CHORUS_COPY_GBPS", bad);
    const std::string what = expect_error(ErrorCode::InvalidArgument, [] {
      (void)Communicator::create(std::make_shared<MemoryStore>(), 0, 2, CommOptions{});
    });
    EXPECT_NE(what.find("CHORUS_COPY_GBPS"), std::string::npos) << "'" << bad << "': " << what;
  }
  std::remove(path.c_str());
}

// Above copy_rate_settles_at no entry choice changes with the copy rate, and just below it one does: so the
// communicator's probe may stop copying once its fastest copy reads that much.
TEST(TuningFile, CopyRateSettlesAboveTheHighestLineBetweenKinds) {
  // Any copy rate above the built-in tuning's line chooses every entry as a very fast host does; just under
  // it some entry differs. World sizes 1 to 20 cover every measured one, the ties between two of them and
  // beyond.
  const double line = tune::copy_rate_settles_at(nullptr);
  ASSERT_GT(line, 0.0);
  bool differs_below = false;
  for (const char* transport : {"shm", "tcp"}) {
    for (int world = 1; world <= 20; ++world) {
      const tune::LinkEntry* fast = &tune::entry_for(nullptr, transport, world, 1e6);
      for (double above : {line * (1 + 1e-9), line * 1.5, line * 10}) {
        EXPECT_EQ(&tune::entry_for(nullptr, transport, world, above), fast)
            << transport << " " << world << " " << above;
      }
      differs_below |= &tune::entry_for(nullptr, transport, world, line * (1 - 1e-9)) != fast;
    }
  }
  EXPECT_TRUE(differs_below);

  // A file's transports replace the built-in ones: with every transport in the file, its own lines count. Its
  // kinds at 4 ranks are 6, 40 and 90 GB/s: 90 is nearest from sqrt(40 * 90) = 60 up.
  auto entry = [](int world, double copy, double alpha_us) {
    return fmt::format(R"({{"world_size": {}, "copy_gbps": {}, "alpha_us": {}, "overhead_us": 0.1,
       "beta_ns_per_byte": 0.001, "gamma_ns_per_byte": 0.1}})",
                       world, copy, alpha_us);
  };
  const tune::Tuning t = tune::parse_tuning(
      fmt::format(R"({{"chorus_tuning": 1, "transports": {{"tcp": [{}, {}, {}, {}, {}], "shm": [{}, {}]}}}})",
                  entry(2, 6, 1), entry(2, 40, 2), entry(4, 6, 3), entry(4, 40, 4), entry(4, 90, 5), entry(2, 10, 6),
                  entry(3, 10, 7)),
      "three kinds");
  EXPECT_NEAR(tune::copy_rate_settles_at(&t), 60.0, 1e-9);
  EXPECT_DOUBLE_EQ(tune::entry_for(&t, "tcp", 4, 59.9).link.alpha, 4e-6);
  EXPECT_DOUBLE_EQ(tune::entry_for(&t, "tcp", 4, 60.1).link.alpha, 5e-6);
  // One kind per world size (shm): nothing to settle there. With only tcp in the file, the built-in shm
  // entries still depend on the copy rate, and their line counts too.
  const tune::Tuning tcp_only = tune::parse_tuning(
      fmt::format(R"({{"chorus_tuning": 1, "transports": {{"tcp": [{}, {}]}}}})", entry(2, 6, 1), entry(2, 40, 2)),
      "tcp only");
  EXPECT_GE(tune::copy_rate_settles_at(&tcp_only), std::sqrt(6.0 * 40));
  EXPECT_GT(tune::copy_rate_settles_at(&tcp_only), std::sqrt(6.0 * 40)) << "the built-in shm entries' line";
  const tune::Tuning one_kind =
      tune::parse_tuning(fmt::format(R"({{"chorus_tuning": 1, "transports": {{"tcp": [{}], "shm": [{}]}}}})",
                                     entry(2, 6, 1), entry(2, 40, 2)),
                         "one kind");
  EXPECT_EQ(tune::copy_rate_settles_at(&one_kind), 0.0);

  // Six ranks, as near to the entries for 4 as to those for 8: the smaller world size's, and of its kinds the
  // one nearest the copy rate, whatever the kinds measured at 8 ranks.
  const tune::Tuning tie =
      tune::parse_tuning(fmt::format(R"({{"chorus_tuning": 1, "transports": {{"tcp": [{}, {}, {}, {}]}}}})",
                                     entry(8, 6, 1), entry(8, 45, 2), entry(4, 6, 3), entry(4, 40, 4)),
                         "tie");
  for (double copy : {0.0, 5.0, 20.0, 44.0, 100.0}) {
    EXPECT_EQ(tune::entry_for(&tie, "tcp", 6, copy).world_size, 4) << copy;
  }
  EXPECT_DOUBLE_EQ(tune::entry_for(&tie, "tcp", 6, 5.0).link.alpha, 3e-6);
  EXPECT_DOUBLE_EQ(tune::entry_for(&tie, "tcp", 6, 44.0).link.alpha, 4e-6);
}

// chorus-tune keeps the entries of other kinds of host: a measurement replaces only the entry of its world size
// measured on a host copying within a factor of 2 of this one.
TEST(Calibration, UpdatingATuningFileKeepsOtherKindsOfHost) {
  std::string path = temp_path("update-kinds");
  std::remove(path.c_str());
  LinkFigures f = link_figures(2, "tcp");
  f.copy_gbps = 6;
  update_tuning_file(path, f);
  f.copy_gbps = 40;
  f.alpha_us = 2;
  update_tuning_file(path, f);  // another kind: kept beside the first
  f.copy_gbps = 30;
  f.alpha_us = 3;
  update_tuning_file(path, f);  // the same kind as 40: replaces it
  f.world_size = 3;
  update_tuning_file(path, f);  // another world size
  const tune::Tuning t = tune::load_tuning_file(path);
  const auto& e = t.transports.at("tcp");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].world_size, 2);
  EXPECT_DOUBLE_EQ(e[0].copy_gbps, 6.0);
  EXPECT_DOUBLE_EQ(e[0].link.alpha, 1e-6);
  EXPECT_EQ(e[1].world_size, 2);
  EXPECT_DOUBLE_EQ(e[1].copy_gbps, 30.0);
  EXPECT_DOUBLE_EQ(e[1].link.alpha, 3e-6);
  EXPECT_EQ(e[2].world_size, 3);
  std::remove(path.c_str());
}

TEST(Calibration, ChorusTuneWritesAFileTheLibraryLoads) {
  std::string path = temp_path("measured");
  std::vector<Child> job{spawn({std::string(CHORUS_BIN_DIR) + "/chorus-run", "-n", "2", "--",
                                std::string(CHORUS_BIN_DIR) + "/chorus-tune", "-o", path, "--iters", "100"},
                               {"CHORUS_TRANSPORT=tcp"}, true)};
  wait_all(job, std::chrono::seconds(120));
  ASSERT_TRUE(WIFEXITED(job[0].status) && WEXITSTATUS(job[0].status) == 0) << job[0].output;
  EXPECT_NE(job[0].output.find("alpha_us"), std::string::npos) << job[0].output;
  EXPECT_NE(job[0].output.find("stolen by its hypervisor while measuring"), std::string::npos) << job[0].output;
  tune::Tuning t = tune::load_tuning_file(path);
  ASSERT_EQ(t.transports.count("tcp"), 1u);
  const algo::LinkModel& l = t.transports.at("tcp").at(0).link;
  EXPECT_EQ(t.transports.at("tcp").at(0).world_size, 2);
  // And which kind of host it was: rank 0's copy rate.
  EXPECT_GT(t.transports.at("tcp").at(0).copy_gbps, 0.05);
  // It records how crowded the host was: both ranks here, over the CPUs this process may use.
  EXPECT_DOUBLE_EQ(t.transports.at("tcp").at(0).ranks_per_core, 2.0 / base::usable_cores());
  // Loopback on any machine: a hop well under a millisecond, over 100 MB/s, a reduction over 100 MB/s.
  EXPECT_GT(l.alpha + 2 * l.overhead, 0.0);
  EXPECT_LT(l.alpha + 2 * l.overhead, 1e-3);
  EXPECT_GT(l.beta, 0.0);
  EXPECT_LT(l.beta, 1e-8);
  EXPECT_GT(l.gamma, 0.0);
  EXPECT_LT(l.gamma, 1e-8);
  // A second run for another world size adds an entry instead of replacing the first.
  std::vector<Child> job3{spawn({std::string(CHORUS_BIN_DIR) + "/chorus-run", "-n", "3", "--",
                                 std::string(CHORUS_BIN_DIR) + "/chorus-tune", "-o", path, "--iters", "100",
                                 "--no-choices"},
                                {"CHORUS_TRANSPORT=tcp"}, true)};
  wait_all(job3, std::chrono::seconds(120));
  ASSERT_TRUE(WIFEXITED(job3[0].status) && WEXITSTATUS(job3[0].status) == 0) << job3[0].output;
  EXPECT_EQ(tune::load_tuning_file(path).transports.at("tcp").size(), 2u);
  std::remove(path.c_str());
}

// chorus-tune --tables times every algorithm at every power of 2 and writes the times as measured tables,
// which the library then believes: at every measured size its choice is the table's fastest algorithm.
TEST(Calibration, ChorusTuneTablesWritesMeasuredTablesTheLibraryChoosesFrom) {
  std::string path = temp_path("tables");
  std::remove(path.c_str());
  std::vector<Child> job{spawn(
      {std::string(CHORUS_BIN_DIR) + "/chorus-run", "-n", "2", "--", std::string(CHORUS_BIN_DIR) + "/chorus-tune", "-o",
       path, "--iters", "100", "--no-choices", "--tables", "--table-max-bytes", "4096", "--max-bytes", "4096"},
      {"CHORUS_TRANSPORT=shm"}, true)};
  wait_all(job, std::chrono::seconds(300));
  ASSERT_TRUE(WIFEXITED(job[0].status) && WEXITSTATUS(job[0].status) == 0) << job[0].output;
  EXPECT_NE(job[0].output.find("measured tables: 10 sizes (8 B to 4096 B)"), std::string::npos) << job[0].output;
  const tune::Tuning t = tune::load_tuning_file(path);
  ASSERT_EQ(t.transports.count("shm"), 1u);
  const tune::LinkEntry& e = t.transports.at("shm").at(0);
  int tables = 0;
  for (algo::Collective c : {algo::Collective::AllReduce, algo::Collective::AllGather, algo::Collective::ReduceScatter,
                             algo::Collective::Broadcast, algo::Collective::Reduce, algo::Collective::AllToAll}) {
    const std::vector<algo::Calibration> cal = tune::calibration_for(e, c);
    const auto algs = algo::algorithms_for(c);
    for (size_t i = 0; i < algs.size(); ++i) {
      if (algs[i].applicable) continue;  // hierarchical: not timed on one host
      SCOPED_TRACE(fmt::format("{}/{}", algo::collective_name(c), algs[i].name));
      ASSERT_EQ(cal[i].measured.size(), 10u);
      for (size_t k = 0; k < cal[i].measured.size(); ++k) {
        EXPECT_DOUBLE_EQ(cal[i].measured[k].first, 8.0 * static_cast<double>(1u << k));
        EXPECT_GT(cal[i].measured[k].second, 0.0);
        EXPECT_LT(cal[i].measured[k].second, 0.1);  // a call of at most 4 KiB on one host
      }
      // The fit's corrections, at the powers of 4 from 8 B.
      ASSERT_EQ(cal[i].corrections.size(), 5u);
      EXPECT_DOUBLE_EQ(cal[i].corrections.back().first, 2048.0);
      ++tables;
    }
    // At every measured size the choice is the fastest measured algorithm.
    for (int k = 0; k < 10; ++k) {
      const size_t bytes = size_t{8} << k;
      algo::CallShape s;
      s.coll = c;
      s.size = 2;
      s.esize = 4;
      const bool per_block =
          c == algo::Collective::AllGather || c == algo::Collective::ReduceScatter || c == algo::Collective::AllToAll;
      s.count = bytes / 4 / (per_block ? 2 : 1);
      if (s.count == 0) continue;
      double best = 1e9;
      std::string fastest;
      for (size_t i = 0; i < algs.size(); ++i) {
        if (!algs[i].applicable && !cal[i].measured.empty() && cal[i].measured[k].second < best) {
          best = cal[i].measured[k].second;
          fastest = algs[i].name;
        }
      }
      EXPECT_EQ(algo::choose_algorithm(s, e.link, cal.data()).name, fastest)
          << algo::collective_name(c) << " " << bytes << " B";
    }
  }
  EXPECT_GE(tables, 15);
  std::remove(path.c_str());
}

// The tables travel through the file as they were measured.
TEST(Calibration, UpdatingATuningFileKeepsTheMeasuredTables) {
  std::string path = temp_path("update-tables");
  std::remove(path.c_str());
  LinkFigures f = link_figures(2, "tcp");
  AlgorithmFit ring;
  ring.collective = "allreduce";
  ring.algorithm = "ring";
  ring.corrections = {{8, 1.5}, {32, 0.75}};
  ring.measured = {{8, 2e-6}, {16, 2.5e-6}, {32, 3e-6}};
  f.algorithms.push_back(ring);
  update_tuning_file(path, f);
  const tune::Tuning t = tune::load_tuning_file(path);
  const algo::Calibration& c = t.transports.at("tcp").at(0).algorithms.at("allreduce/ring");
  EXPECT_EQ(c.measured, ring.measured);
  EXPECT_EQ(c.corrections, ring.corrections);
  std::remove(path.c_str());
}

// --merge: each run's table is averaged with the file's, weighted by the runs behind each; a plain update
// starts over.
TEST(Calibration, MergingTablesAveragesRunsByTheirCount) {
  std::string path = temp_path("merge-tables");
  std::remove(path.c_str());
  LinkFigures f = link_figures(4, "shm");
  f.copy_gbps = 10;
  AlgorithmFit chain;
  chain.collective = "broadcast";
  chain.algorithm = "chain";
  auto run = [&](double at8, double at16, TablesUpdate how) {
    chain.measured = {{8, at8}, {16, at16}};
    f.algorithms = {chain};
    const int runs = update_tuning_file(path, f, how);
    const tune::Tuning t = tune::load_tuning_file(path);
    EXPECT_EQ(t.transports.at("shm").size(), 1u);
    const tune::LinkEntry& e = t.transports.at("shm").at(0);
    EXPECT_EQ(e.table_runs, runs);
    return std::make_pair(runs, e.algorithms.at("broadcast/chain").measured);
  };
  auto [runs1, t1] = run(1e-6, 4e-6, TablesUpdate::kMerge);  // nothing to merge with yet
  EXPECT_EQ(runs1, 1);
  EXPECT_DOUBLE_EQ(t1[0].second, 1e-6);
  auto [runs2, t2] = run(4e-6, 1e-6, TablesUpdate::kMerge);
  EXPECT_EQ(runs2, 2);
  EXPECT_NEAR(t2[0].second, 2e-6, 1e-18);  // sqrt(1e-6 x 4e-6)
  EXPECT_NEAR(t2[1].second, 2e-6, 1e-18);
  auto [runs3, t3] = run(16e-6, 16e-6, TablesUpdate::kMerge);
  EXPECT_EQ(runs3, 3);
  EXPECT_NEAR(t3[0].second, std::cbrt(2e-6 * 2e-6 * 16e-6), 1e-18);  // two runs' weight against one
  // Another kind of host (copy rate 4 times off) is an entry of its own, and merges with nothing.
  f.copy_gbps = 40;
  EXPECT_EQ(update_tuning_file(path, f, TablesUpdate::kMerge), 1);
  f.copy_gbps = 10;
  EXPECT_EQ(tune::load_tuning_file(path).transports.at("shm").size(), 2u);
  // Replacing starts over: this run alone.
  f.algorithms[0].measured = {{8, 5e-6}, {16, 5e-6}};
  EXPECT_EQ(update_tuning_file(path, f, TablesUpdate::kReplace), 1);
  const tune::Tuning t = tune::load_tuning_file(path);
  EXPECT_DOUBLE_EQ(t.transports.at("shm").at(0).algorithms.at("broadcast/chain").measured[0].second, 5e-6);
  // Figures without tables record no runs.
  f.algorithms[0].measured.clear();
  EXPECT_EQ(update_tuning_file(path, f, TablesUpdate::kMerge), 0);
  std::remove(path.c_str());
}

// Smoothing: each ratio to the size's fastest time is averaged (in log) with the algorithm's ratios at half and
// twice the size at the given weight, then scaled by the size's fastest time.
TEST(SmoothTables, OneNoisySizeFlipsBackAndACrossoverStays) {
  using Table = std::vector<std::pair<double, double>>;
  // B looks fastest at 16 B alone, against both neighbours.
  std::vector<Table> noisy = {{{8, 1.0}, {16, 1.0}, {32, 1.0}}, {{8, 2.0}, {16, 0.9}, {32, 2.0}}};
  tune::smooth_tables(noisy, 0.5);
  const double a16 = 0.9 * std::exp((std::log(1 / 0.9) + 0.5 * 0 + 0.5 * 0) / 2);
  const double b16 = 0.9 * std::exp((0 + 0.5 * std::log(2.0) + 0.5 * std::log(2.0)) / 2);
  EXPECT_NEAR(noisy[0][1].second, a16, 1e-12);
  EXPECT_NEAR(noisy[1][1].second, b16, 1e-12);
  EXPECT_LT(noisy[0][1].second, noisy[1][1].second);  // A is the choice at 16 B again
  // At the ends only one neighbour counts.
  EXPECT_NEAR(noisy[0][0].second, 1.0 * std::exp((0 + 0.5 * std::log(1 / 0.9)) / 1.5), 1e-12);
  EXPECT_NEAR(noisy[1][2].second, 1.0 * std::exp((std::log(2.0) + 0.5 * 0) / 1.5), 1e-12);

  // A crossover both sides agree on stays where it was measured; the fastest of a size and both its
  // neighbours keeps its time.
  std::vector<Table> cross = {{{8, 1.0}, {16, 1.0}, {32, 3.0}, {64, 3.0}}, {{8, 2.0}, {16, 2.0}, {32, 1.0}, {64, 1.0}}};
  tune::smooth_tables(cross, 0.5);
  EXPECT_LT(cross[0][1].second, cross[1][1].second);
  EXPECT_GT(cross[0][2].second, cross[1][2].second);
  EXPECT_DOUBLE_EQ(cross[0][0].second, 1.0);
  EXPECT_DOUBLE_EQ(cross[1][3].second, 1.0);

  // Weight 0 leaves the tables alone.
  std::vector<Table> same = {{{8, 1.0}, {16, 1.0}}, {{8, 2.0}, {16, 0.5}}};
  const std::vector<Table> before = same;
  tune::smooth_tables(same, 0);
  EXPECT_EQ(same, before);
}

// chorus-tune --choices-for measures nothing and prints, for each "collective count" line, the choice the
// library makes under the tuning in force: here a file whose measured tables make the chain the fastest
// broadcast from 1 KiB to 1 MiB, and the library's own automatic_algorithm as the reference for every line.
TEST(Calibration, ChorusTuneChoicesForPrintsTheLibrarysChoiceAndMeasuresNothing) {
  std::string tuning = temp_path("choices-tuning"), shapes = temp_path("choices-shapes");
  // all_reduce: the ring fastest on heap buffers and on registered ones out of place, recursive doubling in
  // place on registered ones, from 64 KiB.
  std::string allreduce;
  for (const algo::Algorithm& a : algo::algorithms_for(algo::Collective::AllReduce)) {
    const std::string name = a.name;
    const double heap = name == "ring" ? 1e-4 : 5e-4, in_place = name == "recursive_doubling" ? 1e-4 : 5e-4;
    allreduce += fmt::format(R"({}"allreduce/{}": {{"latency": 1, "bandwidth": 1,
        "measured": [[1024, {}], [1048576, {}]], "registered": [[65536, {}], [1048576, {}]],
        "registered_in_place": [[65536, {}], [1048576, {}]]}})",
                             allreduce.empty() ? "" : ", ", name, heap, heap, heap, heap, in_place, in_place);
  }
  write_file(tuning, R"({"chorus_tuning": 1, "transports": {"tcp": [{"world_size": 2, "alpha_us": 1000,
      "overhead_us": 0.1, "beta_ns_per_byte": 0.001, "gamma_ns_per_byte": 0.1, "algorithms": {
        "broadcast/binomial": {"latency": 1, "bandwidth": 1, "measured": [[1024, 0.002], [1048576, 0.02]],
                               "registered": [[65536, 0.0005], [1048576, 0.005]]},
        "broadcast/chain": {"latency": 1, "bandwidth": 1, "measured": [[1024, 0.001], [1048576, 0.01]]},
        "broadcast/scatter_allgather": {"latency": 1, "bandwidth": 1, "measured": [[1024, 0.003], [1048576, 0.03]]},
        "broadcast/hierarchical": {"latency": 1, "bandwidth": 1, "measured": [[1024, 0.003], [1048576, 0.03]]},
        )" + allreduce + "}}]}}");
  const std::vector<std::pair<std::string, size_t>> lines = {{"broadcast", 65536}, {"broadcast", 4},
                                                             {"allreduce", 1000},  {"allreduce", 65536},
                                                             {"alltoall", 1},      {"reduce_scatter", 8}};
  std::string text = "# collective count\n\n";
  for (const auto& [coll, count] : lines) text += fmt::format("{} {}\n", coll, count);
  write_file(shapes, text);
  auto run_tool = [&](const std::string& file, bool registered = false, bool in_place = false) {
    std::vector<std::string> argv{std::string(CHORUS_BIN_DIR) + "/chorus-run", "-n", "2", "--no-prefix", "--",
                                  std::string(CHORUS_BIN_DIR) + "/chorus-tune", "--choices-for", file};
    if (registered) argv.push_back("--registered");
    if (in_place) argv.push_back("--in-place");
    std::vector<Child> job{spawn(argv, {"CHORUS_TRANSPORT=tcp", "CHORUS_TUNING_FILE=" + tuning}, true)};
    wait_all(job, std::chrono::seconds(120));
    return job[0];
  };
  Child ok = run_tool(shapes);
  ASSERT_TRUE(WIFEXITED(ok.status) && WEXITSTATUS(ok.status) == 0) << ok.output;
  EXPECT_NE(ok.output.find("# chorus-tune choices: tcp, 2 ranks"), std::string::npos) << ok.output;
  EXPECT_EQ(ok.output.find("alpha_us"), std::string::npos) << "it measured: " << ok.output;
  EXPECT_NE(ok.output.find("broadcast 65536 chain\n"), std::string::npos) << ok.output;  // the measured table

  std::vector<std::string> expected;
  ::setenv("CHORUS_TUNING_FILE", tuning.c_str(), 1);
  CommOptions options;
  options.transport = TransportKind::Tcp;
  run_world(2, options, [&](Communicator& comm) {
    if (comm.rank() != 0) return;
    for (const auto& [coll, count] : lines) {
      expected.push_back(
          fmt::format("{} {} {}\n", coll, count, comm.automatic_algorithm(coll, count, DataType::Float32)));
    }
  });
  ::unsetenv("CHORUS_TUNING_FILE");
  ASSERT_EQ(expected.size(), lines.size());
  for (const std::string& line : expected) EXPECT_NE(ok.output.find(line), std::string::npos) << line << ok.output;
  // --registered: the choices of calls with CallOptions::registered, from the registered table where it has one.
  Child reg = run_tool(shapes, true);
  ASSERT_TRUE(WIFEXITED(reg.status) && WEXITSTATUS(reg.status) == 0) << reg.output;
  EXPECT_NE(reg.output.find("registered buffers (CallOptions::registered, out of place)"), std::string::npos)
      << reg.output;
  EXPECT_NE(reg.output.find("broadcast 65536 binomial\n"), std::string::npos) << reg.output;
  EXPECT_NE(reg.output.find("broadcast 4 chain\n"), std::string::npos) << reg.output;  // 16 B: below that table
  // --in-place: a broadcast has no in-place tables of its own, so the registered out-of-place ones choose.
  Child reg_in_place = run_tool(shapes, true, true);
  ASSERT_TRUE(WIFEXITED(reg_in_place.status) && WEXITSTATUS(reg_in_place.status) == 0) << reg_in_place.output;
  EXPECT_NE(reg_in_place.output.find("registered buffers (CallOptions::registered, in place)"), std::string::npos)
      << reg_in_place.output;
  EXPECT_NE(reg_in_place.output.find("broadcast 65536 binomial\n"), std::string::npos) << reg_in_place.output;
  // An all_reduce of 256 KiB: the ring everywhere but in place on registered buffers.
  EXPECT_NE(ok.output.find("allreduce 65536 ring\n"), std::string::npos) << ok.output;
  EXPECT_NE(reg.output.find("allreduce 65536 ring\n"), std::string::npos) << reg.output;
  EXPECT_NE(reg_in_place.output.find("allreduce 65536 recursive_doubling\n"), std::string::npos) << reg_in_place.output;
  EXPECT_NE(reg_in_place.output.find("allreduce 1000 ring\n"), std::string::npos) << reg_in_place.output;  // 4 KB
  Child heap_in_place = run_tool(shapes, false, true);
  ASSERT_TRUE(WIFEXITED(heap_in_place.status) && WEXITSTATUS(heap_in_place.status) == 0) << heap_in_place.output;
  EXPECT_NE(heap_in_place.output.find("tcp, 2 ranks, in place\n"), std::string::npos) << heap_in_place.output;
  EXPECT_NE(heap_in_place.output.find("allreduce 65536 ring\n"), std::string::npos) << heap_in_place.output;

  // A malformed line is named, and so is an unknown collective; every rank still finishes.
  write_file(shapes, "allreduce 8\nallreduce eight\n");
  Child malformed = run_tool(shapes);
  EXPECT_TRUE(WIFEXITED(malformed.status) && WEXITSTATUS(malformed.status) != 0) << malformed.output;
  EXPECT_NE(malformed.output.find(":2: expected \"collective count\""), std::string::npos) << malformed.output;
  write_file(shapes, "gossip 8\n");
  Child unknown = run_tool(shapes);
  EXPECT_TRUE(WIFEXITED(unknown.status) && WEXITSTATUS(unknown.status) != 0) << unknown.output;
  EXPECT_NE(unknown.output.find("unknown collective 'gossip'"), std::string::npos) << unknown.output;
  std::remove(tuning.c_str());
  std::remove(shapes.c_str());
}

// The host's CPU time, against /proc/stat read independently between two readings, and the stolen share's
// arithmetic on made-up readings.
TEST(HostCpuTime, ReadsProcStatAndTheStolenShareIsTheStolenPartOfTheTicksBetween) {
  const std::optional<HostCpuTime> before = host_cpu_time();
  ASSERT_TRUE(before.has_value()) << "this test runs on Linux, which has /proc/stat";
  // The reference: the "cpu" line's first eight fields, summed, and the eighth (steal).
  std::ifstream stat("/proc/stat");
  std::string label;
  uint64_t v[8] = {}, total = 0;
  stat >> label;
  ASSERT_EQ(label, "cpu");
  for (uint64_t& x : v) {
    stat >> x;
    total += x;
  }
  // Busy for a while, so that ticks pass.
  volatile uint64_t spin = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < until) spin = spin + 1;
  const std::optional<HostCpuTime> after = host_cpu_time();
  ASSERT_TRUE(after.has_value());
  EXPECT_LE(before->total_ticks, total);
  EXPECT_LE(total, after->total_ticks);
  EXPECT_LE(before->stolen_ticks, v[7]);
  EXPECT_LE(v[7], after->stolen_ticks);
  EXPECT_GT(after->total_ticks, before->total_ticks);  // 100 ms is ten ticks of one CPU
  const double share = stolen_share(before, after);
  EXPECT_GE(share, 0.0);
  EXPECT_LE(share, 1.0);

  EXPECT_DOUBLE_EQ(stolen_share(HostCpuTime{1000, 10}, HostCpuTime{1400, 110}), 0.25);
  EXPECT_DOUBLE_EQ(stolen_share(HostCpuTime{1000, 10}, HostCpuTime{1200, 10}), 0.0);
  EXPECT_LT(stolen_share(HostCpuTime{1000, 10}, HostCpuTime{1000, 10}), 0.0);  // no tick passed
  EXPECT_LT(stolen_share(HostCpuTime{1000, 10}, HostCpuTime{900, 10}), 0.0);   // not in order
  EXPECT_LT(stolen_share(std::nullopt, HostCpuTime{1000, 10}), 0.0);           // unknown
  EXPECT_LT(stolen_share(HostCpuTime{1000, 10}, std::nullopt), 0.0);
}

// The idle CPUs' description, from a made-up sysfs tree: nothing, another governor, haltpoll with and without
// polling, an unreadable poll time, and the older file name; then this host's, against its own sysfs.
TEST(HostIdleCpus, DescriptionFollowsTheGovernorAndTheHaltPollTime) {
  const std::string root = ::testing::TempDir() + "chorus-idle-" + std::to_string(::getpid());
  const std::string cpuidle = root + "/devices/system/cpu/cpuidle";
  const std::string haltpoll = root + "/module/haltpoll/parameters";
  std::filesystem::remove_all(root);
  EXPECT_EQ(idle_cpus_description(root), "");
  std::filesystem::create_directories(cpuidle);
  std::filesystem::create_directories(haltpoll);
  std::ofstream(cpuidle + "/current_governor") << "menu\n";
  EXPECT_EQ(idle_cpus_description(root), "idle CPUs: cpuidle governor menu");
  std::ofstream(cpuidle + "/current_governor_ro") << "haltpoll\n";  // the _ro file comes first
  // No poll time readable yet: the governor alone.
  EXPECT_EQ(idle_cpus_description(root), "idle CPUs: cpuidle governor haltpoll");
  std::ofstream(haltpoll + "/guest_halt_poll_ns") << "0\n";
  EXPECT_EQ(idle_cpus_description(root),
            "idle CPUs: cpuidle governor haltpoll, guest_halt_poll_ns=0: an idle CPU halts at once, and a rank that "
            "sleeps in a wait may wake 100+ us late");
  std::ofstream(haltpoll + "/guest_halt_poll_ns") << "200000\n";
  EXPECT_EQ(idle_cpus_description(root),
            "idle CPUs: cpuidle governor haltpoll, guest_halt_poll_ns=200000: an idle CPU polls up to 200 us before "
            "it halts");
  std::ofstream(haltpoll + "/guest_halt_poll_ns") << "lots\n";
  EXPECT_EQ(idle_cpus_description(root), "idle CPUs: cpuidle governor haltpoll");
  std::filesystem::remove_all(root);

  std::ifstream governor("/sys/devices/system/cpu/cpuidle/current_governor_ro");
  std::string g;
  if (std::getline(governor, g) && !g.empty()) {
    EXPECT_EQ(idle_cpus_description().rfind("idle CPUs: cpuidle governor " + g, 0), 0u) << idle_cpus_description();
  }
}

TEST(Calibration, NeedsTwoRanks) {
  run_world(1, CommOptions{}, [](Communicator& comm) {
    try {
      calibrate_link(comm);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    }
  });
}

}  // namespace
}  // namespace chorus::testing
