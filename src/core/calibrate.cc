// Measuring the cost model's link figures on the real machine and transport (chorus-tune).
//
// alpha + 2 x overhead is half a small-message round trip; the overhead is the per-message time of a stream
// of small sends, which the receiver absorbs one by one; beta is the extra half round trip of a large
// message per byte; gamma is the speed of the float32 sum kernel on a cache-sized buffer, which is how the
// transports reduce (in 64 KiB pieces).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "algo/registry.h"
#include "base/cpu.h"
#include "base/error.h"
#include "base/files.h"
#include "base/logging.h"
#include "chorus/tuning.h"
#include "kernels/reduce.h"
#include "tune/cost_model.h"

namespace chorus {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Median of repeated timings of fn, in seconds.
template <class Fn>
double median_time(int reps, Fn&& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    t.push_back(seconds(Clock::now() - t0));
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// Half a round trip between ranks 0 and 1 for `bytes`, median over batches.
double half_round_trip(Communicator& comm, size_t bytes, int iterations) {
  std::vector<char> buf(std::max<size_t>(bytes, 1));
  auto once = [&] {
    if (comm.rank() == 0) {
      comm.send(buf.data(), bytes, DataType::UInt8, 1);
      comm.recv(buf.data(), bytes, DataType::UInt8, 1);
    } else if (comm.rank() == 1) {
      comm.recv(buf.data(), bytes, DataType::UInt8, 0);
      comm.send(buf.data(), bytes, DataType::UInt8, 0);
    }
  };
  for (int i = 0; i < std::max(3, iterations / 10); ++i) once();  // warm up
  const int batch = std::max(1, iterations / 10);
  return median_time(10, [&] {
           for (int i = 0; i < batch; ++i) once();
         }) /
         batch / 2;
}

// Time per message of a one-way stream of small messages from rank 0 to rank 1.
double stream_per_message(Communicator& comm, int messages) {
  std::vector<char> buf(8), ack(1);
  auto once = [&] {
    if (comm.rank() == 0) {
      for (int i = 0; i < messages; ++i) comm.send(buf.data(), 8, DataType::UInt8, 1);
      comm.recv(ack.data(), 1, DataType::UInt8, 1);
    } else if (comm.rank() == 1) {
      for (int i = 0; i < messages; ++i) comm.recv(buf.data(), 8, DataType::UInt8, 0);
      comm.send(ack.data(), 1, DataType::UInt8, 0);
    }
  };
  once();
  return median_time(5, once) / messages;
}

double reduce_seconds_per_byte() {
  const size_t n = 64 * 1024 / 4;  // the transports' staging piece
  std::vector<float> a(n, 1.0f), b(n, 2.0f), out(n);
  auto fn = kernels::reduce_fn(DataType::Float32, ReduceOp::Sum);
  for (int i = 0; i < 10; ++i) fn(out.data(), a.data(), b.data(), n);
  return median_time(50, [&] {
           for (int i = 0; i < 16; ++i) fn(out.data(), a.data(), b.data(), n);
         }) /
         16 / (n * 4.0);
}

// Runs `algorithm` for one call of `coll` over `bytes` (count per rank as chorus-perf counts it), on the
// buffers from `offset` bytes in (neither buffer of a call is longer than `bytes`).
void run_collective(Communicator& comm, algo::Collective coll, const std::string& algorithm, size_t bytes,
                    std::vector<char>& a, std::vector<char>& b, size_t offset = 0) {
  const int n = comm.size();
  const bool per_block = coll == algo::Collective::AllGather || coll == algo::Collective::ReduceScatter ||
                         coll == algo::Collective::AllToAll;
  const size_t count = std::max<size_t>(1, bytes / 4 / (per_block ? static_cast<size_t>(n) : 1));
  CallOptions o{algorithm};
  char* send = a.data() + offset;
  char* recv = b.data() + offset;
  switch (coll) {
    case algo::Collective::AllReduce:
      comm.all_reduce(send, recv, count, DataType::Float32, ReduceOp::Sum, o);
      break;
    case algo::Collective::AllGather:
      comm.all_gather(send, recv, count, DataType::Float32, o);
      break;
    case algo::Collective::ReduceScatter:
      comm.reduce_scatter(send, recv, count, DataType::Float32, ReduceOp::Sum, o);
      break;
    case algo::Collective::Broadcast:
      comm.broadcast(send, recv, count, DataType::Float32, 0, o);
      break;
    case algo::Collective::Reduce:
      comm.reduce(send, recv, count, DataType::Float32, ReduceOp::Sum, 0, o);
      break;
    case algo::Collective::AllToAll:
      comm.all_to_all(send, recv, count, DataType::Float32, o);
      break;
    default: break;
  }
}

// How one size is timed: `iters[k]` calls of algorithm k back to back per batch, `batches` batches; `cold`:
// each call works on the next slot of the buffers (sized for the largest size), so that data which would fit
// in the caches arrives from memory, as chorus-perf --rotate 1 times it.
struct Plan {
  std::vector<int> iters;
  int batches = 3;
  bool cold = false;
};

bool timed_by_slowest(algo::Collective coll) {
  return coll == algo::Collective::Broadcast || coll == algo::Collective::Reduce;
}

// The time of one call of each algorithm (seconds), timed as chorus-perf (and nccl-tests) time: iterations
// back to back after a barrier, the average per iteration, averaged over ranks (for broadcast and reduce the
// slowest rank's, as the sweeps behind the built-in tables time them: their leaves and root finish at
// different times, and the mean hides what the last rank waits for); the median of the batches.
// The algorithms take turns batch by batch, as in chorus-perf --algos, so that a slow phase of a shared
// machine (or of an oversubscribed run's scheduling) falls on all of them alike rather than on whichever
// algorithm happened to run then: the fit compares algorithms, so their relative times matter most.
std::vector<double> time_algorithms(Communicator& comm, algo::Collective coll,
                                    const std::vector<std::string>& algorithms, size_t bytes, std::vector<char>& a,
                                    std::vector<char>& b, const Plan& plan) {
  const int n = comm.size();
  const bool slowest = timed_by_slowest(coll);
  const size_t slot = (bytes + 63) / 64 * 64;
  const size_t slots = plan.cold ? std::max<size_t>(1, (std::min(a.size(), b.size()) - 64) / slot) : 1;
  size_t call = 0;
  std::vector<std::vector<double>> t(algorithms.size());
  for (int i = 0; i < plan.batches; ++i) {
    for (size_t k = 0; k < algorithms.size(); ++k) {
      comm.barrier();
      auto t0 = Clock::now();
      for (int it = 0; it < plan.iters[k]; ++it) {
        run_collective(comm, coll, algorithms[k], bytes, a, b, slot * (call++ % slots));
      }
      double mine = seconds(Clock::now() - t0) / plan.iters[k], across = 0;
      comm.all_reduce(&mine, &across, 1, DataType::Float64, slowest ? ReduceOp::Max : ReduceOp::Sum);
      t[k].push_back(slowest ? across : across / n);
    }
  }
  std::vector<double> medians;
  for (auto& v : t) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

// The probes of the fit alone: few calls at a few sizes, hot buffers.
std::vector<double> probe_algorithms(Communicator& comm, algo::Collective coll,
                                     const std::vector<std::string>& algorithms, size_t bytes, std::vector<char>& a,
                                     std::vector<char>& b) {
  // Few-microsecond calls need many iterations to rise above a shared machine's jitter.
  const int iters = bytes <= (16u << 10) ? 60 : bytes <= (256u << 10) ? 20 : bytes <= (2u << 20) ? 6 : 2;
  for (const std::string& alg : algorithms) run_collective(comm, coll, alg, bytes, a, b);  // warm up
  Plan plan{std::vector<int>(algorithms.size(), iters), bytes <= (1u << 20) ? 7 : 3, false};
  return time_algorithms(comm, coll, algorithms, bytes, a, b, plan);
}

// One row of the measured tables, timed as the sweeps behind the built-in tables time a size
// (scripts/algo-bench.sh: chorus-perf --algos all, 200 calls per batch and 7 batches up to 32 KiB, 20 calls and
// 5 batches from 64 KiB), with hot buffers and with cold ones; the row is the geometric mean of the two
// medians, which is how the built-in tables combine the hot and cold sweeps (a call's data may be just
// computed, or long out of the caches). Fewer calls are counted from 64 KiB where 20 would take more than
// kLargeBatchSeconds (at least 3): the calls are long there, and what happens between batches matters little.
// Below 64 KiB the many calls per batch matter: a call of a few hundred nanoseconds pipelines into the next,
// and the time of a short batch is mostly its start.
std::vector<double> table_row(Communicator& comm, algo::Collective coll, const std::vector<std::string>& algorithms,
                              size_t bytes, std::vector<char>& a, std::vector<char>& b) {
  constexpr double kLargeBatchSeconds = 0.05;
  const bool small = bytes <= (32u << 10);
  // Warm up, then one timed call of each bounds its batch's length at the large sizes; every rank takes the
  // slowest rank's time, so that all of them run the same number of calls.
  std::vector<double> once(algorithms.size()), slowest(algorithms.size());
  for (size_t k = 0; k < algorithms.size(); ++k) {
    run_collective(comm, coll, algorithms[k], bytes, a, b);
    auto t0 = Clock::now();
    run_collective(comm, coll, algorithms[k], bytes, a, b);
    once[k] = seconds(Clock::now() - t0);
  }
  comm.all_reduce(once.data(), slowest.data(), once.size(), DataType::Float64, ReduceOp::Max);
  Plan plan;
  plan.batches = small ? 7 : 5;
  for (double t : slowest) {
    plan.iters.push_back(small ? 200 : std::clamp(static_cast<int>(kLargeBatchSeconds / std::max(t, 1e-7)), 3, 20));
  }
  std::vector<double> hot = time_algorithms(comm, coll, algorithms, bytes, a, b, plan);
  plan.cold = true;
  std::vector<double> cold = time_algorithms(comm, coll, algorithms, bytes, a, b, plan);
  std::vector<double> row;
  for (size_t k = 0; k < algorithms.size(); ++k) row.push_back(std::sqrt(hot[k] * cold[k]));
  return row;
}

// Least squares with relative weights: times span six orders of magnitude, so each probe counts by its
// relative error. Fits t = a x latency + b x bandwidth with a, b > 0.
AlgorithmFit fit(const std::vector<algo::Cost>& model, const std::vector<double>& measured) {
  double sll = 0, slb = 0, sbb = 0, slt = 0, sbt = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    double w = 1.0 / (measured[i] * measured[i]), l = model[i].latency, b = model[i].bandwidth, t = measured[i];
    sll += w * l * l;
    slb += w * l * b;
    sbb += w * b * b;
    slt += w * l * t;
    sbt += w * b * t;
  }
  AlgorithmFit f;
  double det = sll * sbb - slb * slb;
  if (det > 0) {
    f.latency_factor = (slt * sbb - sbt * slb) / det;
    f.bandwidth_factor = (sbt * sll - slt * slb) / det;
  }
  // A negative factor means one part explains the data alone: fit the other with it pinned small.
  const double kFloor = 0.05;
  if (f.latency_factor < kFloor) {
    f.latency_factor = kFloor;
    f.bandwidth_factor = sbb > 0 ? (sbt - kFloor * slb) / sbb : 1;
  }
  if (f.bandwidth_factor < kFloor) {
    f.bandwidth_factor = kFloor;
    f.latency_factor = sll > 0 ? (slt - kFloor * slb) / sll : 1;
  }
  f.latency_factor = std::max(f.latency_factor, kFloor);
  f.bandwidth_factor = std::max(f.bandwidth_factor, kFloor);
  for (size_t i = 0; i < model.size(); ++i) {
    double est = f.latency_factor * model[i].latency + f.bandwidth_factor * model[i].bandwidth;
    f.worst_error = std::max(f.worst_error, std::abs(est - measured[i]) / measured[i]);
  }
  return f;  // the caller adds the corrections, which need the probed sizes
}

// One collective's part of the calibration: the algorithms timed, their model costs at the fitted sizes, and
// their times at every timed size.
struct CollectiveTimes {
  algo::Collective coll;
  std::vector<const algo::Algorithm*> algs;
  std::vector<std::string> names;
  std::vector<std::vector<algo::Cost>> models;                 // [algorithm][fitted size]
  std::vector<std::vector<std::pair<double, double>>> tables;  // [algorithm] (bytes, seconds)
};

std::vector<AlgorithmFit> calibrate_algorithms(Communicator& comm, const algo::LinkModel& link,
                                               const CalibrationOptions& options) {
  const int n = comm.size();
  // The fit's sizes: powers of 4 from 8 B. With tables, every power of 2 is timed, and the fit takes its sizes'
  // times from the (smoothed) tables.
  std::vector<size_t> fit_sizes, sizes;
  const size_t fit_max = options.tables ? std::min(options.max_bytes, options.table_max_bytes) : options.max_bytes;
  for (size_t b = 8; b <= fit_max; b *= 4) fit_sizes.push_back(b);
  if (options.tables) {
    for (size_t b = 8; b <= options.table_max_bytes; b *= 2) sizes.push_back(b);
  } else {
    sizes = fit_sizes;
  }
  const size_t largest = std::max(options.max_bytes, options.tables ? options.table_max_bytes : 0);
  std::vector<char> a(largest * 2 + 64, 1), b(largest * 2 + 64, 0);

  std::vector<CollectiveTimes> colls;
  for (algo::Collective coll : {algo::Collective::AllReduce, algo::Collective::AllGather,
                                algo::Collective::ReduceScatter, algo::Collective::Broadcast, algo::Collective::Reduce,
                                algo::Collective::AllToAll}) {
    CollectiveTimes c{coll, {}, {}, {}, {}};
    for (const algo::Algorithm& alg : algo::algorithms_for(coll)) {
      if (alg.applicable) continue;  // topology-dependent (hierarchical): its stages use calibrated levels
      std::vector<algo::Cost> model;
      for (size_t bytes : fit_sizes) {
        algo::CallShape s;
        s.coll = coll;
        s.size = n;
        s.esize = 4;
        bool per_block = coll == algo::Collective::AllGather || coll == algo::Collective::ReduceScatter ||
                         coll == algo::Collective::AllToAll;
        s.count = std::max<size_t>(1, bytes / 4 / (per_block ? static_cast<size_t>(n) : 1));
        s.slice_bytes = comm.options().slice_bytes;
        model.push_back(alg.cost(s, link));
      }
      bool finite = std::all_of(model.begin(), model.end(), [](const algo::Cost& c) { return std::isfinite(c.total()); });
      if (!finite) continue;  // never chosen in this setting (one host): no fit
      c.algs.push_back(&alg);
      c.names.push_back(alg.name);
      c.models.push_back(std::move(model));
    }
    if (c.algs.empty()) continue;
    c.tables.resize(c.algs.size());
    colls.push_back(std::move(c));
  }

  // Timing. The tables time every collective's small sizes before any collective's large ones: on an
  // oversubscribed host, how the scheduler has come to place the ranks after seconds of large calls can reorder
  // small calls of a few hundred nanoseconds (4-rank shm broadcast and reduce: the chain and the linear reduce
  // ahead of binomial after them, behind it before them and in the sweeps' fresh processes, 2026-12-07), and the
  // sweeps behind the built-in tables time small and large sizes in processes of their own.
  const size_t kSmall = options.tables ? size_t{32} << 10 : ~size_t{0};
  for (bool small_phase : {true, false}) {
    for (CollectiveTimes& c : colls) {
      for (size_t bytes : sizes) {
        if ((bytes <= kSmall) != small_phase) continue;
        std::vector<double> t = options.tables ? table_row(comm, c.coll, c.names, bytes, a, b)
                                               : probe_algorithms(comm, c.coll, c.names, bytes, a, b);
        for (size_t k = 0; k < c.algs.size(); ++k) {
          c.tables[k].emplace_back(static_cast<double>(bytes), t[k]);
          base::log_debug("calibrate {} {} {} B: {:.2f} us", algo::collective_name(c.coll), c.names[k], bytes,
                          t[k] * 1e6);
        }
      }
    }
  }

  std::vector<AlgorithmFit> fits;
  for (CollectiveTimes& c : colls) {
    if (options.tables) tune::smooth_tables(c.tables);
    for (size_t k = 0; k < c.algs.size(); ++k) {
      std::vector<double> measured;
      for (size_t bytes : fit_sizes) {
        auto at = std::find_if(c.tables[k].begin(), c.tables[k].end(),
                               [bytes](const auto& pt) { return pt.first == static_cast<double>(bytes); });
        measured.push_back(at->second);
      }
      AlgorithmFit f = fit(c.models[k], measured);
      for (size_t i = 0; i < fit_sizes.size(); ++i) {
        double est = f.latency_factor * c.models[k][i].latency + f.bandwidth_factor * c.models[k][i].bandwidth;
        f.corrections.emplace_back(static_cast<double>(fit_sizes[i]), est > 0 ? measured[i] / est : 1.0);
      }
      f.collective = algo::collective_name(c.coll);
      f.algorithm = c.algs[k]->name;
      if (options.tables) f.measured = std::move(c.tables[k]);
      fits.push_back(std::move(f));
    }
  }
  return fits;
}

}  // namespace

LinkFigures calibrate_link(Communicator& comm, const CalibrationOptions& options) {
  if (comm.size() < 2) {
    base::throw_error(ErrorCode::InvalidArgument, "calibrate_link needs at least two ranks (run under chorus-run -n 2)");
  }
  // Which kind of host this is, for the file: CHORUS_COPY_GBPS where set (the communicator's figure then), else
  // measured now with all the probe's copies (the communicator's own probe may have stopped at the tuning's
  // highest line, a lower bound).
  double copy = 0;
  if (comm.rank() == 0) copy = std::getenv("CHORUS_COPY_GBPS") ? comm.copy_rate_gbps() : base::copy_rate_gbps();
  comm.barrier();
  const std::optional<HostCpuTime> cpu_before = host_cpu_time();
  double small = half_round_trip(comm, 8, options.iterations);
  double per_message = stream_per_message(comm, std::max(100, options.iterations));
  double large = half_round_trip(comm, options.large_bytes, 20);
  double gamma = reduce_seconds_per_byte();

  // Rank 0's figures are everyone's.
  double f[5] = {small, per_message, large, gamma, copy};
  comm.broadcast(f, f, 5, DataType::Float64, 0);
  LinkFigures out;
  out.overhead_us = f[1] * 1e6;
  out.alpha_us = std::max(0.1, (f[0] - 2 * f[1]) * 1e6);
  out.beta_ns_per_byte = std::max(0.001, (f[2] - f[0]) / static_cast<double>(options.large_bytes) * 1e9);
  out.gamma_ns_per_byte = f[3] * 1e9;
  out.world_size = comm.size();
  out.ranks_per_core = comm.ranks_per_core();
  out.copy_gbps = f[4];
  out.transport = std::string(comm.transport_name());
  if (options.algorithms) {
    algo::LinkModel link{out.alpha_us * 1e-6, out.overhead_us * 1e-6, out.beta_ns_per_byte * 1e-9,
                         out.gamma_ns_per_byte * 1e-9};
    // Every rank times every call (the slowest rank's time counts), so every rank gets the same fits.
    out.algorithms = calibrate_algorithms(comm, link, options);
  }
  // Over the whole measurement, as rank 0's host counted it.
  double stolen = stolen_share(cpu_before, host_cpu_time());
  comm.broadcast(&stolen, &stolen, 1, DataType::Float64, 0);
  out.stolen_share = stolen;
  return out;
}

std::optional<HostCpuTime> host_cpu_time() noexcept {
  // The first line: "cpu  user nice system idle iowait irq softirq steal guest guest_nice". guest and guest_nice
  // are already inside user and nice, so the total is the first eight.
  std::FILE* f = std::fopen("/proc/stat", "re");
  if (f == nullptr) return std::nullopt;
  unsigned long long v[8] = {};
  const int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                              &v[5], &v[6], &v[7]);
  std::fclose(f);
  if (got < 4) return std::nullopt;
  HostCpuTime t;
  for (int i = 0; i < got; ++i) t.total_ticks += v[i];
  t.stolen_ticks = got >= 8 ? v[7] : 0;
  return t;
}

double stolen_share(const std::optional<HostCpuTime>& before, const std::optional<HostCpuTime>& after) noexcept {
  if (!before || !after || after->total_ticks <= before->total_ticks || after->stolen_ticks < before->stolen_ticks) {
    return -1;
  }
  return static_cast<double>(after->stolen_ticks - before->stolen_ticks) /
         static_cast<double>(after->total_ticks - before->total_ticks);
}

std::string idle_cpus_description(const std::string& sys_root) {
  std::string governor = base::read_first_line((sys_root + "/devices/system/cpu/cpuidle/current_governor_ro").c_str());
  if (governor.empty()) {
    governor = base::read_first_line((sys_root + "/devices/system/cpu/cpuidle/current_governor").c_str());
  }
  if (governor.empty()) return "";
  std::string out = "idle CPUs: cpuidle governor " + governor;
  if (governor != "haltpoll") return out;
  const std::string ns = base::read_first_line((sys_root + "/module/haltpoll/parameters/guest_halt_poll_ns").c_str());
  char* end = nullptr;
  const unsigned long long poll_ns = std::strtoull(ns.c_str(), &end, 10);
  if (ns.empty() || end == ns.c_str() || *end != '\0') return out;
  if (poll_ns == 0) {
    return out +
           ", guest_halt_poll_ns=0: an idle CPU halts at once, and a rank that sleeps in a wait may wake "
           "100+ us late";
  }
  return out + fmt::format(", guest_halt_poll_ns={}: an idle CPU polls up to {:.0f} us before it halts", poll_ns,
                           static_cast<double>(poll_ns) / 1000.0);
}

void update_tuning_file(const std::string& path, const LinkFigures& figures) {
  (void)update_tuning_file(path, figures, TablesUpdate::kReplace);
}

int update_tuning_file(const std::string& path, const LinkFigures& figures, TablesUpdate tables) {
  tune::Tuning t;
  if (std::ifstream(path).good()) t = tune::load_tuning_file(path);
  auto& entries = t.transports[figures.transport];
  // The entry this measurement replaces: same world size, measured on this kind of host (copy rates within a
  // factor of 2, or not recorded). Entries from other kinds of host stay beside it.
  auto replaced = [&](const tune::LinkEntry& e) {
    return e.world_size == figures.world_size && tune::host_distance(e.copy_gbps, figures.copy_gbps) < std::log(2.0);
  };
  std::optional<tune::LinkEntry> old;
  if (auto it = std::find_if(entries.begin(), entries.end(), replaced); it != entries.end()) old = *it;
  std::erase_if(entries, replaced);
  tune::LinkEntry e;
  e.world_size = figures.world_size;
  e.ranks_per_core = figures.ranks_per_core;
  e.copy_gbps = figures.copy_gbps;
  e.link.alpha = figures.alpha_us * 1e-6;
  e.link.overhead = figures.overhead_us * 1e-6;
  e.link.beta = figures.beta_ns_per_byte * 1e-9;
  e.link.gamma = figures.gamma_ns_per_byte * 1e-9;
  const bool merge = tables == TablesUpdate::kMerge && old.has_value();
  bool merged = false;
  const int old_runs = merge ? std::max(1, old->table_runs) : 0;
  for (const AlgorithmFit& f : figures.algorithms) {
    const std::string key = f.collective + "/" + f.algorithm;
    algo::Calibration& cal = e.algorithms[key];
    cal = algo::Calibration{};
    cal.latency = f.latency_factor;
    cal.bandwidth = f.bandwidth_factor;
    cal.corrections = f.corrections;
    cal.measured = f.measured;
    if (!merge) continue;
    auto before = old->algorithms.find(key);
    if (before == old->algorithms.end()) continue;
    for (auto& [bytes, seconds] : cal.measured) {
      for (const auto& [old_bytes, old_seconds] : before->second.measured) {
        if (old_bytes != bytes || old_seconds <= 0 || seconds <= 0) continue;
        seconds = std::exp((old_runs * std::log(old_seconds) + std::log(seconds)) / (old_runs + 1));
        merged = true;
      }
    }
  }
  if (!figures.algorithms.empty() && !figures.algorithms.front().measured.empty()) {
    e.table_runs = merged ? old_runs + 1 : 1;
  }
  entries.push_back(e);
  std::sort(entries.begin(), entries.end(), [](const tune::LinkEntry& a, const tune::LinkEntry& b) {
    return a.world_size != b.world_size ? a.world_size < b.world_size : a.copy_gbps < b.copy_gbps;
  });
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << tune::tuning_to_json(t);
    if (!out) base::throw_errno(fmt::format("write {}", tmp), errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) base::throw_errno(fmt::format("rename {}", path), errno);
  return e.table_runs;
}

}  // namespace chorus
