// The algorithm registry: for every collective, the algorithms that implement it, each with its entry point,
// its exact per-rank traffic and its cost in the alpha-beta-gamma model. Selection (forced by name or chosen
// by the cost model) maps a call to one entry.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "algo/primitives.h"
#include "transport/frame.h"

namespace chorus::algo {

enum class Collective : uint8_t { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Gather, Scatter, Barrier };
inline constexpr int kNumCollectives = 9;

// The spelling used by CHORUS_ALGO and chorus-perf: "allreduce", "allgather", "reducescatter", "broadcast",
// "reduce", "alltoall", "gather", "scatter", "barrier".
const char* collective_name(Collective c) noexcept;
// Accepts those names and the underscored forms ("all_reduce").
bool parse_collective(std::string_view name, Collective* out) noexcept;

// What the traffic and cost models need to know about one call. `count` is the call's count argument
// (per rank for all_reduce/broadcast/reduce; per rank's block for all_gather, reduce_scatter, gather and
// scatter; per peer for all_to_all).
struct CallShape {
  Collective coll = Collective::AllReduce;
  int size = 1;
  int rank = 0;
  int root = 0;
  size_t count = 0;
  size_t esize = 4;
  size_t slice_bytes = 512 * 1024;
  // Which ranks share a host, and the links inside a host (the `link` given to a cost function is the slowest
  // level: between hosts when there are several). Null when unknown.
  const Topology* topology = nullptr;
  const LinkModel* intra = nullptr;
  const LinkModel* inter = nullptr;

  // The nccl-tests "size" of the call in bytes (the whole gathered or scattered buffer for all_gather,
  // reduce_scatter, all_to_all, gather and scatter).
  size_t bytes() const;
};

// Payload bytes one rank sends and receives in one call.
struct Traffic {
  uint64_t sent = 0;
  uint64_t received = 0;
};

// An estimate in its two parts: what the link's latency and per-message costs contribute, and what bytes
// moved and reduced contribute. Calibration scales each part separately.
struct Cost {
  double latency = 0;
  double bandwidth = 0;
  double total() const { return latency + bandwidth; }
};

// Per-algorithm corrections fitted by chorus-tune on the real machine: estimate = latency x latency_factor +
// bandwidth x bandwidth_factor. The formulas give the shape; the factors absorb what they leave out
// (scheduling of concurrent messages on few cores, cache effects, the transport's own costs).
// `corrections` holds, for each probed size (bytes, ascending), measured time / fitted estimate; between
// probes the ratio is interpolated linearly in log(bytes), beyond them the nearest one applies. So the
// estimate equals the measurement at the probed sizes and follows the formula's shape in between.
//
// `measured` holds times measured back to back, as applications call collectives (chorus-perf --algos, through
// scripts/algo-bench.sh and scripts/fit-measured.py), at exactly this entry's world size and transport:
// (bytes, seconds), ascending. Within its range the estimate is the measurement, interpolated linearly in
// log(bytes) and log(time); outside it, the time at the nearer end scaled by the formula (estimate() below).
// Probes cannot see everything such a measurement sees (on an oversubscribed host, which ranks finish early
// and take a core from the ranks still sending), so where both exist the measurement wins. Core drops it when
// the world size or the transport differ from the measurement's.
struct Calibration {
  double latency = 1;
  double bandwidth = 1;
  std::vector<std::pair<double, double>> corrections;  // (bytes, ratio)
  std::vector<std::pair<double, double>> measured;     // (bytes, seconds)
  // Times measured the same way with the buffers in registered memory (chorus::mem_alloc; chorus-perf -R 1),
  // from the shared-memory transport's single-copy size up: it then reads large payloads in place, which orders
  // the algorithms differently. Calls made with CallOptions::registered use these instead of `measured` where
  // they exist (tune::use_registered); below their range `measured` still speaks. `registered_in_place`: the
  // same for in-place calls (chorus-perf --algos-in-place), which the in-place reads order differently again
  // (a rank cannot overwrite what its peer still reads); only the collectives whose every rank passes both
  // buffers (all_reduce, all_gather, reduce_scatter, all_to_all) use it.
  std::vector<std::pair<double, double>> registered;           // (bytes, seconds)
  std::vector<std::pair<double, double>> registered_in_place;  // (bytes, seconds)

  double correction(double bytes) const;
  // The measured time at `bytes`, or a negative number outside the measured range.
  double measured_time(double bytes) const;
};

using RunFn = void (*)(OpContext& c, const void* send, void* recv, size_t count, int root);
using TrafficFn = Traffic (*)(const CallShape& s);
using CostFn = Cost (*)(const CallShape& s, const LinkModel& link);

using ApplicableFn = bool (*)(const CallShape& s);

struct Algorithm {
  Collective coll;
  const char* name;
  transport::AlgoId id;
  RunFn run;
  TrafficFn traffic;
  CostFn cost;
  ApplicableFn applicable = nullptr;  // null: any call; else the automatic choice skips calls it rejects
  const char* requirement = "";       // what `applicable` needs, for the error when it is forced anyway
};

// Every algorithm of `c`, in a fixed order (the first is the default when the model has no preference).
std::span<const Algorithm> algorithms_for(Collective c) noexcept;
// The algorithm of `c` called `name`, or nullptr.
const Algorithm* find_algorithm(Collective c, std::string_view name) noexcept;
// "ring, tree, recursive_doubling, ..." for error messages.
std::string algorithm_names(Collective c);

// One algorithm's estimated time in seconds for the call from the formula and its corrections alone.
inline double formula_estimate(const Algorithm& a, const CallShape& s, const LinkModel& link, const Calibration& cal) {
  Cost c = a.cost(s, link);
  double t = c.latency * cal.latency + c.bandwidth * cal.bandwidth;
  return cal.corrections.empty() ? t : t * cal.correction(static_cast<double>(s.bytes()));
}

// One algorithm's estimated time in seconds for the call. Within the measured range, the measurement. Beyond
// either end of it, the measured time at that end scaled by how the formula grows from there, so the order
// the measurements put the algorithms in at the end carries on past it rather than jumping to the order of
// the probes' figures (which time other things: docs/algorithms.md, "Past the measured sizes").
inline double estimate(const Algorithm& a, const CallShape& s, const LinkModel& link, const Calibration& cal) {
  if (!cal.measured.empty()) {
    const double bytes = static_cast<double>(s.bytes());
    double m = cal.measured_time(bytes);
    if (m >= 0) return m;
    if (bytes > 0 && s.count > 0) {
      const auto& edge = bytes > cal.measured.back().first ? cal.measured.back() : cal.measured.front();
      CallShape at = s;  // the same call at the edge's size (bytes are proportional to count)
      at.count =
          std::max<size_t>(1, static_cast<size_t>(std::llround(static_cast<double>(s.count) * edge.first / bytes)));
      const double there = formula_estimate(a, at, link, cal), here = formula_estimate(a, s, link, cal);
      if (there > 0 && here > 0) return edge.second * here / there;
    }
  }
  return formula_estimate(a, s, link, cal);
}

// The cheapest algorithm of `s.coll` for this call. `calibration` (one entry per algorithm, in
// algorithms_for() order) may be null for the bare formulas. An algorithm whose calibration is empty (no
// measured table, corrections or factors) while another's is not is estimated at its bare formula times the
// best calibrated algorithm's estimate / bare formula: it wins where its formula beats that one's, never only
// because a bare formula undercuts measured times. `estimates`, when not null, receives each algorithm's
// estimate in algorithms_for() order.
const Algorithm& choose_algorithm(const CallShape& s, const LinkModel& link, const Calibration* calibration,
                                  double* estimates = nullptr);

// ---- exact traffic of algorithms implemented in their own files ----
Traffic all_reduce_tree_traffic(const CallShape& s);                 // tree.cc
Traffic all_reduce_recursive_doubling_traffic(const CallShape& s);   // recursive.cc
Traffic all_reduce_rabenseifner_traffic(const CallShape& s);         // recursive.cc
Traffic all_gather_recursive_doubling_traffic(const CallShape& s);   // recursive.cc
Traffic reduce_scatter_recursive_halving_traffic(const CallShape& s);  // recursive.cc
Traffic all_gather_bruck_traffic(const CallShape& s);                // bruck.cc
Traffic all_to_all_bruck_traffic(const CallShape& s);                // bruck.cc

}  // namespace chorus::algo
