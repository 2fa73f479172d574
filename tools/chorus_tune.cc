// chorus-tune: measures the cost model's link figures on this machine and transport, writes them to a
// tuning file (CHORUS_TUNING_FILE loads it), and shows how they change the automatic algorithm choices.
//
//   chorus-run -n 2 -- chorus-tune -o tuning.json
//   chorus-run -n 2 -- chorus-tune --choices-for SHAPES [--registered] [--in-place]
//       no measuring: the automatic choice for each "collective count" line of SHAPES (float32)
#include <chorus/chorus.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Above this share of stolen CPU time, the figures chorus-tune measured are suspect.
constexpr double kStolenWarn = 0.05;

// Prints, on rank 0, "collective count algorithm" for each "collective count" line of `path` (blank lines and
// lines starting with '#' are skipped): the choice this communicator makes under its tuning, as
// Communicator::automatic_algorithm gives it (for calls with CallOptions::registered when `registered`, in
// place when `in_place`). Returns the exit status.
int print_choices(chorus::Communicator& comm, const std::string& path, bool registered, bool in_place) {
  chorus::CallOptions call;
  call.registered = registered;
  int status = 0;
  if (comm.rank() == 0) {
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "chorus-tune: cannot read %s\n", path.c_str());
      status = 2;
    }
    std::printf("# chorus-tune choices: %s, %d ranks%s\n", std::string(comm.transport_name()).c_str(), comm.size(),
                registered ? (in_place ? ", registered buffers (CallOptions::registered, in place)"
                                       : ", registered buffers (CallOptions::registered, out of place)")
                           : (in_place ? ", in place" : ""));
    std::string line;
    for (int number = 1; status == 0 && std::getline(in, line); ++number) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      std::string collective;
      long long count = -1;
      if (!(fields >> collective >> count) || count < 0) {
        std::fprintf(stderr, "chorus-tune: %s:%d: expected \"collective count\", got \"%s\"\n", path.c_str(), number,
                     line.c_str());
        status = 2;
        break;
      }
      try {
        std::string algorithm =
            comm.automatic_algorithm(collective, static_cast<size_t>(count), chorus::DataType::Float32, call, in_place);
        std::printf("%s %lld %s\n", collective.c_str(), count, algorithm.c_str());
      } catch (const chorus::Error& e) {  // an unknown collective: say which line, and let every rank finish
        std::fprintf(stderr, "chorus-tune: %s:%d: %s\n", path.c_str(), number, e.what());
        status = 1;
      }
    }
    std::fflush(stdout);
  }
  comm.barrier();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measure alpha, overhead, beta and gamma for Chorus's cost model; run under chorus-run -n N (N >= 2)"};
  std::string output;
  int iterations = 300;
  size_t large = size_t{4} << 20;
  bool show = true;
  bool algorithms = true;
  size_t max_bytes = size_t{16} << 20;
  app.add_option("-o,--output", output, "tuning file to create or update (entries are per transport and world size)");
  app.add_option("--iters", iterations, "small-message round trips")->check(CLI::Range(20, 1000000));
  app.add_option("--large-bytes", large, "size of the bandwidth probe")->check(CLI::Range(size_t{65536}, size_t{1} << 30));
  app.add_flag("!--no-choices", show, "do not print the automatic choices");
  app.add_flag("!--no-algorithms", algorithms, "only measure the link, do not time and fit every algorithm");
  app.add_option("--max-bytes", max_bytes, "largest probe when fitting algorithms")
      ->check(CLI::Range(size_t{4096}, size_t{1} << 30));
  bool tables = false;
  size_t table_max_bytes = size_t{64} << 20;
  app.add_flag("--tables", tables,
               "also time every algorithm at every power of 2 up to --table-max-bytes, hot and cold, and store the "
               "times as measured tables (a minute or a few; chooses better than the quick probes)");
  app.add_option("--table-max-bytes", table_max_bytes, "largest size of the --tables measurement")
      ->check(CLI::Range(size_t{4096}, size_t{1} << 30))
      ->needs("--tables");
  bool merge = false;
  app.add_flag("--merge", merge,
               "with --tables: average the new tables with those already in the file for this kind of host and world "
               "size (geometric mean, weighted by the runs behind each) instead of replacing them; on an "
               "oversubscribed host, where one process can order small calls differently from the next, a few runs "
               "merged give steadier tables")
      ->needs("--tables");
  std::string choices_for;
  app.add_option("--choices-for", choices_for,
                 "measure nothing: print the automatic choice for each \"collective count\" line of this file")
      ->excludes("--output");
  bool registered = false;
  app.add_flag("--registered", registered,
               "with --choices-for: the choices for calls whose buffers are registered (CallOptions::registered, "
               "out of place unless --in-place)")
      ->needs("--choices-for");
  bool in_place = false;
  app.add_flag("--in-place", in_place,
               "with --choices-for: the choices for in-place calls (send == recv; differs from out of place only "
               "with --registered, for allreduce, allgather, reducescatter and alltoall)")
      ->needs("--choices-for");
  CLI11_PARSE(app, argc, argv);

  try {
    auto comm = chorus::Communicator::from_env();
    if (!choices_for.empty()) return print_choices(*comm, choices_for, registered, in_place);
    chorus::CalibrationOptions opts;
    opts.iterations = iterations;
    opts.large_bytes = large;
    opts.algorithms = algorithms;
    opts.max_bytes = max_bytes;
    opts.tables = tables;
    opts.table_max_bytes = table_max_bytes;
    chorus::LinkFigures f = chorus::calibrate_link(*comm, opts);
    const bool lead = comm->rank() == 0;
    if (lead) {
      std::printf("# chorus-tune: %s, %d ranks, %.2f ranks per core, a host copying %.1f GB/s\n", f.transport.c_str(),
                  f.world_size, f.ranks_per_core, f.copy_gbps);
      if (f.stolen_share >= 0) {
        std::printf("# CPU time of this host stolen by its hypervisor while measuring: %.1f%%\n", 100 * f.stolen_share);
      }
      if (f.stolen_share > kStolenWarn) {
        std::fprintf(stderr,
                     "chorus-tune: warning: the hypervisor gave %.0f%% of this host's CPU time to other guests while "
                     "measuring (steal in /proc/stat); the figures are those of a machine running at part speed: "
                     "measure again when it is quieter\n",
                     100 * f.stolen_share);
      }
      std::printf("alpha_us %.3f\noverhead_us %.3f\nbeta_ns_per_byte %.4f\ngamma_ns_per_byte %.4f\n", f.alpha_us,
                  f.overhead_us, f.beta_ns_per_byte, f.gamma_ns_per_byte);
      for (const auto& a : f.algorithms) {
        std::printf("fit %-14s %-22s latency x%-7.3f bandwidth x%-7.3f worst error %4.0f%%\n", a.collective.c_str(),
                    a.algorithm.c_str(), a.latency_factor, a.bandwidth_factor, a.worst_error * 100);
      }
      if (tables && !f.algorithms.empty()) {
        std::printf("# measured tables: %zu sizes (8 B to %zu B) of %zu algorithms\n",
                    f.algorithms.front().measured.size(), table_max_bytes, f.algorithms.size());
      }
      if (!output.empty()) {
        const int runs = chorus::update_tuning_file(
            output, f, merge ? chorus::TablesUpdate::kMerge : chorus::TablesUpdate::kReplace);
        std::printf("# wrote %s\n", output.c_str());
        if (runs > 1) std::printf("# its tables now average %d runs\n", runs);
      }
    }
    if (!show || output.empty()) return 0;

    // A communicator created now reads the new file: compare its choices with the current ones.
    comm->barrier();
    ::setenv("CHORUS_TUNING_FILE", output.c_str(), 1);
    auto tuned = comm->split(0, comm->rank());
    if (!lead) return 0;
    std::printf("# automatic choice per size: before -> with %s (* where it changed)\n", output.c_str());
    const char* collectives[] = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall"};
    std::printf("# %10s", "size");
    for (const char* c : collectives) std::printf(" %28s", c);
    std::printf("\n");
    for (size_t bytes = 8; bytes <= (size_t{64} << 20); bytes *= 8) {
      std::printf("%12zu", bytes);
      for (const char* c : collectives) {
        std::string name(c);
        bool per_block = name == "allgather" || name == "reducescatter" || name == "alltoall";
        size_t count = std::max<size_t>(1, bytes / 4 / (per_block ? comm->size() : 1));
        std::string before = comm->automatic_algorithm(name, count, chorus::DataType::Float32);
        std::string after = tuned->automatic_algorithm(name, count, chorus::DataType::Float32);
        std::string cell = before == after ? after : before + "->" + after + "*";
        std::printf(" %28s", cell.c_str());
      }
      std::printf("\n");
    }
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "chorus-tune: %s\n", e.what());
    return 1;
  }
  return 0;
}
