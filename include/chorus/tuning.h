// Calibrating the cost model that chooses collective algorithms (see CHORUS_TUNING_FILE and chorus-tune).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/export.h"

namespace chorus {

// How well one algorithm's formula matched its measured times, and the factors that make it match: the
// model's estimate is latency_factor x (its latency part) + bandwidth_factor x (its bandwidth part).
struct AlgorithmFit {
  std::string collective;  // "allreduce", ...
  std::string algorithm;   // "ring", ...
  double latency_factor = 1;
  double bandwidth_factor = 1;
  double worst_error = 0;  // largest relative error of the fitted formula (before corrections) over the probes
  // Measured time / fitted estimate at each probed size (bytes), which the model interpolates between.
  std::vector<std::pair<double, double>> corrections;
  // With CalibrationOptions::tables: (bytes, seconds) at every power of 2 from 8 B to table_max_bytes, each the
  // geometric mean of its hot-buffer and cold-buffer medians, smoothed across neighbouring sizes
  // (tune::smooth_tables). The cost model believes such a table within its range over any fit.
  std::vector<std::pair<double, double>> measured;
};

// What the cost model needs to know about a link, measured on this machine and transport.
struct LinkFigures {
  double alpha_us = 0;           // latency of one hop (half a round trip, minus the two overheads)
  double overhead_us = 0;        // CPU time to send or receive one small message
  double beta_ns_per_byte = 0;   // time per byte on the wire
  double gamma_ns_per_byte = 0;  // time per byte reduced (float32 sum)
  int world_size = 0;            // how many ranks were running when it was measured
  std::string transport;         // "tcp", "inproc"
  std::vector<AlgorithmFit> algorithms;  // empty unless CalibrationOptions::algorithms
  // Ranks on the measuring host per core it could use (more than 1: the ranks took turns on the cores).
  double ranks_per_core = 0;
  // Rank 0's copy rate (GB/s of one core's memcpy of 8 MiB; Communicator::copy_rate_gbps): which kind of host
  // the figures describe. A tuning file may hold entries from several kinds; the nearest applies.
  double copy_gbps = 0;
  // The share of rank 0's host's CPU time that its hypervisor gave to other guests while the probes ran
  // (stolen_share below); negative when the host does not count it. Above a few percent the figures are
  // those of a machine that was running at part speed, and chorus-tune says so.
  double stolen_share = -1;
};

struct CalibrationOptions {
  int iterations = 300;                  // small-message round trips
  size_t large_bytes = size_t{4} << 20;  // size of the bandwidth probe
  // Also time every algorithm of every collective at a few sizes (8 B to max_bytes) and fit its factors.
  bool algorithms = true;
  size_t max_bytes = size_t{16} << 20;
  // Also time every algorithm at every power of 2 from 8 B to table_max_bytes, as the sweeps behind the
  // built-in tables do (many calls per batch, batches taking turns, buffers hot and cold), and keep the times
  // as measured tables (AlgorithmFit::measured). Takes a minute or a few instead of a second, and chooses
  // better than the probes alone; one run varies with the process's scheduling, so merge a few
  // (TablesUpdate::kMerge; docs/algorithms.md, "chorus-tune --tables"). The fits then come from the same timings.
  bool tables = false;
  size_t table_max_bytes = size_t{64} << 20;
};

// Measures the link between ranks 0 and 1 with ping-pong and streaming probes, and the reduction speed
// with a local kernel probe. Collective: every rank of `comm` calls it, and every rank gets rank 0's
// figures. Needs at least two ranks (throws InvalidArgument otherwise).
CHORUS_API LinkFigures calibrate_link(Communicator& comm, const CalibrationOptions& options = {});

// The host's CPU time as its kernel counts it (/proc/stat, every CPU together, in clock ticks): the total, and
// the part that a hypervisor ran other guests on while this guest had work ("steal"). Virtual machines with
// shared cores lose a varying part of their time this way, which moves every timing taken on them; benchmarks
// and calibration read it before and after timing, to say how much of the machine they really had.
struct HostCpuTime {
  uint64_t total_ticks = 0;
  uint64_t stolen_ticks = 0;
};
// Now; nullopt where /proc/stat cannot be read (not Linux, or no /proc).
CHORUS_API std::optional<HostCpuTime> host_cpu_time() noexcept;
// The stolen part of the CPU time that passed between two readings, from 0 to 1; negative when either reading
// is missing or no tick passed between them.
CHORUS_API double stolen_share(const std::optional<HostCpuTime>& before,
                               const std::optional<HostCpuTime>& after) noexcept;

// How this host's idle CPUs wait for work, in words, for benchmark headers and bug reports, from sysfs: the
// cpuidle governor and, under the haltpoll governor (KVM guests), how long an idle CPU polls before it halts
// (guest_halt_poll_ns). Where that is 0, an idle CPU halts at once, and a rank that sleeps in a wait can wake a
// hundred microseconds or more late (on the project's test host, 2026-12-06: tcp rows of 7 us calls that took
// 20-70 us; the tcp transport's small receives poll for an adaptive time because of it, docs/design.md). Empty
// where sysfs says nothing. `sys_root`: where sysfs is mounted (tests give a directory of their own).
CHORUS_API std::string idle_cpus_description(const std::string& sys_root = "/sys");

// Adds the figures to the tuning file at `path` (creating it), replacing an entry for the same transport and
// world size. The file is what CHORUS_TUNING_FILE loads.
CHORUS_API void update_tuning_file(const std::string& path, const LinkFigures& figures);

// How update_tuning_file treats the measured tables of the entry the figures replace.
enum class TablesUpdate {
  kReplace,  // the new figures' tables replace them (as the two-argument form does)
  // Each algorithm's new table is averaged with the old one, size by size, by the geometric mean weighted by the
  // runs behind each (LinkEntry's table_runs; an old entry without the count counts as one run), and the entry
  // counts one run more. On an oversubscribed host one process can time small calls in another order than the
  // next process does (how the scheduler places its ranks); several runs merged give steadier tables.
  kMerge,
};
// Returns how many runs the entry's tables now average (0: the figures carry no tables).
CHORUS_API int update_tuning_file(const std::string& path, const LinkFigures& figures, TablesUpdate tables);

}  // namespace chorus
