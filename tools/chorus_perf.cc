// chorus-perf: bandwidth of the collectives, measured and printed as nccl-tests' *_perf programs do.
//
//   chorus-run -n N -- chorus-perf allreduce -b 8 -e 64M -f 2
//
// Flags, size rules, the table and the bandwidth definitions follow nccl-tests, so that results and the
// scripts that read them carry over: "size" is the larger of one rank's send and receive buffers in bytes,
// algbw = size / time, busbw = algbw * (the fraction of the data that crosses each link in an optimal
// algorithm). Only rank 0 prints; every rank runs the same loop.
#include <chorus/chorus.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tool_util.h"

namespace {

using chorus::Communicator;
using chorus::DataType;
using chorus::ReduceOp;

constexpr int kUsageError = 2;
constexpr int kFailure = 1;

// ---- collectives ----

enum class Coll { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Gather, Scatter };

struct CollInfo {
  Coll coll;
  std::string_view name;   // as on the command line
  std::string_view alias;  // nccl-tests' spelling
  bool reduces;            // takes a ReduceOp
  bool rooted;             // takes a root
};

constexpr std::array<CollInfo, 8> kColls{{
    {Coll::AllReduce, "allreduce", "all_reduce", true, false},
    {Coll::AllGather, "allgather", "all_gather", false, false},
    {Coll::ReduceScatter, "reducescatter", "reduce_scatter", true, false},
    {Coll::Broadcast, "broadcast", "broadcast", false, true},
    {Coll::Reduce, "reduce", "reduce", true, true},
    {Coll::AllToAll, "alltoall", "all_to_all", false, false},
    {Coll::Gather, "gather", "gather", false, true},
    {Coll::Scatter, "scatter", "scatter", false, true},
}};

const CollInfo* find_coll(std::string_view name) {
  for (const CollInfo& c : kColls)
    if (name == c.name || name == c.alias) return &c;
  return nullptr;
}

// The element counts of one rank's buffers for a test of `count` elements, as nccl-tests'
// <coll>GetCollByteCount defines them.
struct Layout {
  size_t param = 0;         // the count argument of the call (what the "count" column shows)
  size_t send = 0;          // elements of the send buffer
  size_t recv = 0;          // elements of the receive buffer
  size_t send_inplace = 0;  // in place: send = recv + rank * send_inplace
  size_t recv_inplace = 0;  // in place: recv = recv + rank * recv_inplace

  size_t bytes(size_t type_size) const { return std::max(send, recv) * type_size; }
};

Layout layout_for(Coll coll, size_t count, size_t nranks) {
  size_t per_rank = count / nranks;
  switch (coll) {
    case Coll::AllReduce:
    case Coll::Broadcast:
    case Coll::Reduce:
      return {count, count, count, 0, 0};
    case Coll::AllGather:
    case Coll::Gather:  // the root's recv holds every block; in place there, as all_gather on every rank
      return {per_rank, per_rank, per_rank * nranks, per_rank, 0};
    case Coll::ReduceScatter:
    case Coll::Scatter:  // the root's send holds every block
      return {per_rank, per_rank * nranks, per_rank, 0, per_rank};
    case Coll::AllToAll:
      return {per_rank, per_rank * nranks, per_rank * nranks, 0, 0};
  }
  return {};
}

// busbw / algbw: the share of `size` that crosses the busiest link of an optimal algorithm.
double bus_factor(Coll coll, int nranks) {
  double n = nranks;
  switch (coll) {
    case Coll::AllReduce:
      return 2 * (n - 1) / n;
    case Coll::AllGather:
    case Coll::ReduceScatter:
    case Coll::AllToAll:
    case Coll::Gather:  // the root's link carries N-1 of the N blocks (nccl-tests' gather_perf and scatter_perf)
    case Coll::Scatter:
      return (n - 1) / n;
    case Coll::Broadcast:
    case Coll::Reduce:
      return 1;
  }
  return 1;
}

// ---- options ----

struct Options {
  const CollInfo* coll = nullptr;
  size_t min_bytes = 32 << 20;
  size_t max_bytes = 32 << 20;
  size_t step_bytes = 1 << 20;
  size_t step_factor = 1;
  int iters = 20;
  bool iters_by_size = false;  // --iters-by-size: the peers' harness schedule instead of -n
  bool in_place_first = false;  // --in-place-first: the in-place block comes first in the table
  int warmup = 5;
  int repeats = 5;  // --algos: interleaved rounds over every algorithm; each time is the median
  int retry_stolen = 0;        // --retry-stolen: more attempts at a row timed while the hypervisor stole much
  double stolen_limit = 0.05;  // --stolen-limit: the stolen share that gets a note (and, with the above, a retake)
  int check = 1;
  int root = 0;     // -1: every rank in turn
  int average = 1;  // 0 rank 0, 1 mean, 2 min, 3 max
  int agg = 1;
  std::vector<DataType> types;
  std::vector<ReduceOp> ops;
  double timeout_s = 0;  // 0: the library's default
  std::string json_path;
  std::string algorithm;             // -a NAME / --algo: forced on every call; empty: the library's choice
  std::vector<std::string> compare;  // --algos: the algorithms to time side by side; empty: the nccl-tests table
  bool traffic = false;              // --traffic: bytes sent, measured against the algorithm's formula
  int rotate = 1;  // 1: each iteration uses the next slot of the buffers, as nccl-tests; 0: always the same one
  int registered = 0;  // -R 1: send and receive buffers from chorus::mem_alloc (as nccl-tests' -R)
  bool algos_in_place = false;  // --algos-in-place: the --algos table times in-place calls
};

// nccl-tests' order for "-d all" and "-o all".
constexpr std::array<DataType, 10> kAllTypes{DataType::Int8,    DataType::UInt8,   DataType::Int32,   DataType::UInt32,
                                             DataType::Int64,   DataType::UInt64,  DataType::Float16, DataType::Float32,
                                             DataType::Float64, DataType::BFloat16};
constexpr std::array<ReduceOp, 5> kAllOps{ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg};

// "64", "1K", "1.5M", "2g": bytes, with binary K/M/G suffixes (as nccl-tests' parsesize).
std::optional<size_t> parse_size(std::string_view text) {
  std::string s(text);
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  std::string_view rest(end);
  double unit = 1;
  if (!rest.empty()) {
    switch (std::tolower(static_cast<unsigned char>(rest[0]))) {
      case 'k':
        unit = 1024.0;
        break;
      case 'm':
        unit = 1024.0 * 1024;
        break;
      case 'g':
        unit = 1024.0 * 1024 * 1024;
        break;
      default:
        return std::nullopt;
    }
    if (rest.size() != 1) return std::nullopt;
  }
  double bytes = value * unit;
  if (!(bytes >= 0) || bytes >= 0x1p63) return std::nullopt;
  return static_cast<size_t>(bytes);
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Returns the exit code to leave with, or nullopt to run.
std::optional<int> parse_options(int argc, char** argv, Options& o) {
  CLI::App app{
      "Measures the bandwidth of a Chorus collective, as nccl-tests' <coll>_perf programs do.\n"
      "  chorus-run -n N -- chorus-perf COLL [options]",
      "chorus-perf"};
  std::string coll_name, min_text = "32M", max_text = "32M", step_text = "1M", type_text = "float", op_text = "sum";
  app.add_option("collective", coll_name,
                 "allreduce, allgather, reducescatter, broadcast, reduce, alltoall, gather or scatter "
                 "(all_reduce, all_gather, reduce_scatter, all_to_all also accepted)")
      ->type_name("COLL")
      ->required();
  app.add_option("-b,--minbytes", min_text, "Smallest size in bytes (K/M/G suffixes: 1K = 1024)")
      ->type_name("SIZE")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", max_text, "Largest size in bytes")->type_name("SIZE")->capture_default_str();
  app.add_option("-i,--stepbytes", step_text, "Size increment when the step factor is 1")
      ->type_name("SIZE")
      ->capture_default_str();
  app.add_option("-f,--stepfactor", o.step_factor, "Size multiplier between steps (> 1 replaces -i)")
      ->capture_default_str();
  app.add_option("-n,--iters", o.iters, "Timed iterations per size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--in-place-first", o.in_place_first,
               "Print the in-place block before the out-of-place one, for side-by-side scripts that read the first "
               "block when the peer's call is in place by definition (MPI_Bcast has one buffer: an out-of-place "
               "broadcast also copies send to recv on the root)");
  app.add_flag("--iters-by-size", o.iters_by_size,
               "Timed iterations by size, as the peers' harness (../shared/peers/mpi_coll.c) times them: 200 up to "
               "64 KiB, 40 up to 4 MiB, 10 above (replaces -n), after 3 untimed calls per size as it makes (else "
               "1); small sizes then average over as many calls as the peers' figures do");
  app.add_option("--repeats", o.repeats,
                 "With --algos: rounds of timing that visit every algorithm in turn; each reported time is the "
                 "median over rounds (so slow drifts of a shared machine hit all algorithms alike)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--retry-stolen", o.retry_stolen,
                 "Time a row again, up to this many more times, while at least --stolen-limit of rank 0's host's "
                 "CPU time was stolen by its hypervisor as it ran (a virtual machine with shared cores); the row "
                 "shows the attempt with the least stolen, and a note gives every attempt's share. Results are "
                 "checked on the first attempt")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--stolen-limit", o.stolen_limit,
                 "The share of rank 0's host's CPU time, stolen while a row ran, from which the row gets a note "
                 "(and, with --retry-stolen, is timed again); a row shorter than 20 ticks of CPU time is judged "
                 "by the last 20 or more ticks up to its end")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup, "Warm-up iterations at the largest and the smallest size")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-m,--agg_iters", o.agg,
                 "Collectives per timed iteration; more than 1: issued as one group (group_start/group_end), as "
                 "nccl-tests' -m does, so small all_reduces may be fused; the algo and traffic columns then "
                 "describe the group's last call")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-c,--check", o.check, "Checked iterations per size (0: no checking)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-d,--datatype", type_text,
                 "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, or all")
      ->capture_default_str();
  app.add_option("-o,--op", op_text, "sum, prod, min, max, avg, or all")->capture_default_str();
  app.add_option("-r,--root", o.root, "Root of broadcast and reduce (-1: every rank in turn)")->capture_default_str();
  // nccl-tests spells its averaging mode -a; Chorus also wants -a for the algorithm. A value 0..3 keeps the
  // nccl-tests meaning (no algorithm is named by a number); anything else names an algorithm.
  std::vector<std::string> a_values;
  std::string algos_text;
  app.add_option("-a", a_values,
                 "0..3: the averaging mode, as --average (nccl-tests' -a); otherwise an "
                 "algorithm name, as --algo")
      ->type_name("N|ALGO")
      ->allow_extra_args(false)
      ->take_all();
  CLI::Option* average_opt =
      app.add_option("--average", o.average,
                     "Time reported across ranks: 0 rank 0's, 1 the average, 2 the minimum, 3 the maximum")
          ->type_name("N")
          ->check(CLI::Range(0, 3))
          ->capture_default_str();
  CLI::Option* algo_opt =
      app.add_option("--algo", o.algorithm,
                     "Run this algorithm on every call (default: the library's choice, CHORUS_ALGO or the cost "
                     "model); the last column shows what ran")
          ->type_name("ALGO");
  CLI::Option* algos_opt =
      app.add_option("--algos", algos_text,
                     "Time these algorithms side by side, out of place (--algos-in-place: in place), in one table "
                     "with the automatic choice: 'all' or a comma-separated list (ring,tree)")
          ->type_name("all|LIST");
  app.add_flag("--algos-in-place", o.algos_in_place,
               "With --algos: time in-place calls instead of out-of-place ones (with -R 1 they choose from the "
               "tables measured in place)")
      ->needs(algos_opt);
  app.add_option("--rotate", o.rotate,
                 "1: each iteration works on the next size-sized slot of the buffers allocated for the largest "
                 "size, as nccl-tests does, so sizes that fit in the caches are not timed hot; 0: always the "
                 "same slot, as MPI benchmarks (and compare.sh's peers) do")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_option("-R,--registered", o.registered,
                 "1: allocate the send and receive buffers with chorus::mem_alloc (registered memory, which "
                 "local peers read in place) and say so to the calls (CallOptions::registered: the automatic "
                 "choice uses the tables measured with registered buffers); 0: plain page-aligned heap memory, as "
                 "the peers' benchmarks use")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_flag("--traffic", o.traffic,
               "Add bytes sent per rank, measured and as the algorithm's formula predicts (max over ranks), "
               "and whether they agree on every rank");
  app.add_option("-T,--timeout", o.timeout_s, "Bound on every collective, in seconds (default: the library's)")
      ->type_name("SECONDS")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", o.json_path, "Also write the results as JSON to FILE (rank 0)")->type_name("FILE");
  app.footer(
      "Exit status: 0 success, 1 wrong results or a Chorus error, 2 bad usage.\n"
      "Columns: size (B) and count (elements) as nccl-tests defines them per collective; time in us per\n"
      "collective; algbw = size / time and busbw = algbw * factor in GB/s (1e9); #wrong summed over ranks;\n"
      "then the algorithm that ran, and with --traffic: sent, predicted, ok.\n"
      "--algos prints one table instead: a time per algorithm, auto's time and name, auto/best, the fastest\n"
      "algorithm and #wrong (with --traffic: bytes sent per algorithm and ok), then a summary of crossovers.");
  try {
    app.parse(argc, argv);
    o.coll = find_coll(lowercase(coll_name));
    if (o.coll == nullptr) throw CLI::ValidationError("collective", "unknown collective '" + coll_name + "'");
    auto size_option = [](const std::string& name, const std::string& text) {
      std::optional<size_t> bytes = parse_size(text);
      if (!bytes) throw CLI::ValidationError(name, "'" + text + "' is not a size (bytes, or with a K/M/G suffix)");
      return *bytes;
    };
    o.min_bytes = size_option("--minbytes", min_text);
    o.max_bytes = size_option("--maxbytes", max_text);
    o.step_bytes = size_option("--stepbytes", step_text);
    if (o.min_bytes > o.max_bytes) {
      throw CLI::ValidationError("--minbytes",
                                 fmt::format("minBytes {} is larger than maxBytes {}", o.min_bytes, o.max_bytes));
    }
    if (o.step_factor <= 1 && o.step_bytes == 0) {
      throw CLI::ValidationError("--stepbytes", "must be positive when the step factor is 1");
    }
    if (lowercase(type_text) == "all") {
      o.types.assign(kAllTypes.begin(), kAllTypes.end());
    } else if (std::optional<DataType> t = chorus::parse_dtype(lowercase(type_text))) {
      o.types = {*t};
    } else {
      throw CLI::ValidationError("--datatype", "unknown data type '" + type_text + "'");
    }
    if (!o.coll->reduces) {
      o.ops = {ReduceOp::Sum};  // unused; the table shows "none"
    } else if (lowercase(op_text) == "all") {
      o.ops.assign(kAllOps.begin(), kAllOps.end());
    } else if (std::optional<ReduceOp> op = chorus::parse_reduce_op(lowercase(op_text))) {
      o.ops = {*op};
    } else {
      throw CLI::ValidationError("--op", "unknown reduction '" + op_text + "'");
    }
    if (o.root < -1) throw CLI::ValidationError("--root", "must be a rank, or -1 for every rank in turn");
    // -a may come twice, once with each meaning (-a 2 -a tree).
    bool average_given = average_opt->count() > 0, algo_given = algo_opt->count() > 0;
    for (const std::string& a : a_values) {
      size_t sign = a.starts_with('-') ? 1 : 0;
      bool numeric = a.size() > sign && a.find_first_not_of("0123456789", sign) == std::string::npos;
      if (numeric) {
        if (average_given) throw CLI::ValidationError("-a", a + ": the averaging mode is given twice");
        int mode = std::atoi(a.c_str());
        if (a.size() > 2 || mode < 0 || mode > 3) {
          throw CLI::ValidationError("-a", "averaging mode " + a +
                                               " is not 0..3 (0 rank 0, 1 average, 2 minimum, 3 maximum); "
                                               "an algorithm name is never a number");
        }
        o.average = mode;
        average_given = true;
      } else {
        if (algo_given) throw CLI::ValidationError("-a", a + ": the algorithm is given twice (--algo or -a)");
        o.algorithm = a;
        algo_given = true;
      }
    }
    if (algo_given && o.algorithm.empty()) throw CLI::ValidationError("--algo", "the algorithm name is empty");
    if (algos_opt->count() > 0) {
      if (algo_given) {
        throw CLI::ValidationError(
            "--algos", fmt::format("times every listed algorithm; it cannot be combined with forcing {}", o.algorithm));
      }
      for (size_t start = 0; start <= algos_text.size();) {
        size_t comma = std::min(algos_text.find(',', start), algos_text.size());
        std::string name = algos_text.substr(start, comma - start);
        start = comma + 1;
        if (name.empty()) throw CLI::ValidationError("--algos", "empty name in '" + algos_text + "'");
        std::vector<std::string> names{name};
        if (lowercase(name) == "all") names = chorus::algorithm_names(o.coll->name);
        for (std::string& n : names)
          if (std::find(o.compare.begin(), o.compare.end(), n) == o.compare.end()) o.compare.push_back(n);
      }
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  return std::nullopt;
}

// ---- buffers ----

struct FreeDeleter {
  bool registered = false;
  void operator()(void* p) const {
    if (registered) {
      chorus::mem_free(p);
    } else {
      std::free(p);
    }
  }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

// Page-aligned, zeroed (so every page is mapped before anything is timed). registered: from
// chorus::mem_alloc.
Buffer allocate(size_t bytes, bool registered = false) {
  constexpr size_t kAlign = 4096;
  size_t rounded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (registered) {
    void* p = chorus::mem_alloc(rounded);
    std::memset(p, 0, rounded);
    return Buffer(static_cast<std::byte*>(p), FreeDeleter{true});
  }
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) throw std::runtime_error(fmt::format("cannot allocate {} bytes for the buffers", rounded));
  std::memset(p, 0, rounded);
  return Buffer(static_cast<std::byte*>(p));
}

// ---- data patterns for checking ----
//
// Inputs are small integers chosen so that every result is exact in the element type whatever order the
// library combines ranks in: integer arithmetic wraps (exact modulo 2^bits), and floating-point partial sums
// and products stay within the integers the type represents exactly. Every rank computes the expected
// output from the same formula for all ranks' inputs.

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, chorus::float16_t> || std::is_same_v<T, chorus::bfloat16_t>;
template <class T>
constexpr bool kIsFloat = kIsHalf<T> || std::is_floating_point_v<T>;
template <class T>
constexpr bool kIsSigned = kIsFloat<T> || std::is_signed_v<T>;

// Largest magnitude up to which every integer is exact in T (unbounded for wrapping integers).
template <class T>
constexpr int64_t exact_limit() {
  if constexpr (std::is_same_v<T, chorus::float16_t>)
    return 2048;
  else if constexpr (std::is_same_v<T, chorus::bfloat16_t>)
    return 256;
  else if constexpr (std::is_same_v<T, float>)
    return int64_t{1} << 24;
  else if constexpr (std::is_same_v<T, double>)
    return int64_t{1} << 53;
  else
    return INT64_MAX;
}

template <class T>
T make(int64_t v) {
  if constexpr (kIsHalf<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);  // integers: modulo 2^bits (C++20); floats: exact for these values
}

template <class T>
double to_double(T x) {
  if constexpr (kIsHalf<T>)
    return static_cast<float>(x);
  else
    return static_cast<double>(x);
}

template <class T>
bool same_value(T a, T b) {
  if constexpr (kIsHalf<T>)
    return static_cast<float>(a) == static_cast<float>(b);
  else
    return a == b;
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The input of `rank` at element `index` in check iteration `iter`, before conversion to T.
class Pattern {
 public:
  enum class Kind { Additive, Product, Spread };

  template <class T>
  static Pattern make_for(Coll coll, ReduceOp op, int nranks) {
    Pattern p;
    p.signed_ = kIsSigned<T>;
    if (coll == Coll::AllGather || coll == Coll::Broadcast || coll == Coll::AllToAll || coll == Coll::Gather ||
        coll == Coll::Scatter || op == ReduceOp::Min || op == ReduceOp::Max) {
      // Data movement and min/max: any values the type holds exactly; spread out so that a misplaced
      // element is noticed.
      p.kind_ = Kind::Spread;
      bool narrow = sizeof(T) == 1 || std::is_same_v<T, chorus::bfloat16_t>;
      p.span_ = narrow ? 100 : 1000;
    } else if (op == ReduceOp::Prod) {
      // Factors 1 and -1 (signed types), with a 2 from at most about 8 ranks per element.
      p.kind_ = Kind::Product;
      p.period_ = std::max<int64_t>(4, (nranks + 7) / 8);
    } else {
      // Sum and Avg: |v| <= span with nranks * span within the exact range.
      p.kind_ = Kind::Additive;
      p.span_ = std::min<int64_t>(100, exact_limit<T>() / nranks);
    }
    return p;
  }

  int64_t operator()(int rank, size_t index, int iter) const {
    uint64_t h = mix(index * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(rank) * 0xc2b2ae3d27d4eb4fULL +
                     static_cast<uint64_t>(iter) * 0x165667b19e3779f9ULL);
    switch (kind_) {
      case Kind::Spread:
      case Kind::Additive: {
        auto v = static_cast<int64_t>(h % static_cast<uint64_t>(2 * span_ + 1));
        return signed_ ? v - span_ : v;
      }
      case Kind::Product:
        if ((index + static_cast<uint64_t>(rank) + static_cast<uint64_t>(iter)) % static_cast<uint64_t>(period_) == 0)
          return 2;
        return signed_ && h % 3 == 0 ? -1 : 1;
    }
    return 0;
  }

 private:
  Kind kind_ = Kind::Spread;
  bool signed_ = true;
  int64_t span_ = 1;
  int64_t period_ = 4;
};

// op over the inputs of ranks 0..nranks-1 (input(r) gives rank r's value), with the library's semantics.
template <class T, class Input>
T reduce_reference(ReduceOp op, int nranks, const Input& input) {
  if constexpr (kIsFloat<T>) {
    double acc = to_double(input(0));  // exact: every partial result is a small integer
    for (int r = 1; r < nranks; ++r) {
      double v = to_double(input(r));
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          acc += v;
          break;
        case ReduceOp::Prod:
          acc *= v;
          break;
        case ReduceOp::Min:
          acc = std::min(acc, v);
          break;
        case ReduceOp::Max:
          acc = std::max(acc, v);
          break;
      }
    }
    if (op == ReduceOp::Avg) {
      if constexpr (std::is_same_v<T, double>)
        return acc / nranks;
      else
        return T(static_cast<float>(acc) / static_cast<float>(nranks));  // divided in float, then rounded
    }
    if constexpr (kIsHalf<T>)
      return T(static_cast<float>(acc));
    else
      return static_cast<T>(acc);
  } else {
    using U = std::make_unsigned_t<T>;
    T acc = input(0);
    for (int r = 1; r < nranks; ++r) {
      T v = input(r);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          acc = static_cast<T>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(v)));
          break;
        case ReduceOp::Prod:
          acc = static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(acc)) * static_cast<U>(v)));
          break;
        case ReduceOp::Min:
          acc = std::min(acc, v);
          break;
        case ReduceOp::Max:
          acc = std::max(acc, v);
          break;
      }
    }
    if (op == ReduceOp::Avg) {
      // Integer division of the wrapped sum, truncating toward zero.
      if constexpr (std::is_signed_v<T>)
        return static_cast<T>(static_cast<int64_t>(acc) / nranks);
      else
        return static_cast<T>(static_cast<uint64_t>(acc) / static_cast<uint64_t>(nranks));
    }
    return acc;
  }
}

// ---- the benchmark ----

struct Measurement {
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  std::optional<int64_t> wrong;  // summed over ranks; empty when not checked
  std::string algorithm;         // what ran in the timed calls (Communicator::last_operation)
  int iters = 0;                 // timed iterations (-n, or by size with --iters-by-size)
  int untimed = 0;               // untimed calls before them
  // --traffic, of the last timed call: payload bytes one rank sent, measured and as the algorithm's formula
  // predicts (each the maximum over ranks), and whether the two were equal on every rank.
  uint64_t sent = 0;
  uint64_t predicted = 0;
  bool traffic_ok = true;
  // --traffic: payload bytes per call that went over tcp, summed over ranks (with shm inside hosts and tcp
  // between them, the bytes that crossed hosts).
  uint64_t over_tcp = 0;
};

// The share of rank 0's host's CPU time that its hypervisor stole while a row ran (StolenTime).
struct StolenReading {
  double share = -1;          // < 0: unknown (the host does not count it, or too little time to judge by)
  bool too_short = false;     // the row ran for fewer than StolenTime::kMinTicks ticks of CPU time; `share` is
  uint64_t window_ticks = 0;  // then that of the last window_ticks ticks up to its end (0: none long enough)
};

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  DataType type{};
  std::string redop;
  int root = -1;
  Measurement out_of_place, in_place;
  StolenReading stolen;                 // while the row shown ran
  std::vector<StolenReading> attempts;  // --retry-stolen: every attempt, in order (the row shows one of them)
};

// --algos: one size, out of place, every compared algorithm forced in turn and then the library's choice.
struct CompareRow {
  size_t bytes = 0;
  size_t count = 0;
  DataType type{};
  std::string redop;
  int root = -1;
  std::vector<Measurement> forced;  // in the order of the compared names
  Measurement automatic;
  StolenReading stolen;                 // as in Row
  std::vector<StolenReading> attempts;  // as in Row

  size_t fastest() const {
    auto faster = [](const Measurement& a, const Measurement& b) { return a.time_us < b.time_us; };
    return static_cast<size_t>(std::min_element(forced.begin(), forced.end(), faster) - forced.begin());
  }
  // The quality of the choice: the chosen algorithm's time (from its forced column, measured in the same
  // rounds) over the fastest forced time. The auto column's own time is shown beside it; the two differ only
  // by noise, since the choice for a size is deterministic.
  double auto_over_best() const {
    const Measurement* c = chosen();
    return (c ? c->time_us : automatic.time_us) / forced[fastest()].time_us;
  }
  // The forced column of the algorithm auto chose, or null when it is not among the compared ones.
  const Measurement* chosen() const {
    for (const Measurement& m : forced)
      if (m.algorithm == automatic.algorithm) return &m;
    return nullptr;
  }
  std::optional<int64_t> wrong() const {
    if (!automatic.wrong) return std::nullopt;
    int64_t sum = *automatic.wrong;
    for (const Measurement& m : forced) sum += m.wrong.value_or(0);
    return sum;
  }
  bool traffic_ok() const {
    return std::all_of(forced.begin(), forced.end(), [](const Measurement& m) { return m.traffic_ok; });
  }
};

std::string format_time(double us) {
  if (us >= 10000.0) return fmt::format("{:7.0f}", us);
  if (us >= 100.0) return fmt::format("{:7.1f}", us);
  return fmt::format("{:7.2f}", us);
}

std::string format_wrong(const std::optional<int64_t>& wrong) {
  return wrong ? std::to_string(*wrong) : std::string("N/A");
}

// "8", "1020", "2K", "1M": bytes, with a binary suffix where it is exact.
std::string short_size(size_t bytes) {
  for (auto [shift, suffix] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}}) {
    size_t unit = size_t{1} << shift;
    if (bytes >= unit && bytes % unit == 0) return fmt::format("{}{}", bytes / unit, suffix);
  }
  return std::to_string(bytes);
}

std::string rtrim(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// The columns every table starts with: size, count, type, redop, root (nccl-tests' widths).
constexpr std::string_view kLeadColumns = "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}";
constexpr std::string_view kLeadHeader = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}";

template <class R>
std::string lead_columns(const R& r) {
  return fmt::format(kLeadColumns, r.bytes, r.count, chorus::to_string(r.type), r.redop, r.root);
}

// The widest name among `names` and `floor`, for a column that holds them.
size_t name_width(const std::vector<std::string>& names, size_t floor) {
  for (const std::string& n : names) floor = std::max(floor, n.size());
  return floor;
}

// ---- the nccl-tests table: fields 1-13 as nccl-tests prints them, 14 the algorithm, 15-17 with --traffic ----

class PerfTable {
 public:
  explicit PerfTable(const Options& o) : o_(o), algo_width_(name_width(chorus::algorithm_names(o.coll->name), 4)) {}

  void print_header() const {
    std::string title = fmt::format(kLeadHeader, "", "", "", "", "") +
                        (o_.in_place_first ? "             in-place                       out-of-place       "
                                           : "           out-of-place                       in-place          ");
    std::string names = fmt::format(kLeadHeader, "size", "count", "type", "redop", "root");
    std::string units = fmt::format(kLeadHeader, "(B)", "(elements)", "", "", "");
    for (int i = 0; i < 2; ++i) {
      names += fmt::format("  {:>7}  {:>6}  {:>6}  {:>6}", "time", "algbw", "busbw", "#wrong");
      units += fmt::format("  {:>7}  {:>6}  {:>6}  {:>6}", "(us)", "(GB/s)", "(GB/s)", "");
    }
    names += fmt::format("  {:<{}}", "algo", algo_width_);
    units += fmt::format("  {:<{}}", "", algo_width_);
    if (o_.traffic) {
      title += fmt::format("  {:<{}}{:^34}", "", algo_width_, "  traffic (out of place)");
      names += fmt::format("  {:>12}  {:>12}  {:>4}  {:>12}", "sent", "predicted", "ok", "over_tcp");
      units += fmt::format("  {:>12}  {:>12}  {:>4}  {:>12}", "(B)", "(B)", "", "(B, all)");
    }
    fmt::print("{}\n{}\n{}\n", rtrim(title), rtrim(names), rtrim(units));
  }

  std::string format(const Row& r) const {
    std::string line = lead_columns(r);
    const Measurement* first = o_.in_place_first ? &r.in_place : &r.out_of_place;
    const Measurement* second = o_.in_place_first ? &r.out_of_place : &r.in_place;
    for (const Measurement* m : {first, second}) {
      line += fmt::format("  {}  {:6.2f}  {:6.2f}  {:>6}", format_time(m->time_us), m->algbw, m->busbw,
                          format_wrong(m->wrong));
    }
    // The choice depends on the size only, so both halves of a row normally ran the same algorithm.
    std::string algo = r.out_of_place.algorithm;
    if (r.in_place.algorithm != algo) algo += "/" + r.in_place.algorithm;
    if (!o_.traffic) return line + "  " + algo;
    const Measurement& m = r.out_of_place;
    return line + fmt::format("  {:<{}}  {:>12}  {:>12}  {:>4}  {:>12}", algo, algo_width_, m.sent, m.predicted,
                              m.traffic_ok ? "yes" : "no", m.over_tcp);
  }

 private:
  const Options& o_;
  size_t algo_width_;
};

// ---- the --algos table: one time column per algorithm, then the automatic choice ----

class CompareTable {
 public:
  // `names`: the compared algorithms, as the library spells them.
  CompareTable(const Options& o, std::vector<std::string> names)
      : o_(o), names_(std::move(names)), name_width_(name_width(chorus::algorithm_names(o.coll->name), 7)) {
    for (const std::string& n : names_) time_width_.push_back(std::max<size_t>(9, n.size()));
    for (const std::string& n : names_) sent_width_.push_back(std::max<size_t>(10, n.size()));
  }

  void print_header() const {
    std::string names = fmt::format(kLeadHeader, "size", "count", "type", "redop", "root");
    std::string units = fmt::format(kLeadHeader, "(B)", "(elements)", "", "", "");
    std::string title = fmt::format(kLeadHeader, "", "", "", "", "");
    size_t times = 0;
    for (size_t i = 0; i < names_.size(); ++i) {
      names += fmt::format("  {:>{}}", names_[i], time_width_[i]);
      units += fmt::format("  {:>{}}", "(us)", time_width_[i]);
      times += 2 + time_width_[i];
    }
    names += fmt::format("  {:>9}  {:>{}}  {:>9}  {:>{}}  {:>6}", "auto", "auto", name_width_, "auto/best", "fastest",
                         name_width_, "#wrong");
    units +=
        fmt::format("  {:>9}  {:>{}}  {:>9}  {:>{}}  {:>6}", "(us)", "(algo)", name_width_, "", "", name_width_, "");
    title += fmt::format("{:^{}}", "  time per call, forced", times);
    title += fmt::format("{:^{}}", "  automatic choice", 2 + 9 + 2 + name_width_ + 2 + 9);
    if (o_.traffic) {
      size_t sent = 0;
      for (size_t i = 0; i < names_.size(); ++i) {
        names += fmt::format("  {:>{}}", names_[i], sent_width_[i]);
        units += fmt::format("  {:>{}}", "(B)", sent_width_[i]);
        sent += 2 + sent_width_[i];
      }
      names += fmt::format("  {:>7}", "traffic");
      units += fmt::format("  {:>7}", "ok");
      title += fmt::format("{:{}}{:^{}}", "", 2 + name_width_ + 2 + 6, "  bytes sent per rank, forced", sent);
    }
    fmt::print("{}\n{}\n{}\n", rtrim(title), rtrim(names), rtrim(units));
  }

  std::string format(const CompareRow& r) const {
    std::string line = lead_columns(r);
    for (size_t i = 0; i < names_.size(); ++i)
      line += fmt::format("  {:>{}}", rtrim_left(format_time(r.forced[i].time_us)), time_width_[i]);
    line += fmt::format("  {:>9}  {:>{}}  {:>9.2f}  {:>{}}  {:>6}", rtrim_left(format_time(r.automatic.time_us)),
                        r.automatic.algorithm, name_width_, r.auto_over_best(), names_[r.fastest()], name_width_,
                        format_wrong(r.wrong()));
    if (o_.traffic) {
      // Measured bytes; "measured/predicted!" where the formula disagrees on some rank.
      for (size_t i = 0; i < names_.size(); ++i) {
        const Measurement& m = r.forced[i];
        std::string cell = m.traffic_ok ? std::to_string(m.sent) : fmt::format("{}/{}!", m.sent, m.predicted);
        line += fmt::format("  {:>{}}", cell, sent_width_[i]);
      }
      line += fmt::format("  {:>7}", r.traffic_ok() ? "yes" : "no");
    }
    return line;
  }

  // For each (type, redop, root): which algorithm was fastest at which sizes, where the lead changes hands,
  // and how far the automatic choice was from the fastest.
  void print_summary(const std::vector<CompareRow>& rows) const {
    for (size_t begin = 0; begin < rows.size();) {
      size_t end = begin;
      while (end < rows.size() && rows[end].type == rows[begin].type && rows[end].redop == rows[begin].redop &&
             rows[end].root == rows[begin].root)
        ++end;
      bool several = begin != 0 || end != rows.size();
      std::string what;
      if (several) {
        const CompareRow& r = rows[begin];
        what = fmt::format(" for {}{}{}", chorus::to_string(r.type), r.redop == "none" ? "" : " " + r.redop,
                           r.root >= 0 ? fmt::format(" root {}", r.root) : "");
      }
      summarize(std::span(rows).subspan(begin, end - begin), what);
      begin = end;
    }
  }

 private:
  static std::string rtrim_left(std::string s) {
    s.erase(0, s.find_first_not_of(' '));
    return s;
  }

  void summarize(std::span<const CompareRow> all_rows, const std::string& what) const {
    // Empty calls (nccl-tests prints them for counts below the world size) have no fastest algorithm.
    std::vector<CompareRow> rows;
    for (const CompareRow& r : all_rows)
      if (r.bytes > 0) rows.push_back(r);
    if (rows.empty()) return;
    // Runs of consecutive sizes with the same fastest algorithm.
    struct Run {
      size_t algo, first, last;  // row indices
    };
    std::vector<Run> runs;
    for (size_t k = 0; k < rows.size(); ++k) {
      size_t f = rows[k].fastest();
      if (!runs.empty() && runs.back().algo == f) {
        runs.back().last = k;
      } else {
        runs.push_back({f, k, k});
      }
    }
    auto span_text = [&](const Run& run) {
      return run.first == run.last ? short_size(rows[run.first].bytes)
                                   : short_size(rows[run.first].bytes) + ".." + short_size(rows[run.last].bytes);
    };
    fmt::print("#\n# Fastest algorithm by size{} (sizes in bytes, K = 1024):\n", what);
    for (size_t a = 0; a < names_.size(); ++a) {
      std::string sizes;
      for (const Run& run : runs)
        if (run.algo == a) sizes += (sizes.empty() ? "" : ", ") + span_text(run);
      fmt::print("#   {:<{}}  {}\n", names_[a], name_width_, sizes.empty() ? "never" : sizes);
    }
    std::string order;
    for (const Run& run : runs) order += (order.empty() ? "" : " -> ") + names_[run.algo] + " (" + span_text(run) + ")";
    fmt::print("# Crossovers: {}\n", order);

    size_t worst = 0;
    double log_sum = 0;
    for (size_t k = 0; k < rows.size(); ++k) {
      if (rows[k].auto_over_best() > rows[worst].auto_over_best()) worst = k;
      log_sum += std::log(rows[k].auto_over_best());
    }
    const CompareRow& w = rows[worst];
    // The ratio compares the chosen algorithm's forced column with the fastest one; the auto column's own time
    // (timed in its own rounds) is shown beside it, since the two can differ by the noise between rounds.
    const Measurement* c = w.chosen();
    std::string chosen_forced = c ? rtrim_left(format_time(c->time_us)) + " us forced, " : "";
    fmt::print(
        "# auto/best: worst {:.2f} at {} (auto chose {}: {}{} us in the auto column; fastest {} in {} us); "
        "geometric mean {:.2f}\n",
        w.auto_over_best(), short_size(w.bytes), w.automatic.algorithm, chosen_forced,
        rtrim_left(format_time(w.automatic.time_us)), names_[w.fastest()],
        rtrim_left(format_time(w.forced[w.fastest()].time_us)), std::exp(log_sum / static_cast<double>(rows.size())));
  }

  const Options& o_;
  std::vector<std::string> names_;
  size_t name_width_;
  std::vector<size_t> time_width_, sent_width_;
};

// How much of the machine the rows had: the share of rank 0's host's CPU time that its hypervisor gave to
// other guests ("steal" in /proc/stat) while each row ran, and over the whole run. On a virtual machine with
// shared cores it moves every time in a table, Chorus's and any peer's alike, and it changes from minute to
// minute; a row timed while a large share was stolen says more about the host than about the algorithm.
// Rows at or above --stolen-limit get a note under them and, with --retry-stolen, are timed again.
class StolenTime {
 public:
  // The kernel counts CPU time in ticks (10 ms): a row shorter than this many ticks (of all CPUs together)
  // gets no figure of its own, since one tick more or less would move it by as much as the default limit;
  // judge() takes the span up to its end instead.
  static constexpr uint64_t kMinTicks = 20;

  // A reading of rank 0's host; the other ranks take none (only rank 0's host is judged).
  static std::optional<chorus::HostCpuTime> read(int rank) {
    return rank == 0 ? chorus::host_cpu_time() : std::nullopt;
  }
  // The share stolen while a row ran, from readings before and after it. A row shorter than kMinTicks is
  // judged by the recent past instead: the share over the shortest span that ends with it, starts at one of
  // the `recent` readings and covers kMinTicks or more. Steal comes in stretches of seconds to minutes, so
  // the few hundred milliseconds around a short row say how it fared.
  static StolenReading judge(const std::optional<chorus::HostCpuTime>& before,
                             const std::optional<chorus::HostCpuTime>& after,
                             const std::deque<chorus::HostCpuTime>& recent) {
    StolenReading r;
    if (!before || !after) return r;  // the host does not count it
    if (after->total_ticks - before->total_ticks >= kMinTicks) {
      r.share = chorus::stolen_share(before, after);
      return r;
    }
    r.too_short = true;
    for (auto it = recent.rbegin(); it != recent.rend(); ++it) {
      if (it->total_ticks <= after->total_ticks && after->total_ticks - it->total_ticks >= kMinTicks) {
        r.share = chorus::stolen_share(*it, after);
        r.window_ticks = after->total_ticks - it->total_ticks;
        break;
      }
    }
    return r;
  }
  // Keeps `recent` to what judge() may need after `now`: the newest reading kMinTicks or more before it, and
  // every later one.
  static void remember(std::deque<chorus::HostCpuTime>& recent, const std::optional<chorus::HostCpuTime>& now) {
    if (!now) return;
    recent.push_back(*now);
    while (recent.size() > 1 && now->total_ticks - recent[1].total_ticks >= kMinTicks) recent.pop_front();
  }

  explicit StolenTime(double limit) : limit_(limit), start_(chorus::host_cpu_time()) {}

  static bool over_limit(const StolenReading& r, double limit) { return r.share >= 0 && r.share >= limit; }
  bool over_limit(const StolenReading& r) const { return over_limit(r, limit_); }

  // Counts a row that rank 0 printed and prints its notes under it: the share stolen while it ran, when at
  // or above the limit, and every attempt's share when --retry-stolen timed it again.
  void note_row(const StolenReading& kept, const std::vector<StolenReading>& attempts) {
    ++rows_;
    if (kept.too_short) ++short_;
    if (over_limit(kept)) {
      ++noted_;
      if (kept.too_short) {
        fmt::print(
            "#   ^ {:.0f}% of this host's CPU time was stolen by its hypervisor in the last {} ticks up to the end "
            "of this row (too short to judge alone)\n",
            100 * kept.share, kept.window_ticks);
      } else {
        fmt::print("#   ^ {:.0f}% of this host's CPU time was stolen by its hypervisor while this row ran\n",
                   100 * kept.share);
      }
    }
    if (attempts.size() > 1) {
      ++retaken_;
      more_attempts_ += static_cast<int>(attempts.size()) - 1;
      std::string shares;
      for (size_t i = 0; i < attempts.size(); ++i) {
        if (i) shares += i + 1 == attempts.size() ? " and " : ", ";
        shares += attempts[i].share >= 0 ? fmt::format("{:.0f}%", 100 * attempts[i].share) : "not judged";
      }
      fmt::print("#   ^ timed {} times (--retry-stolen), with {} of this host's CPU time stolen in turn\n",
                 attempts.size(), shares);
    }
  }
  void print_summary() const {
    const std::optional<chorus::HostCpuTime> now = chorus::host_cpu_time();
    if (!start_ || !now) return;  // the host does not count it
    const double share = chorus::stolen_share(start_, now);
    const uint64_t ticks = now->total_ticks - start_->total_ticks;
    if (share < 0 || ticks < kMinTicks) {
      fmt::print(
          "# CPU time stolen by the hypervisor (steal in rank 0's host's /proc/stat): not judged, the rows ran "
          "for {} ticks of CPU time\n",
          ticks);
      return;
    }
    std::string retaken;
    if (retaken_) retaken = fmt::format("; {} rows timed again ({} more attempts)", retaken_, more_attempts_);
    fmt::print(
        "# CPU time stolen by the hypervisor (steal in rank 0's host's /proc/stat) while the rows ran: {:.1f}%;"
        " at or above {:.0f}% during {} of {} rows, {} rows too short to judge alone (under {} ticks of CPU "
        "time: judged by the last {} or more ticks up to their end){}\n",
        100 * share, 100 * limit_, noted_, rows_, short_, kMinTicks, kMinTicks, retaken);
  }

 private:
  double limit_;
  std::optional<chorus::HostCpuTime> start_;
  int rows_ = 0;
  int noted_ = 0;
  int short_ = 0;
  int retaken_ = 0;
  int more_attempts_ = 0;
};

class Bench {
 public:
  Bench(Communicator& comm, const Options& o)
      : comm_(comm),
        o_(o),
        rank_(comm.rank()),
        nranks_(comm.size()),
        buffer_bytes_(o.max_bytes),
        send_(allocate(buffer_bytes_, o.registered != 0)),
        recv_(allocate(buffer_bytes_, o.registered != 0)),
        expected_(o.check > 0 ? allocate(buffer_bytes_) : nullptr) {
    // The first rows too short to judge alone are judged from here (their warm-up included).
    StolenTime::remember(recent_readings_, StolenTime::read(rank_));
  }

  // Checks the algorithm names of the options on one empty call each (collectively): a name the collective
  // does not have throws the library's Error(InvalidArgument), which lists the valid ones. Keeps the names
  // as the library spells them.
  void resolve_algorithms() {
    if (!o_.algorithm.empty()) algorithm_ = probe(o_.algorithm);
    for (const std::string& name : o_.compare) compare_.push_back(probe(name));
  }
  const std::string& algorithm() const { return algorithm_; }
  const std::vector<std::string>& compared() const { return compare_; }

  // Runs every (type, op, root) combination. Each finished row goes to `on_row` (the nccl-tests table) or,
  // with --algos, to `on_compare_row`, on every rank.
  template <class OnRow, class OnCompareRow>
  void run(const OnRow& on_row, const OnCompareRow& on_compare_row) {
    for (DataType type : o_.types) {
      for (ReduceOp op : o_.ops) {
        std::vector<int> roots{-1};
        if (o_.coll->rooted) {
          roots.clear();
          if (o_.root >= 0) {
            roots.push_back(o_.root);
          } else {
            for (int r = 0; r < nranks_; ++r) roots.push_back(r);
          }
        }
        for (int root : roots) {
          const Typed& typed = typed_for(type);
          if (compare_.empty()) {
            time_test(typed, type, op, root, on_row);
          } else {
            compare_test(typed, type, op, root, on_compare_row);
          }
        }
      }
    }
  }

  int64_t local_failed_tests() const { return failed_tests_; }
  double avg_busbw() const { return results_ ? busbw_sum_ / static_cast<double>(results_) : 0; }

 private:
  // What depends on the element type: the input pattern, writing the inputs and checking the outputs. The
  // timing around them does not, so it is compiled once rather than for every type.
  struct Typed {
    size_t ts;
    Pattern (*pattern)(Coll coll, ReduceOp op, int nranks);
    void (Bench::*fill_input)(const Layout& l, const Pattern& pattern, bool in_place, int iter);
    int64_t (Bench::*check_once)(const Layout& l, const Pattern& pattern, DataType type, ReduceOp op, int root,
                                 bool in_place, int iter, std::string_view algorithm);
  };
  template <class T>
  static const Typed& typed_of() {
    static constexpr Typed t{sizeof(T), &Pattern::make_for<T>, &Bench::fill_input<T>, &Bench::check_once<T>};
    return t;
  }

  static const Typed& typed_for(DataType type) {
    switch (type) {
      case DataType::Int8:
        return typed_of<int8_t>();
      case DataType::UInt8:
        return typed_of<uint8_t>();
      case DataType::Int32:
        return typed_of<int32_t>();
      case DataType::UInt32:
        return typed_of<uint32_t>();
      case DataType::Int64:
        return typed_of<int64_t>();
      case DataType::UInt64:
        return typed_of<uint64_t>();
      case DataType::Float16:
        return typed_of<chorus::float16_t>();
      case DataType::BFloat16:
        return typed_of<chorus::bfloat16_t>();
      case DataType::Float32:
        return typed_of<float>();
      case DataType::Float64:
        return typed_of<double>();
    }
    throw std::logic_error("chorus-perf: unknown data type");
  }

  std::string probe(const std::string& name) {
    const int root = o_.root >= 0 ? o_.root : 0;
    launch(Layout{}, o_.types.front(), o_.ops.front(), root, false, chorus::dtype_size(o_.types.front()), 0, name);
    return comm_.last_operation().algorithm;
  }

  template <class F>
  void for_each_size(size_t ts, const F& body) {
    for (size_t size = o_.min_bytes; size <= o_.max_bytes;) {
      Layout l = layout_for(o_.coll->coll, size / ts, nranks_);
      body(l);
      size_t next = o_.step_factor > 1 ? size * o_.step_factor : size + o_.step_bytes;
      if (next <= size) break;  // -b 0 with a factor, or overflow
      size = next;
    }
  }

  template <class R>
  R row_for(const Layout& l, size_t ts, DataType type, ReduceOp op, int root) const {
    R row;
    row.bytes = l.bytes(ts);
    row.count = l.param;
    row.type = type;
    row.redop = o_.coll->reduces ? std::string(chorus::to_string(op)) : "none";
    row.root = root;
    return row;
  }

  void warm_up(DataType type, ReduceOp op, int root, size_t ts, std::string_view algorithm) {
    for (size_t bytes : {o_.max_bytes, o_.min_bytes}) {
      Layout l = layout_for(o_.coll->coll, bytes / ts, nranks_);
      for (int iter = 0; iter < o_.warmup; ++iter) launch(l, type, op, root, false, ts, iter, algorithm);
    }
  }

  // A row timed by `time_once(first)`, and timed again while --retry-stolen allows and at least
  // --stolen-limit of rank 0's host's CPU time was stolen as it ran (rank 0 judges and tells the others, so
  // every rank makes the same calls). The row kept is the first attempt under the limit or not judged, else
  // the one with the least stolen. Results are checked on the first attempt only; the row kept carries its
  // checks, and the run's average bus bandwidth counts the row kept only.
  template <class R, class TimeOnce>
  R retaking(const TimeOnce& time_once) {
    const double busbw_before = busbw_sum_;
    const int64_t results_before = results_;
    double kept_busbw = 0;
    int64_t kept_results = 0;
    R first, kept;
    std::vector<StolenReading> attempts;
    for (;;) {
      const bool is_first = attempts.empty();
      const double busbw_start = busbw_sum_;
      const int64_t results_start = results_;
      const std::optional<chorus::HostCpuTime> before = StolenTime::read(rank_);
      StolenTime::remember(recent_readings_, before);
      R row = time_once(is_first);
      const std::optional<chorus::HostCpuTime> after = StolenTime::read(rank_);
      row.stolen = StolenTime::judge(before, after, recent_readings_);
      StolenTime::remember(recent_readings_, after);
      attempts.push_back(row.stolen);
      const bool over = StolenTime::over_limit(row.stolen, o_.stolen_limit);
      if (is_first) first = row;
      if (is_first || !over || row.stolen.share < kept.stolen.share) {
        kept = std::move(row);
        kept_busbw = busbw_sum_ - busbw_start;
        kept_results = results_ - results_start;
      }
      if (o_.retry_stolen == 0) break;
      int32_t again = over && static_cast<int>(attempts.size()) <= o_.retry_stolen ? 1 : 0;
      comm_.broadcast(&again, &again, 1, DataType::Int32, 0);
      if (!again) break;
    }
    carry_checks(first, kept);
    kept.attempts = std::move(attempts);
    busbw_sum_ = busbw_before + kept_busbw;
    results_ = results_before + kept_results;
    return kept;
  }
  static void carry_check(const Measurement& from, Measurement& to) {
    to.wrong = from.wrong;
    to.traffic_ok = to.traffic_ok && from.traffic_ok;
  }
  static void carry_checks(const Row& from, Row& to) {
    carry_check(from.out_of_place, to.out_of_place);
    carry_check(from.in_place, to.in_place);
  }
  static void carry_checks(const CompareRow& from, CompareRow& to) {
    for (size_t i = 0; i < from.forced.size(); ++i) carry_check(from.forced[i], to.forced[i]);
    carry_check(from.automatic, to.automatic);
  }

  // nccl-tests' TimeTest: warm up at the largest and the smallest size, then measure every size out of
  // place and in place.
  template <class OnRow>
  void time_test(const Typed& typed, DataType type, ReduceOp op, int root, const OnRow& on_row) {
    const size_t ts = typed.ts;
    comm_.barrier();
    warm_up(type, op, root, ts, algorithm_);
    for_each_size(ts, [&](const Layout& l) {
      on_row(retaking<Row>([&](bool first) {
        Row row = row_for<Row>(l, ts, type, op, root);
        row.out_of_place = bench_time(typed, l, type, op, root, false, algorithm_, first);
        row.in_place = bench_time(typed, l, type, op, root, true, algorithm_, first);
        return row;
      }));
    });
  }

  // --algos: every size out of place under each compared algorithm, then under the library's choice.
  template <class OnRow>
  void compare_test(const Typed& typed, DataType type, ReduceOp op, int root, const OnRow& on_row) {
    const size_t ts = typed.ts;
    comm_.barrier();
    for (const std::string& name : compare_) warm_up(type, op, root, ts, name);
    warm_up(type, op, root, ts, {});
    for_each_size(ts, [&](const Layout& l) {
      on_row(retaking<CompareRow>([&](bool first) {
        CompareRow row = row_for<CompareRow>(l, ts, type, op, root);
        // Rounds visit every algorithm in turn and each time is the median over rounds, so a slow stretch of
        // a shared machine hits all algorithms alike instead of whichever happened to run then. Results are
        // checked in the first round (of the first attempt).
        const size_t k = compare_.size();
        std::vector<std::vector<Measurement>> samples(k + 1);
        for (int rep = 0; rep < o_.repeats; ++rep) {
          bool check = first && rep == 0;
          for (size_t i = 0; i < k; ++i)
            samples[i].push_back(bench_time(typed, l, type, op, root, o_.algos_in_place, compare_[i], check));
          samples[k].push_back(bench_time(typed, l, type, op, root, o_.algos_in_place, {}, check));
        }
        auto median = [](std::vector<Measurement>& v) {
          std::optional<int64_t> wrong = v.front().wrong;
          bool traffic_ok = std::all_of(v.begin(), v.end(), [](const Measurement& m) { return m.traffic_ok; });
          std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end(),
                           [](const Measurement& a, const Measurement& b) { return a.time_us < b.time_us; });
          Measurement m = v[v.size() / 2];
          m.wrong = wrong;
          m.traffic_ok = traffic_ok;
          return m;
        };
        for (size_t i = 0; i < k; ++i) row.forced.push_back(median(samples[i]));
        row.automatic = median(samples[k]);
        return row;
      }));
    });
  }

  // One collective on the buffers of layout l, under `algorithm` (empty: the library's choice). Successive
  // iterations move through the buffers (as nccl-tests does) so that small sizes are not measured from a
  // warm cache only.
  void launch(const Layout& l, DataType type, ReduceOp op, int root, bool in_place, size_t ts, int iter,
              std::string_view algorithm) {
    size_t total = l.bytes(ts);
    size_t steps = total ? buffer_bytes_ / total : 1;
    size_t shift = o_.rotate && steps ? total * (static_cast<size_t>(iter) % steps) : 0;
    std::byte* recv = recv_.get() + shift;
    std::byte* send = send_.get() + shift;
    if (in_place) {
      send = recv + l.send_inplace * static_cast<size_t>(rank_) * ts;
      recv = recv + l.recv_inplace * static_cast<size_t>(rank_) * ts;
    }
    // -R 1: every rank's buffers are registered, so the calls say so and the automatic choice uses the tables
    // measured that way.
    const chorus::CallOptions call{algorithm, o_.registered != 0};
    switch (o_.coll->coll) {
      case Coll::AllReduce:
        comm_.all_reduce(send, recv, l.param, type, op, call);
        break;
      case Coll::AllGather:
        comm_.all_gather(send, recv, l.param, type, call);
        break;
      case Coll::ReduceScatter:
        comm_.reduce_scatter(send, recv, l.param, type, op, call);
        break;
      case Coll::Broadcast:
        comm_.broadcast(send, recv, l.param, type, root, call);
        break;
      case Coll::Reduce:
        comm_.reduce(send, recv, l.param, type, op, root, call);
        break;
      case Coll::AllToAll:
        comm_.all_to_all(send, recv, l.param, type, call);
        break;
      case Coll::Gather:
        comm_.gather(send, recv, l.param, type, root, call);
        break;
      case Coll::Scatter:
        comm_.scatter(send, recv, l.param, type, root, call);
        break;
    }
  }

  // Untimed calls before a size's timed ones: with --iters-by-size as many as the peers' harness makes
  // (../shared/peers/mpi_coll.c: 3), else one, as nccl-tests. The first calls of a size find the buffers' pages
  // cold for cross-memory attach: a 2-rank shm all_gather of 16 MiB read its first 50-100 frames of 512 KiB at
  // 2-3 times the steady cost, which one untimed call of 32 frames left in the timed ones (docs/performance.md,
  // "Ring or attach per size class").
  int untimed_calls() const { return o_.iters_by_size ? 3 : 1; }

  // Timed iterations for a size: -n, or with --iters-by-size the schedule of the peers' harness.
  int iters_for(size_t bytes) const {
    if (!o_.iters_by_size) return o_.iters;
    return bytes <= (size_t{1} << 16) ? 200 : bytes <= (size_t{1} << 22) ? 40 : 10;
  }

  // nccl-tests' BenchTime.
  Measurement bench_time(const Typed& typed, const Layout& l, DataType type, ReduceOp op, int root, bool in_place,
                         std::string_view algorithm, bool check = true) {
    const size_t ts = typed.ts;
    Pattern pattern = typed.pattern(o_.coll->coll, op, nranks_);
    if (o_.check > 0 && check) (this->*typed.fill_input)(l, pattern, in_place, /*iter=*/-1);
    // Untimed calls first: one, as nccl-tests makes; with --iters-by-size three, as the peers' harness does.
    for (int w = 0; w < untimed_calls(); ++w) launch(l, type, op, root, in_place, ts, w, algorithm);
    if (algorithm.empty()) {
      // CHORUS_ADAPT: a shape whose near-ties are still being timed runs untimed until the ranks have agreed,
      // so the timed calls measure the settled choice. Every rank's schedule is the same, so every rank runs
      // the same number of these calls.
      for (int iter = 1; iter < 1000000 && comm_.last_operation().exploring; ++iter) {
        launch(l, type, op, root, in_place, ts, iter, algorithm);
      }
    }
    comm_.barrier();

    auto tcp_bytes = [this] {
      chorus::TrafficCounters t = comm_.traffic();
      uint64_t b = 0;
      for (size_t q = 0; q < t.sent_to.size(); ++q) b += t.via[q] == "tcp" ? t.sent_to[q] : 0;
      return b;
    };
    const uint64_t tcp_before = o_.traffic ? tcp_bytes() : 0;
    const int iters = iters_for(l.bytes(ts));
    auto start = std::chrono::steady_clock::now();
    for (int iter = 0; iter < iters; ++iter) {
      // -m N > 1: the iteration's N calls form one group, as nccl-tests' -m does (all_reduces may be fused).
      if (o_.agg > 1) comm_.group_start();
      for (int a = 0; a < o_.agg; ++a) launch(l, type, op, root, in_place, ts, iter * o_.agg + a, algorithm);
      if (o_.agg > 1) comm_.group_end();
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                     (static_cast<double>(iters) * o_.agg);
    // The last timed call, before the collectives below replace it.
    const chorus::OperationInfo last = comm_.last_operation();
    uint64_t over_tcp = o_.traffic ? (tcp_bytes() - tcp_before) / (static_cast<uint64_t>(iters) * o_.agg) : 0;
    seconds = combine_time(seconds);

    Measurement m;
    m.time_us = seconds * 1e6;
    m.algbw = static_cast<double>(l.bytes(ts)) / 1e9 / seconds;
    m.busbw = m.algbw * bus_factor(o_.coll->coll, nranks_);
    m.algorithm = last.algorithm;
    m.iters = iters;
    m.untimed = untimed_calls();
    busbw_sum_ += m.busbw;
    ++results_;

    if (o_.traffic) {
      uint64_t t[3] = {last.bytes_sent, last.predicted_sent, last.bytes_sent != last.predicted_sent ? 1u : 0u};
      comm_.all_reduce(t, t, 3, DataType::UInt64, ReduceOp::Max);
      m.sent = t[0];
      m.predicted = t[1];
      m.traffic_ok = t[2] == 0;
      comm_.all_reduce(&over_tcp, &m.over_tcp, 1, DataType::UInt64, ReduceOp::Sum);
    }

    if (o_.check > 0 && check) {
      int64_t wrong = 0;
      for (int c = 0; c < o_.check; ++c) {
        int64_t local =
            (this->*typed.check_once)(l, pattern, type, op, root, in_place, check_rep_ * o_.check + c, algorithm);
        if (local) ++failed_tests_;
        wrong = local;
        comm_.all_reduce(&wrong, &wrong, 1, DataType::Int64, ReduceOp::Sum);
        if (wrong) break;
      }
      ++check_rep_;
      m.wrong = wrong;
    }
    return m;
  }

  double combine_time(double seconds) {
    switch (o_.average) {
      case 0:
        comm_.broadcast(&seconds, &seconds, 1, DataType::Float64, 0);
        break;
      case 1:
        comm_.all_reduce(&seconds, &seconds, 1, DataType::Float64, ReduceOp::Sum);
        seconds /= nranks_;
        break;
      case 2:
        comm_.all_reduce(&seconds, &seconds, 1, DataType::Float64, ReduceOp::Min);
        break;
      case 3:
        comm_.all_reduce(&seconds, &seconds, 1, DataType::Float64, ReduceOp::Max);
        break;
    }
    return seconds;
  }

  // Clears the receive buffer and writes this rank's input where the (unshifted) call reads it.
  template <class T>
  void fill_input(const Layout& l, const Pattern& pattern, bool in_place, int iter) {
    std::memset(recv_.get(), 0, std::max(l.send, l.recv) * sizeof(T));
    auto* recv = reinterpret_cast<T*>(recv_.get());
    T* input = in_place ? recv + l.send_inplace * static_cast<size_t>(rank_) : reinterpret_cast<T*>(send_.get());
    for (size_t i = 0; i < l.send; ++i) input[i] = make<T>(pattern(rank_, i, iter));
  }

  // Runs the collective once on fresh inputs and returns how many of this rank's output elements differ
  // from the reference.
  template <class T>
  int64_t check_once(const Layout& l, const Pattern& pattern, DataType type, ReduceOp op, int root, bool in_place,
                     int iter, std::string_view algorithm) {
    fill_input<T>(l, pattern, in_place, iter);
    auto* expected = reinterpret_cast<T*>(expected_.get());
    auto input = [&](int r, size_t i) { return make<T>(pattern(r, i, iter)); };
    const size_t rank = static_cast<size_t>(rank_);
    size_t n_out = l.recv;
    switch (o_.coll->coll) {
      case Coll::AllReduce:
        for (size_t i = 0; i < l.recv; ++i)
          expected[i] = reduce_reference<T>(op, nranks_, [&](int r) { return input(r, i); });
        break;
      case Coll::Reduce:
        if (rank_ != root) {
          n_out = 0;  // recv is written on the root only
          break;
        }
        for (size_t i = 0; i < l.recv; ++i)
          expected[i] = reduce_reference<T>(op, nranks_, [&](int r) { return input(r, i); });
        break;
      case Coll::ReduceScatter:
        for (size_t i = 0; i < l.recv; ++i)
          expected[i] = reduce_reference<T>(op, nranks_, [&](int r) { return input(r, rank * l.recv + i); });
        break;
      case Coll::AllGather:
        for (int j = 0; j < nranks_; ++j)
          for (size_t i = 0; i < l.send; ++i) expected[static_cast<size_t>(j) * l.send + i] = input(j, i);
        break;
      case Coll::Broadcast:
        for (size_t i = 0; i < l.recv; ++i) expected[i] = input(root, i);
        break;
      case Coll::AllToAll:
        for (int j = 0; j < nranks_; ++j)
          for (size_t i = 0; i < l.param; ++i)
            expected[static_cast<size_t>(j) * l.param + i] = input(j, rank * l.param + i);
        break;
      case Coll::Gather:
        if (rank_ != root) {
          n_out = 0;  // recv is written on the root only
          break;
        }
        for (int j = 0; j < nranks_; ++j)
          for (size_t i = 0; i < l.send; ++i) expected[static_cast<size_t>(j) * l.send + i] = input(j, i);
        break;
      case Coll::Scatter:
        for (size_t i = 0; i < l.recv; ++i) expected[i] = input(root, rank * l.recv + i);
        break;
    }

    launch(l, type, op, root, in_place, sizeof(T), 0, algorithm);

    const T* out = reinterpret_cast<const T*>(recv_.get()) + (in_place ? l.recv_inplace * rank : 0);
    int64_t wrong = 0;
    for (size_t i = 0; i < n_out; ++i) wrong += !same_value(out[i], expected[i]);
    return wrong;
  }

  Communicator& comm_;
  const Options& o_;
  int rank_;
  int nranks_;
  size_t buffer_bytes_;
  Buffer send_, recv_, expected_;
  std::string algorithm_;             // forced on every call; empty: the library's choice
  std::vector<std::string> compare_;  // --algos, as the library spells them
  int check_rep_ = 0;                 // distinct inputs for every checked measurement
  std::deque<chorus::HostCpuTime> recent_readings_;  // rank 0's, for judging short rows (StolenTime::judge)
  int64_t failed_tests_ = 0;          // measurements in which this rank had wrong elements
  double busbw_sum_ = 0;
  int64_t results_ = 0;
};

// ---- output ----

// One line per rank, in rank order, gathered to rank 0: "#  Rank  0 Group  0 Pid  1234 on   host transport tcp".
std::vector<std::string> describe_ranks(Communicator& comm) {
  struct Identity {
    int64_t pid;
    char host[256];
  };
  Identity me{};
  me.pid = ::getpid();
  if (::gethostname(me.host, sizeof me.host - 1) != 0) std::strcpy(me.host, "?");
  std::vector<Identity> all(comm.rank() == 0 ? comm.size() : 0);
  comm.gather(&me, all.data(), sizeof me, DataType::UInt8, 0);
  std::vector<std::string> lines;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    all[r].host[sizeof all[r].host - 1] = '\0';
    lines.push_back(fmt::format("#  Rank {:2} Group  0 Pid {:6} on {:>10} transport {}", r, all[r].pid, all[r].host,
                                comm.transport_name()));
  }
  return lines;
}

// nccl-tests' preamble, then what chooses the algorithm and what the traffic columns hold.
void print_preamble(const Options& o, const std::vector<std::string>& ranks, const Bench& bench,
                    const chorus::Communicator& comm) {
  bool factor = o.step_factor > 1;
  fmt::print(
      "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: {} "
      "validation: {} graph: 0\n#\n# Using devices\n",
      o.min_bytes, o.max_bytes, factor ? o.step_factor : o.step_bytes, factor ? "factor" : "bytes", o.warmup,
      o.iters_by_size ? std::string("by-size(200<=64K,40<=4M,10; 3 untimed)") : std::to_string(o.iters), o.agg,
      o.check);
  for (const std::string& line : ranks) fmt::print("{}\n", line);
  fmt::print("#\n# chorus {}, reduction kernels: {}{}\n# cost model: {}\n", chorus::version_string(),
             chorus::kernel_isa(), o.registered ? "; buffers registered (chorus::mem_alloc, -R 1)" : "",
             comm.tuning_source());
  if (comm.transport_name().starts_with("shm") && comm.local_size() > 1) {
    fmt::print("# shared memory: large payloads {}{}{}\n",
               comm.cross_memory_attach() ? "by cross-memory attach (one copy)" : "through the rings (two copies)",
               comm.attach_cost() > 0 ? fmt::format("; an attach read measured at {:.1f} copies (CHORUS_SHM_CMA=auto: "
                                                    "attach where under 3)",
                                                    comm.attach_cost())
                                      : std::string(),
               comm.adapts_single_copy() ? "; then each receiver chooses rings or attach from its timings "
                                           "(CHORUS_SHM_ADAPT)"
                                         : "");
  }
  if (const std::string s = comm.transport_settings(); !s.empty()) fmt::print("# {}\n", s);
  if (const std::string s = chorus::idle_cpus_description(); !s.empty()) fmt::print("# {}\n", s);
  fmt::print("#\n");
  if (!bench.compared().empty()) {
    std::string names;
    for (const std::string& n : bench.compared()) names += (names.empty() ? "" : ", ") + n;
    fmt::print(
        "# Algorithms of {}: {}\n"
        "#   each forced in turn (CallOptions), then auto: the library's own choice (CHORUS_ALGO if set, else\n"
        "#   the cost model). {} only; time in us per call: the median over {} rounds that each\n"
        "#   time every algorithm in turn ({} iterations each).\n"
        "# auto/best = the time of the algorithm auto chose (its forced column) / the fastest forced time: 1.00\n"
        "#   when auto picked the fastest. The auto column is auto's own run, equal to that up to timing noise.\n"
        "#   #wrong is summed over every algorithm's check.\n",
        o.coll->name, names, o.algos_in_place ? "In place" : "Out of place", o.repeats, o.iters);
  } else if (!bench.algorithm().empty()) {
    fmt::print("# Algorithm: {}, forced on every timed and checked call (CallOptions)\n", bench.algorithm());
  } else {
    fmt::print("# Algorithm: automatic (CHORUS_ALGO if set, else the cost model's choice for each size)\n");
  }
  if (o.retry_stolen > 0) {
    fmt::print(
        "# Rows timed while {:.0f}% or more of rank 0's host's CPU time was stolen by its hypervisor are timed\n"
        "#   again, up to {} more times (--retry-stolen); each shows its quietest attempt.\n",
        100 * o.stolen_limit, o.retry_stolen);
  }
  if (o.traffic) {
    fmt::print(
        "# Traffic: payload bytes one rank sent in the last timed out-of-place call, measured (sent) and by the\n"
        "#   algorithm's formula (predicted), each the maximum over ranks; ok: equal on every rank.{}\n",
        bench.compared().empty() ? "" : "\n#   A cell reads measured/predicted! where they differ on some rank.");
  }
  fmt::print("#\n");
}

nlohmann::json measurement_json(const Measurement& m, bool traffic) {
  nlohmann::json j{{"time_us", m.time_us}, {"algbw_gbps", m.algbw}, {"busbw_gbps", m.busbw}};
  j["wrong"] = m.wrong ? nlohmann::json(*m.wrong) : nlohmann::json(nullptr);
  j["algorithm"] = m.algorithm;
  j["iters"] = m.iters;
  j["untimed"] = m.untimed;
  if (traffic) j["traffic"] = {{"sent", m.sent}, {"predicted", m.predicted}, {"ok", m.traffic_ok}};
  return j;
}

// The share of the host's CPU time stolen while a row ran (StolenTime): null where the host does not count it
// or where a row too short to judge alone had no span long enough before it; and, as "stolen_attempts", that
// of every attempt --retry-stolen made.
template <class R>
void stolen_json(nlohmann::json& row, const R& r) {
  auto share = [](const StolenReading& s) { return s.share < 0 ? nlohmann::json(nullptr) : nlohmann::json(s.share); };
  row["stolen_share"] = share(r.stolen);
  // A row too short to judge alone: its share is that of this many ticks of CPU time up to its end.
  row["stolen_window_ticks"] = r.stolen.too_short ? nlohmann::json(r.stolen.window_ticks) : nlohmann::json(nullptr);
  nlohmann::json attempts = nlohmann::json::array();
  for (const StolenReading& a : r.attempts) attempts.push_back(share(a));
  row["stolen_attempts"] = std::move(attempts);
}

template <class R>
nlohmann::json lead_json(const R& r) {
  return {
      {"size", r.bytes}, {"count", r.count}, {"type", chorus::to_string(r.type)}, {"redop", r.redop}, {"root", r.root}};
}

void write_json(const std::string& path, const Options& o, int nranks, std::string_view transport, const Bench& bench,
                const std::vector<Row>& rows, const std::vector<CompareRow>& compare_rows, int64_t failed,
                double avg_busbw) {
  nlohmann::json j;
  j["collective"] = o.coll->name;
  j["nranks"] = nranks;
  j["transport"] = transport;
  j["options"] = {{"minbytes", o.min_bytes},
                  {"maxbytes", o.max_bytes},
                  {"stepbytes", o.step_bytes},
                  {"stepfactor", o.step_factor},
                  {"iters", o.iters},
                  {"iters_by_size", o.iters_by_size},
                  {"in_place_first", o.in_place_first},
                  {"warmup_iters", o.warmup},
                  {"agg_iters", o.agg},
                  {"check", o.check},
                  {"average", o.average},
                  {"algorithm", bench.algorithm()},
                  {"algos", bench.compared()},
                  {"traffic", o.traffic},
                  {"rotate", o.rotate},
                  {"registered", o.registered != 0},
                  {"algos_in_place", o.algos_in_place},
                  {"retry_stolen", o.retry_stolen},
                  {"stolen_limit", o.stolen_limit}};
  nlohmann::json results = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json row = lead_json(r);
    row["out_of_place"] = measurement_json(r.out_of_place, o.traffic);
    row["in_place"] = measurement_json(r.in_place, o.traffic);
    stolen_json(row, r);
    results.push_back(std::move(row));
  }
  for (const CompareRow& r : compare_rows) {
    nlohmann::json row = lead_json(r);
    nlohmann::json forced = nlohmann::json::object();
    for (size_t i = 0; i < r.forced.size(); ++i) forced[bench.compared()[i]] = measurement_json(r.forced[i], o.traffic);
    row["forced"] = std::move(forced);
    row["auto"] = measurement_json(r.automatic, false);
    row["fastest"] = bench.compared()[r.fastest()];
    row["auto_over_best"] = r.auto_over_best();
    stolen_json(row, r);
    results.push_back(std::move(row));
  }
  j["results"] = std::move(results);
  j["out_of_bounds"] = failed;
  if (compare_rows.empty()) j["avg_busbw_gbps"] = avg_busbw;
  std::ofstream out(path);
  out << j.dump(2) << '\n';
  if (!out) throw std::runtime_error("cannot write " + path);
}

using chorus::tools::rank_label;

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (std::optional<int> rc = parse_options(argc, argv, o)) return *rc;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  std::unique_ptr<Communicator> comm;
  try {
    chorus::CommOptions options;
    if (o.timeout_s > 0) options.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
    comm = Communicator::from_env(options);
    const int rank = comm->rank(), nranks = comm->size();
    if (o.coll->rooted && o.root >= nranks) {
      fmt::print(stderr, "chorus-perf: --root {} is not a rank of a world of {}\n", o.root, nranks);
      return kUsageError;
    }

    Bench bench(*comm, o);
    try {
      bench.resolve_algorithms();
    } catch (const chorus::Error& e) {
      if (e.code() != chorus::ErrorCode::InvalidArgument) throw;
      // Every rank got the same arguments and the same error; rank 0 reports it. The others wait for that
      // (an InvalidArgument leaves the communicator usable), or a launcher that stops the job when the first
      // rank exits could kill rank 0 before it prints.
      if (rank == 0) fmt::print(stderr, "chorus-perf: {}\n", e.what());
      comm->barrier();
      return kUsageError;
    }

    std::vector<std::string> identities = describe_ranks(*comm);
    PerfTable table(o);
    CompareTable compare_table(o, bench.compared());
    if (rank == 0) {
      print_preamble(o, identities, bench, *comm);
      if (bench.compared().empty()) {
        table.print_header();
      } else {
        compare_table.print_header();
      }
    }

    std::vector<Row> rows;
    std::vector<CompareRow> compare_rows;
    StolenTime stolen(o.stolen_limit);
    bench.run(
        [&](const Row& row) {
          if (rank != 0) return;
          fmt::print("{}\n", table.format(row));
          stolen.note_row(row.stolen, row.attempts);
          rows.push_back(row);
        },
        [&](const CompareRow& row) {
          if (rank != 0) return;
          fmt::print("{}\n", compare_table.format(row));
          stolen.note_row(row.stolen, row.attempts);
          for (size_t i = 0; i < row.forced.size(); ++i) {
            if (row.forced[i].wrong.value_or(0) == 0) continue;
            std::fflush(stdout);
            fmt::print(stderr, "chorus-perf: {} of {} B ({} {} root {}) with algorithm {}: {} wrong elements\n",
                       o.coll->name, row.bytes, chorus::to_string(row.type), row.redop, row.root, bench.compared()[i],
                       *row.forced[i].wrong);
          }
          if (row.automatic.wrong.value_or(0) != 0) {
            std::fflush(stdout);
            fmt::print(stderr,
                       "chorus-perf: {} of {} B ({} {} root {}) with the automatic choice ({}): {} wrong "
                       "elements\n",
                       o.coll->name, row.bytes, chorus::to_string(row.type), row.redop, row.root,
                       row.automatic.algorithm, *row.automatic.wrong);
          }
          compare_rows.push_back(row);
        });

    int64_t failed = bench.local_failed_tests();
    comm->all_reduce(&failed, &failed, 1, DataType::Int64, ReduceOp::Sum);
    // Shared memory's waits over the whole run, every rank's summed (read before the sum's own call).
    const chorus::TrafficCounters own = comm->traffic();
    uint64_t waits[2] = {own.sleeps, own.missed_wakeups};
    comm->all_reduce(waits, waits, 2, DataType::UInt64, ReduceOp::Sum);
    if (rank == 0) {
      if (!compare_rows.empty()) compare_table.print_summary(compare_rows);
      fmt::print("# Out of bounds values : {} {}\n", failed, failed ? "FAILED" : "OK");
      if (compare_rows.empty()) fmt::print("# Avg bus bandwidth    : {:g}\n", bench.avg_busbw());
      if (comm->adapts_single_copy()) {
        const chorus::TrafficCounters t = comm->traffic();
        fmt::print(
            "# shared memory, rank 0's payloads received: large ones {} through the rings, {} by cross-memory "
            "attach (mid-sized exchange frames included; {} large ones from idle senders, chosen apart); its "
            "choices between them changed {} times; it sent {} exchange frames the way its receiver chose for their "
            "pair\n",
            t.ring_large_frames, t.attach_reads, t.idle_sender_frames, t.path_switches, t.paired_frames);
      }
      if (waits[0] > 0 || waits[1] > 0) {
        fmt::print("# shared memory waits, all ranks: {} went to sleep, {} missed wake-ups{}\n", waits[0], waits[1],
                   waits[1] > 0 ? " (a wait slept its whole 100 ms slice although what it waited for had come: a "
                                  "bug in Chorus, please report it with this output)"
                                : "");
      }
      stolen.print_summary();
      fmt::print("#\n");
      if (!o.json_path.empty()) {
        write_json(o.json_path, o, nranks, comm->transport_name(), bench, rows, compare_rows, failed,
                   bench.avg_busbw());
      }
    }
    return failed ? kFailure : 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "chorus-perf: rank {}: {}\n", rank_label(comm.get()), e.what());
    return kFailure;
  }
}
