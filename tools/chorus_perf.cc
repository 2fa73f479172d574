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
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace {

using chorus::Communicator;
using chorus::DataType;
using chorus::ReduceOp;

constexpr int kUsageError = 2;
constexpr int kFailure = 1;

// ---- collectives ----

enum class Coll { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll };

struct CollInfo {
  Coll coll;
  std::string_view name;   // as on the command line
  std::string_view alias;  // nccl-tests' spelling
  bool reduces;            // takes a ReduceOp
  bool rooted;             // takes a root
};

constexpr std::array<CollInfo, 6> kColls{{
    {Coll::AllReduce, "allreduce", "all_reduce", true, false},
    {Coll::AllGather, "allgather", "all_gather", false, false},
    {Coll::ReduceScatter, "reducescatter", "reduce_scatter", true, false},
    {Coll::Broadcast, "broadcast", "broadcast", false, true},
    {Coll::Reduce, "reduce", "reduce", true, true},
    {Coll::AllToAll, "alltoall", "all_to_all", false, false},
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
      return {per_rank, per_rank, per_rank * nranks, per_rank, 0};
    case Coll::ReduceScatter:
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
  int warmup = 5;
  int check = 1;
  int root = 0;     // -1: every rank in turn
  int average = 1;  // 0 rank 0, 1 mean, 2 min, 3 max
  int agg = 1;
  std::vector<DataType> types;
  std::vector<ReduceOp> ops;
  double timeout_s = 0;  // 0: the library's default
  std::string json_path;
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
                 "allreduce, allgather, reducescatter, broadcast, reduce or alltoall "
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
  app.add_option("-w,--warmup_iters", o.warmup, "Warm-up iterations at the largest and the smallest size")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-m,--agg_iters", o.agg, "Collectives per timed iteration")
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
  app.add_option("-a,--average", o.average,
                 "Time reported across ranks: 0 rank 0's, 1 the average, 2 the minimum, 3 the maximum")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("-T,--timeout", o.timeout_s, "Bound on every collective, in seconds (default: the library's)")
      ->type_name("SECONDS")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", o.json_path, "Also write the results as JSON to FILE (rank 0)")->type_name("FILE");
  app.footer(
      "Exit status: 0 success, 1 wrong results or a Chorus error, 2 bad usage.\n"
      "Columns: size (B) and count (elements) as nccl-tests defines them per collective; time in us per\n"
      "collective; algbw = size / time and busbw = algbw * factor in GB/s (1e9); #wrong summed over ranks.");
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
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  return std::nullopt;
}

// ---- buffers ----

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

// Page-aligned, zeroed (so every page is mapped before anything is timed).
Buffer allocate(size_t bytes) {
  constexpr size_t kAlign = 4096;
  size_t rounded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
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
    if (coll == Coll::AllGather || coll == Coll::Broadcast || coll == Coll::AllToAll || op == ReduceOp::Min ||
        op == ReduceOp::Max) {
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
};

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  DataType type{};
  std::string redop;
  int root = -1;
  Measurement out_of_place, in_place;
};

std::string format_time(double us) {
  if (us >= 10000.0) return fmt::format("{:7.0f}", us);
  if (us >= 100.0) return fmt::format("{:7.1f}", us);
  return fmt::format("{:7.2f}", us);
}

std::string format_row(const Row& r) {
  std::string line =
      fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", r.bytes, r.count, chorus::to_string(r.type), r.redop, r.root);
  for (const Measurement* m : {&r.out_of_place, &r.in_place}) {
    line += fmt::format("  {}  {:6.2f}  {:6.2f}  {:>6}", format_time(m->time_us), m->algbw, m->busbw,
                        m->wrong ? std::to_string(*m->wrong) : std::string("N/A"));
  }
  return line;
}

std::string rtrim(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

class Bench {
 public:
  Bench(Communicator& comm, const Options& o)
      : comm_(comm),
        o_(o),
        rank_(comm.rank()),
        nranks_(comm.size()),
        buffer_bytes_(o.max_bytes),
        send_(allocate(buffer_bytes_)),
        recv_(allocate(buffer_bytes_)),
        expected_(o.check > 0 ? allocate(buffer_bytes_) : nullptr) {}

  // Runs every (type, op, root) combination; returns the rows (filled on every rank, printed by the caller
  // as they come through `on_row`).
  template <class OnRow>
  void run(const OnRow& on_row) {
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
        for (int root : roots) dispatch(type, [&]<class T>() { time_test<T>(type, op, root, on_row); });
      }
    }
  }

  int64_t local_failed_tests() const { return failed_tests_; }
  double avg_busbw() const { return results_ ? busbw_sum_ / static_cast<double>(results_) : 0; }

 private:
  template <class F>
  static void dispatch(DataType type, const F& f) {
    switch (type) {
      case DataType::Int8:
        f.template operator()<int8_t>();
        break;
      case DataType::UInt8:
        f.template operator()<uint8_t>();
        break;
      case DataType::Int32:
        f.template operator()<int32_t>();
        break;
      case DataType::UInt32:
        f.template operator()<uint32_t>();
        break;
      case DataType::Int64:
        f.template operator()<int64_t>();
        break;
      case DataType::UInt64:
        f.template operator()<uint64_t>();
        break;
      case DataType::Float16:
        f.template operator()<chorus::float16_t>();
        break;
      case DataType::BFloat16:
        f.template operator()<chorus::bfloat16_t>();
        break;
      case DataType::Float32:
        f.template operator()<float>();
        break;
      case DataType::Float64:
        f.template operator()<double>();
        break;
    }
  }

  // nccl-tests' TimeTest: warm up at the largest and the smallest size, then measure every size out of
  // place and in place.
  template <class T, class OnRow>
  void time_test(DataType type, ReduceOp op, int root, const OnRow& on_row) {
    constexpr size_t ts = sizeof(T);
    comm_.barrier();
    for (size_t bytes : {o_.max_bytes, o_.min_bytes}) {
      Layout l = layout_for(o_.coll->coll, bytes / ts, nranks_);
      for (int iter = 0; iter < o_.warmup; ++iter) launch(l, type, op, root, false, ts, iter);
    }
    for (size_t size = o_.min_bytes; size <= o_.max_bytes;) {
      Layout l = layout_for(o_.coll->coll, size / ts, nranks_);
      Row row;
      row.bytes = l.bytes(ts);
      row.count = l.param;
      row.type = type;
      row.redop = o_.coll->reduces ? std::string(chorus::to_string(op)) : "none";
      row.root = root;
      row.out_of_place = bench_time<T>(l, type, op, root, false);
      row.in_place = bench_time<T>(l, type, op, root, true);
      on_row(row);
      size_t next = o_.step_factor > 1 ? size * o_.step_factor : size + o_.step_bytes;
      if (next <= size) break;  // -b 0 with a factor, or overflow
      size = next;
    }
  }

  // One collective on the buffers of layout l. Successive iterations move through the buffers (as
  // nccl-tests does) so that small sizes are not measured from a warm cache only.
  void launch(const Layout& l, DataType type, ReduceOp op, int root, bool in_place, size_t ts, int iter) {
    size_t total = l.bytes(ts);
    size_t steps = total ? buffer_bytes_ / total : 1;
    size_t shift = steps ? total * (static_cast<size_t>(iter) % steps) : 0;
    std::byte* recv = recv_.get() + shift;
    std::byte* send = send_.get() + shift;
    if (in_place) {
      send = recv + l.send_inplace * static_cast<size_t>(rank_) * ts;
      recv = recv + l.recv_inplace * static_cast<size_t>(rank_) * ts;
    }
    switch (o_.coll->coll) {
      case Coll::AllReduce:
        comm_.all_reduce(send, recv, l.param, type, op);
        break;
      case Coll::AllGather:
        comm_.all_gather(send, recv, l.param, type);
        break;
      case Coll::ReduceScatter:
        comm_.reduce_scatter(send, recv, l.param, type, op);
        break;
      case Coll::Broadcast:
        comm_.broadcast(send, recv, l.param, type, root);
        break;
      case Coll::Reduce:
        comm_.reduce(send, recv, l.param, type, op, root);
        break;
      case Coll::AllToAll:
        comm_.all_to_all(send, recv, l.param, type);
        break;
    }
  }

  // nccl-tests' BenchTime.
  template <class T>
  Measurement bench_time(const Layout& l, DataType type, ReduceOp op, int root, bool in_place) {
    constexpr size_t ts = sizeof(T);
    Pattern pattern = Pattern::make_for<T>(o_.coll->coll, op, nranks_);
    if (o_.check > 0) fill_input<T>(l, pattern, in_place, /*iter=*/-1);
    launch(l, type, op, root, in_place, ts, 0);
    comm_.barrier();

    auto start = std::chrono::steady_clock::now();
    for (int iter = 0; iter < o_.iters; ++iter) {
      for (int a = 0; a < o_.agg; ++a) launch(l, type, op, root, in_place, ts, iter * o_.agg + a);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                     (static_cast<double>(o_.iters) * o_.agg);
    seconds = combine_time(seconds);

    Measurement m;
    m.time_us = seconds * 1e6;
    m.algbw = static_cast<double>(l.bytes(ts)) / 1e9 / seconds;
    m.busbw = m.algbw * bus_factor(o_.coll->coll, nranks_);
    busbw_sum_ += m.busbw;
    ++results_;

    if (o_.check > 0) {
      int64_t wrong = 0;
      for (int c = 0; c < o_.check; ++c) {
        int64_t local = check_once<T>(l, pattern, type, op, root, in_place, check_rep_ * o_.check + c);
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
                     int iter) {
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
    }

    launch(l, type, op, root, in_place, sizeof(T), 0);

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
  int check_rep_ = 0;         // distinct inputs for every checked measurement
  int64_t failed_tests_ = 0;  // measurements in which this rank had wrong elements
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

void print_header(const Options& o, const std::vector<std::string>& ranks) {
  bool factor = o.step_factor > 1;
  fmt::print(
      "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: {} "
      "validation: {} graph: 0\n#\n# Using devices\n",
      o.min_bytes, o.max_bytes, factor ? o.step_factor : o.step_bytes, factor ? "factor" : "bytes", o.warmup, o.iters,
      o.agg, o.check);
  for (const std::string& line : ranks) fmt::print("{}\n", line);
  fmt::print("#\n");
  fmt::print("{}\n", rtrim(fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place"
                                       "                       in-place",
                                       "", "", "", "", "")));
  constexpr std::string_view kColumns =
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}";
  fmt::print("{}\n", fmt::format(kColumns, "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                                 "time", "algbw", "busbw", "#wrong"));
  fmt::print("{}\n", rtrim(fmt::format(kColumns, "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
                                       "(us)", "(GB/s)", "(GB/s)", "")));
}

nlohmann::json measurement_json(const Measurement& m) {
  nlohmann::json j{{"time_us", m.time_us}, {"algbw_gbps", m.algbw}, {"busbw_gbps", m.busbw}};
  j["wrong"] = m.wrong ? nlohmann::json(*m.wrong) : nlohmann::json(nullptr);
  return j;
}

void write_json(const std::string& path, const Options& o, int nranks, std::string_view transport,
                const std::vector<Row>& rows, int64_t failed, double avg_busbw) {
  nlohmann::json j;
  j["collective"] = o.coll->name;
  j["nranks"] = nranks;
  j["transport"] = transport;
  j["options"] = {{"minbytes", o.min_bytes},     {"maxbytes", o.max_bytes}, {"stepbytes", o.step_bytes},
                  {"stepfactor", o.step_factor}, {"iters", o.iters},        {"warmup_iters", o.warmup},
                  {"agg_iters", o.agg},          {"check", o.check},        {"average", o.average}};
  nlohmann::json results = nlohmann::json::array();
  for (const Row& r : rows) {
    results.push_back({{"size", r.bytes},
                       {"count", r.count},
                       {"type", chorus::to_string(r.type)},
                       {"redop", r.redop},
                       {"root", r.root},
                       {"out_of_place", measurement_json(r.out_of_place)},
                       {"in_place", measurement_json(r.in_place)}});
  }
  j["results"] = std::move(results);
  j["out_of_bounds"] = failed;
  j["avg_busbw_gbps"] = avg_busbw;
  std::ofstream out(path);
  out << j.dump(2) << '\n';
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string rank_label(const Communicator* comm) {
  if (comm != nullptr) return std::to_string(comm->rank());
  const char* env = std::getenv("CHORUS_RANK");
  return env != nullptr ? env : "?";
}

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

    std::vector<std::string> identities = describe_ranks(*comm);
    if (rank == 0) print_header(o, identities);

    Bench bench(*comm, o);
    std::vector<Row> rows;
    bench.run([&](const Row& row) {
      if (rank != 0) return;
      fmt::print("{}\n", format_row(row));
      rows.push_back(row);
    });

    int64_t failed = bench.local_failed_tests();
    comm->all_reduce(&failed, &failed, 1, DataType::Int64, ReduceOp::Sum);
    if (rank == 0) {
      fmt::print("# Out of bounds values : {} {}\n", failed, failed ? "FAILED" : "OK");
      fmt::print("# Avg bus bandwidth    : {:g}\n#\n", bench.avg_busbw());
      if (!o.json_path.empty())
        write_json(o.json_path, o, nranks, comm->transport_name(), rows, failed, bench.avg_busbw());
    }
    return failed ? kFailure : 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "chorus-perf: rank {}: {}\n", rank_label(comm.get()), e.what());
    return kFailure;
  }
}
