// The cost model's inputs: link figures and per-algorithm calibration, per transport and world size. They
// come from a tuning file written by chorus-tune (CHORUS_TUNING_FILE), or from the built-in tuning measured
// on the project's development machine. The formulas themselves live with the algorithms, in
// src/algo/registry.cc.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "algo/registry.h"

namespace chorus::tune {

// Figures measured (or assumed) for one transport at one world size.
struct LinkEntry {
  int world_size = 2;
  algo::LinkModel link;
  // Keyed "collective/algorithm", e.g. "allreduce/ring". Missing algorithms use {1, 1}.
  std::map<std::string, algo::Calibration> algorithms;
  // Ranks per usable core on the measuring host (its local ranks / base::usable_cores()); 0: not recorded.
  // Above 1 the ranks took turns on the cores, which changes which algorithm wins: measured tables apply only
  // where a host runs on the same side of 1 (same_core_regime).
  double ranks_per_core = 0;
  // The measuring host's copy rate (base::copy_rate_gbps, GB/s); 0: not recorded. Hosts of one kind can order
  // the algorithms differently; where a tuning has entries for a transport and world size from several kinds
  // of host, the one whose copy rate is nearest this host's applies (host_distance).
  double copy_gbps = 0;
  // How many chorus-tune --tables runs the measured tables average (update_tuning_file with TablesUpdate::kMerge);
  // 0: not recorded (one run, or tables from the sweeps).
  int table_runs = 0;
};

// The contents of a tuning file: per transport name ("tcp", "inproc"), entries for the world sizes that
// were measured.
struct Tuning {
  std::map<std::string, std::vector<LinkEntry>> transports;
  std::string source;  // path, or "built-in tuning"
};

// The tuning that ships with the library (src/tune/builtin_tuning.cc).
const Tuning& builtin_tuning();

// Reads a tuning file. Throws Error(InvalidArgument) naming the file and the problem.
Tuning load_tuning_file(const std::string& path);
Tuning parse_tuning(const std::string& text, const std::string& source);
// Writes `tuning` as JSON (what load_tuning_file reads).
std::string tuning_to_json(const Tuning& tuning);

// The entry for `transport` nearest to `world_size` in `tuning`, else in the built-in tuning, else a
// generic default (never null). Among entries equally near in world size, the one measured on the host
// nearest in copy rate to `copy_gbps` (0: unknown, the first of them).
const LinkEntry& entry_for(const Tuning* tuning, std::string_view transport, int world_size, double copy_gbps = 0);

// How unlike a host copying at `here` GB/s is to the one an entry was measured on: |log(measured / here)|; 0
// where either is unknown (0), as for same_core_regime.
double host_distance(double measured, double here);

// Whether `t` has, for some transport and world size, entries from hosts whose copy rates differ.
bool has_host_kinds(const Tuning& t);
// has_host_kinds of the built-in tuning or of `tuning` (null: none): whether choosing an entry may need this
// host's copy rate.
bool distinguishes_hosts(const Tuning* tuning);
// The highest copy rate at which the entries chosen from `tuning` (null: none) and the built-in tuning change
// (the geometric mean of the two fastest kinds of one transport and world size); 0 where no choice depends on
// the copy rate. Every copy rate above it chooses as any other does, so a probe of the fastest copy may stop
// once it reads at least this (base::copy_rate_gbps's `enough_gbps`).
double copy_rate_settles_at(const Tuning* tuning);

// Whether figures measured at `measured` ranks per core describe a host running `here`: both at most one rank
// per core, or both more. Either unknown (0) matches.
bool same_core_regime(double measured, double here);

// Calibration for every algorithm of `c` from an entry, in algorithms_for(c) order.
std::vector<algo::Calibration> calibration_for(const LinkEntry& entry, algo::Collective c);

// For calls whose buffers are registered (CallOptions::registered): each algorithm's `measured` table takes
// its `registered` times (`registered_in_place` for in-place calls) from their first size up, where it has them.
// Returns the smallest size any of them starts at: calls below it choose from the heap tables, as an algorithm timed
// only with registered buffers (none of its heap times kept) would otherwise be judged below its table by
// extrapolation. 0: no algorithm had registered times (`cal` is unchanged; such calls choose as any other).
double use_registered(std::vector<algo::Calibration>& cal, bool in_place = false);

// Measured tables for a world size that was not measured itself, between two that were: for every algorithm
// of `c` measured at both the nearest smaller and the nearest larger world size of `transport` (in the tuning
// entry_for draws from), its time at each byte count both tables cover, interpolated linearly in log(time)
// against log(world size). Fills `cal[i].measured` (algorithms_for(c) order) where that is possible and leaves
// the others alone. Returns how many it filled; *below and *above are the world sizes used (0 when none).
// Nothing is filled unless both neighbours are in the core regime of `ranks_per_core` (0: any). Where a world
// size has entries from several kinds of host, the one nearest `copy_gbps` is the neighbour.
int interpolate_measured(const Tuning* tuning, std::string_view transport, int world_size, algo::Collective c,
                         std::vector<algo::Calibration>& cal, int* below, int* above, double ranks_per_core = 0,
                         double copy_gbps = 0);

// Smooths the measured tables of one collective's algorithms (each (bytes, seconds), ascending, the sizes
// powers of 2) across neighbouring sizes, as scripts/fit-measured.py smooths the built-in tables: each time's
// ratio to the fastest time at its size becomes the weighted geometric mean of that ratio (weight 1) and the
// algorithm's ratios at half and twice the size (`weight` each, where it was timed there), times that size's
// fastest time. A choice that one noisy size flips against both its neighbours flips back; a crossover the
// neighbours agree on stays where it was measured; an algorithm fastest at a size and both neighbours keeps
// its time. weight <= 0 leaves the tables alone.
void smooth_tables(std::vector<std::vector<std::pair<double, double>>>& tables, double weight = 0.5);

}  // namespace chorus::tune
