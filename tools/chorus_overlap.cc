// chorus-overlap: how much of a data-parallel training step's communication hides behind its compute.
//
//   chorus-run -n 2 -- chorus-overlap --model resnet50 --scale 0.25 --mode all --policy all
//
// Every rank runs the steps of a 100-layer model: forward, then backward layer by layer from the output to
// the input, then the gradients' all_reduce (averaged). Modes:
//   none    backward, then one flat synchronous all_reduce of every gradient, then the next forward;
//   coarse  backward, then one all_reduce_async of every gradient, overlapped with the next forward;
//   fine    chorus::Reducer: buckets launched while backward still runs (--policy, --bucket-mb).
// Compute is modelled (the thread sleeps, as if an accelerator computed: the CPU stays free) or real
// (weight-gradient matrix products on the CPU, sized from each layer, calibrated to --compute-ms).
//
// Figures per configuration (medians over --steps, each step's time the slowest rank's):
//   compute_ms  forward + backward with no communication;
//   comm_ms     the same communication with no compute;
//   step_ms     the full step;
//   exposed     step - compute, the communication that was not hidden, as ms and % of the step;
//   step/max    step / max(compute, comm): 1.0 is perfect overlap.
// The last line is `overlap: mode=<m> policy=<p> step_ms=<x> compute_ms=<x> comm_ms=<x> exposed_pct=<x>`.
#include <chorus/chorus.h>
#include <chorus/trace.h>
#include <fmt/core.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tool_util.h"

namespace {

using chorus::Communicator;
using chorus::DataType;
using chorus::ReduceOp;
using Clock = std::chrono::steady_clock;

constexpr int kUsageError = 2;
constexpr int kFailure = 1;
constexpr size_t kLayers = 100;
constexpr size_t kMiB = size_t{1} << 20;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// ---- models: real parameter shapes, grouped into exactly 100 layers ----

struct Tensor {
  std::string name;
  size_t count;
};

struct Layer {
  std::string name;  // first tensor's name, "+N" when N more tensors were merged into it
  size_t count = 0;  // parameters (float32)
};

// torchvision's resnet50 (v1.5), in named_parameters() order: 161 tensors, 25,557,032 parameters.
std::vector<Tensor> resnet50_tensors() {
  std::vector<Tensor> t;
  auto conv = [&](const std::string& name, size_t out, size_t in, size_t k) {
    t.push_back({name + ".weight", out * in * k * k});
  };
  auto bn = [&](const std::string& name, size_t c) {
    t.push_back({name + ".weight", c});
    t.push_back({name + ".bias", c});
  };
  conv("conv1", 64, 3, 7);
  bn("bn1", 64);
  const size_t planes[] = {64, 128, 256, 512};
  const size_t blocks[] = {3, 4, 6, 3};
  size_t in = 64;
  for (size_t l = 0; l < 4; ++l) {
    for (size_t b = 0; b < blocks[l]; ++b) {
      std::string p = "layer" + std::to_string(l + 1) + "." + std::to_string(b);
      conv(p + ".conv1", planes[l], in, 1);
      bn(p + ".bn1", planes[l]);
      conv(p + ".conv2", planes[l], planes[l], 3);
      bn(p + ".bn2", planes[l]);
      conv(p + ".conv3", planes[l] * 4, planes[l], 1);
      bn(p + ".bn3", planes[l] * 4);
      if (b == 0) {
        conv(p + ".downsample.0", planes[l] * 4, in, 1);
        bn(p + ".downsample.1", planes[l] * 4);
      }
      in = planes[l] * 4;
    }
  }
  t.push_back({"fc.weight", 1000 * 2048});
  t.push_back({"fc.bias", 1000});
  return t;
}

// bert-base-uncased (BertModel with its pooler), in named_parameters() order: 199 tensors, 109,482,240
// parameters.
std::vector<Tensor> bert_base_tensors() {
  constexpr size_t h = 768, ffn = 3072;
  std::vector<Tensor> t;
  auto linear = [&](const std::string& name, size_t out, size_t in) {
    t.push_back({name + ".weight", out * in});
    t.push_back({name + ".bias", out});
  };
  auto norm = [&](const std::string& name) {
    t.push_back({name + ".weight", h});
    t.push_back({name + ".bias", h});
  };
  t.push_back({"embeddings.word_embeddings.weight", 30522 * h});
  t.push_back({"embeddings.position_embeddings.weight", 512 * h});
  t.push_back({"embeddings.token_type_embeddings.weight", 2 * h});
  norm("embeddings.LayerNorm");
  for (int l = 0; l < 12; ++l) {
    std::string p = "encoder.layer." + std::to_string(l);
    linear(p + ".attention.self.query", h, h);
    linear(p + ".attention.self.key", h, h);
    linear(p + ".attention.self.value", h, h);
    linear(p + ".attention.output.dense", h, h);
    norm(p + ".attention.output.LayerNorm");
    linear(p + ".intermediate.dense", ffn, h);
    linear(p + ".output.dense", h, ffn);
    norm(p + ".output.LayerNorm");
  }
  linear("pooler.dense", h, h);
  return t;
}

// Exactly kLayers layers from consecutive tensors: while there are too many, the adjacent pair with the
// smallest sum is merged (the first such pair on ties), so biases and norms join their neighbours and large
// tensors stay alone; while there are too few, the largest layer is split in two halves.
std::vector<Layer> group_layers(const std::vector<Tensor>& tensors) {
  std::vector<Layer> layers;
  std::vector<size_t> merged;
  for (const Tensor& t : tensors) {
    layers.push_back({t.name, t.count});
    merged.push_back(0);
  }
  while (layers.size() > kLayers) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < layers.size(); ++i)
      if (layers[i].count + layers[i + 1].count < layers[best].count + layers[best + 1].count) best = i;
    layers[best].count += layers[best + 1].count;
    merged[best] += 1 + merged[best + 1];
    layers.erase(layers.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  for (size_t i = 0; i < layers.size(); ++i)
    if (merged[i] > 0) layers[i].name += "+" + std::to_string(merged[i]);
  while (layers.size() < kLayers) {
    auto it = std::max_element(layers.begin(), layers.end(),
                               [](const Layer& a, const Layer& b) { return a.count < b.count; });
    Layer second{it->name + "/2", it->count - it->count / 2};
    it->count /= 2;
    it->name += "/1";
    layers.insert(it + 1, second);
  }
  return layers;
}

std::vector<Layer> build_model(const std::string& model, double uniform_mb, double scale) {
  std::vector<Layer> layers;
  if (model == "resnet50") {
    layers = group_layers(resnet50_tensors());
  } else if (model == "bert-base") {
    layers = group_layers(bert_base_tensors());
  } else {
    size_t count = static_cast<size_t>(uniform_mb * static_cast<double>(kMiB) / sizeof(float));
    for (size_t i = 0; i < kLayers; ++i) layers.push_back({"layer" + std::to_string(i), count});
  }
  for (Layer& l : layers)
    l.count = std::max<size_t>(1, static_cast<size_t>(std::llround(static_cast<double>(l.count) * scale)));
  return layers;
}

// ---- options ----

enum class Mode { None, Coarse, Fine };
const char* mode_name(Mode m) {
  switch (m) {
    case Mode::None:
      return "none";
    case Mode::Coarse:
      return "coarse";
    case Mode::Fine:
      return "fine";
  }
  return "?";
}

struct Options {
  std::string model = "resnet50";
  double uniform_mb = 4;
  double scale = 1;
  bool real_compute = false;
  double compute_ms = 0;   // backward; 0: from --comm-fraction
  double forward_ms = -1;  // -1: forward_ratio * backward
  double forward_ratio = 0.5;
  double comm_fraction = 0.3;
  std::vector<Mode> modes;
  std::vector<chorus::BucketPolicy> policies;
  std::vector<double> bucket_mb;
  double first_bucket_mb = 1;
  double partition_mb = 4;
  bool bucket_view = true;
  int steps = 10;
  int warmup = 3;
  double timeout_s = 0;
  bool list_layers = false;
};

std::optional<int> parse_options(int argc, char** argv, Options& o) {
  CLI::App app{
      "chorus-overlap: overlap of gradient communication with a training step's compute.\n"
      "Run under a launcher: chorus-run -n 2 -- chorus-overlap --model resnet50 --scale 0.25"};
  std::string compute = "modelled", mode = "all", policy = "all", buckets = "25";
  app.add_option("--model", o.model, "resnet50, bert-base or uniform (100 layers of --uniform-mb)")
      ->check(CLI::IsMember({"resnet50", "bert-base", "uniform"}))
      ->capture_default_str();
  app.add_option("--uniform-mb", o.uniform_mb, "Layer size of --model uniform, MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--scale", o.scale, "Multiplies every layer's parameter count (0.25: a quarter of the model)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--compute", compute, "modelled (the thread sleeps; the CPU stays free) or real (CPU matrix products)")
      ->check(CLI::IsMember({"modelled", "modeled", "real"}))
      ->capture_default_str();
  app.add_option("--compute-ms", o.compute_ms,
                 "Backward compute per step, ms (0: chosen so that communication is --comm-fraction of the "
                 "no-overlap step)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--comm-fraction", o.comm_fraction, "With --compute-ms 0: communication's share of the none step")
      ->check(CLI::Range(0.01, 0.99))
      ->capture_default_str();
  app.add_option("--forward-ms", o.forward_ms, "Forward compute per step, ms (default: --forward-ratio x backward)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--forward-ratio", o.forward_ratio, "Forward compute as a fraction of backward")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--mode", mode, "none, coarse, fine, or all")
      ->check(CLI::IsMember({"none", "coarse", "fine", "all"}))
      ->capture_default_str();
  app.add_option("--policy", policy, "fine mode: ready_order, front_first, largest_first, or all")
      ->capture_default_str();
  app.add_option("--bucket-mb", buckets, "fine mode: bucket cap in MiB, or a list to sweep: 1,5,25,100")
      ->capture_default_str();
  app.add_option("--first-bucket-mb", o.first_bucket_mb, "fine mode: the first bucket's cap, MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--partition-mb", o.partition_mb, "fine mode, front_first: partition size, MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--bucket-view", o.bucket_view, "fine mode: gradients live in the buckets (1) or are copied (0)")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Timed steps per configuration")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--list-layers", o.list_layers, "Print the model's 100 layers and exit (no launcher needed)");
  app.add_option("-T,--timeout", o.timeout_s, "Bound on every collective, s (default: the library's)")
      ->check(CLI::PositiveNumber);
  app.footer(
      "Figures are medians over the timed steps of the slowest rank. Set CHORUS_TRACE=<dir> to write a timeline "
      "(one file per rank) showing every layer's compute next to the all_reduces.");
  try {
    app.parse(argc, argv);
    o.real_compute = compute == "real";
    if (mode == "all") {
      o.modes = {Mode::None, Mode::Coarse, Mode::Fine};
    } else {
      o.modes = {mode == "none" ? Mode::None : mode == "coarse" ? Mode::Coarse : Mode::Fine};
    }
    if (policy == "all") {
      o.policies = {chorus::BucketPolicy::ReadyOrder, chorus::BucketPolicy::FrontFirst,
                    chorus::BucketPolicy::LargestFirst};
    } else {
      std::stringstream ss(policy);
      for (std::string item; std::getline(ss, item, ',');) {
        try {
          o.policies.push_back(chorus::parse_bucket_policy(item));
        } catch (const chorus::Error& e) {
          throw CLI::ValidationError("--policy", e.message());
        }
      }
    }
    std::stringstream ss(buckets);
    for (std::string item; std::getline(ss, item, ',');) {
      char* end = nullptr;
      double v = std::strtod(item.c_str(), &end);
      if (item.empty() || end == nullptr || *end != '\0' || !(v > 0))
        throw CLI::ValidationError("--bucket-mb", "'" + item + "' is not a positive number of MiB");
      o.bucket_mb.push_back(v);
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  return std::nullopt;
}

// ---- compute ----

// Backward and forward compute of the model on the calling thread, wrapped in trace scopes.
class Compute {
 public:
  Compute(const std::vector<Layer>& layers, bool real) : layers_(layers), real_(real) {
    total_ = 0;
    size_t largest = 0;
    for (const Layer& l : layers) {
      total_ += l.count;
      largest = std::max(largest, l.count);
    }
    if (real_) {
      std::mt19937 rng(7);
      std::uniform_real_distribution<float> d(-1, 1);
      x_.resize(kRows * kMaxBatch);
      for (float& v : x_) v = d(rng);
      dy_cols_ = largest / kRows + 1;
      dy_.resize(dy_cols_ * kDyRows);
      for (float& v : dy_) v = d(rng);
      scratch_.resize(largest);
    }
    names_.reserve(layers.size());
    for (size_t i = 0; i < layers.size(); ++i)
      names_.push_back(fmt::format("backward layer {} ({})", i, layers[i].name));
  }

  void set_times(double backward_ms, double forward_ms) {
    backward_ms_ = backward_ms;
    forward_ms_ = forward_ms;
  }
  double backward_ms() const { return backward_ms_; }
  double forward_ms() const { return forward_ms_; }
  size_t total_params() const { return total_; }

  // Real compute: the rows of the weight-gradient products, chosen so that backward takes about
  // backward_ms on this rank as it is loaded now. Returns the measured backward time.
  double calibrate(const std::function<float*(size_t)>& grad) {
    batch_ = 1;
    backward_all(grad);  // warm the pages
    double t1 = time_backward(grad);
    batch_ = std::clamp<size_t>(static_cast<size_t>(std::llround(backward_ms_ / std::max(t1, 1e-3))), 1, kMaxBatch);
    double t = time_backward(grad);
    batch_ = std::clamp<size_t>(
        static_cast<size_t>(std::llround(static_cast<double>(batch_) * backward_ms_ / std::max(t, 1e-3))), 1,
        kMaxBatch);
    return time_backward(grad);
  }
  size_t batch() const { return batch_; }
  void set_batch(size_t b) { batch_ = std::clamp<size_t>(b, 1, kMaxBatch); }

  // Backward of layer i (the caller goes from the last layer to the first). `start` is when backward
  // began: modelled compute sleeps until the layer's share of backward_ms has passed since then, so that
  // timer slack does not accumulate.
  void backward_layer(size_t i, float* grad, Clock::time_point start, size_t done_before) {
    chorus::TraceScope scope(names_[i]);
    if (real_) {
      weight_gradient(grad, layers_[i].count, layers_[i].count);
      return;
    }
    double share = static_cast<double>(done_before + layers_[i].count) / static_cast<double>(total_);
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double, std::milli>(backward_ms_ * share)));
  }

  void forward() {
    chorus::TraceScope scope("forward");
    if (forward_ms_ <= 0) return;
    if (!real_) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(forward_ms_));
      return;
    }
    // The same products over a share of each layer, written to scratch (the gradients may be in flight).
    double ratio = backward_ms_ > 0 ? forward_ms_ / backward_ms_ : 0;
    for (const Layer& l : layers_) {
      size_t n = static_cast<size_t>(static_cast<double>(l.count) * ratio);
      if (n > 0) weight_gradient(scratch_.data(), std::min(n, scratch_.size()), l.count);
    }
  }

  // Backward of every layer with no communication.
  void backward_all(const std::function<float*(size_t)>& grad) {
    auto start = Clock::now();
    size_t done = 0;
    for (size_t i = layers_.size(); i-- > 0;) {
      backward_layer(i, grad(i), start, done);
      done += layers_[i].count;
    }
  }

 private:
  static constexpr size_t kRows = 64;  // the weight viewed as kRows x (count / kRows)
  static constexpr size_t kMaxBatch = 4096;
  static constexpr size_t kDyRows = 4;  // distinct rows of the output gradient, reused (memory stays small)

  double time_backward(const std::function<float*(size_t)>& grad) {
    auto t = Clock::now();
    backward_all(grad);
    return ms_since(t);
  }

  // g[k][n] = sum_b x[b][k] * dy[b][n], over `count` elements of g (a layer of `layer_count` parameters).
  void weight_gradient(float* g, size_t count, size_t layer_count) {
    size_t cols = layer_count / kRows + 1;
    for (size_t k = 0; k < kRows; ++k) {
      size_t begin = k * cols;
      if (begin >= count) break;
      size_t n = std::min(cols, count - begin);
      float* row = g + begin;
      for (size_t j = 0; j < n; ++j) row[j] = 0;
      for (size_t b = 0; b < batch_; ++b) {
        float a = x_[b * kRows + k];
        const float* d = dy_.data() + (b % kDyRows) * dy_cols_;
        for (size_t j = 0; j < n; ++j) row[j] += a * d[j];
      }
    }
  }

  const std::vector<Layer>& layers_;
  bool real_;
  size_t total_ = 0;
  double backward_ms_ = 0, forward_ms_ = 0;
  size_t batch_ = 1;
  size_t dy_cols_ = 0;
  std::vector<float> x_, dy_, scratch_;
  std::vector<std::string> names_;
};

// ---- one configuration ----

struct Config {
  Mode mode;
  chorus::BucketPolicy policy = chorus::BucketPolicy::ReadyOrder;
  double bucket_mb = 0;
};

std::string policy_label(const Config& c) { return c.mode == Mode::Fine ? chorus::to_string(c.policy) : "-"; }

struct Figures {
  double compute_ms = 0, comm_ms = 0, step_ms = 0;
  double comm_span_ms = 0, wait_ms = 0;  // fine: the Reducer's own figures
  size_t launches = 0;
  size_t buckets = 0;
  double exposed_ms() const { return step_ms - compute_ms; }
  double exposed_pct() const { return step_ms > 0 ? 100.0 * exposed_ms() / step_ms : 0; }
  double ratio() const { return step_ms / std::max({compute_ms, comm_ms, 1e-9}); }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Per-step times of every rank -> the slowest rank's, then the median over steps.
double slowest_median(Communicator& comm, std::vector<double> times) {
  comm.all_reduce(times.data(), times.data(), times.size(), DataType::Float64, ReduceOp::Max);
  return median(std::move(times));
}

class Runner {
 public:
  Runner(Communicator& comm, const Options& o, const std::vector<Layer>& layers)
      : comm_(comm), o_(o), layers_(layers), compute_(layers, o.real_compute) {
    offsets_.resize(layers.size());
    // The flat gradient: layers in reverse order, as backward produces them.
    size_t off = 0;
    for (size_t i = layers.size(); i-- > 0;) {
      offsets_[i] = off;
      off += layers[i].count;
    }
    flat_.assign(off, 0.0f);
  }

  Compute& compute() { return compute_; }
  size_t total_params() const { return flat_.size(); }
  float* flat_grad(size_t i) { return flat_.data() + offsets_[i]; }

  // Median time of one flat all_reduce of every gradient, no compute.
  double flat_comm_ms() {
    std::vector<double> t;
    for (int s = 0; s < o_.warmup + o_.steps; ++s) {
      comm_.barrier();
      auto t0 = Clock::now();
      comm_.all_reduce(flat_.data(), flat_.data(), flat_.size(), DataType::Float32, ReduceOp::Avg);
      if (s >= o_.warmup) t.push_back(ms_since(t0));
    }
    return slowest_median(comm_, t);
  }

  // Median of forward + backward with no communication.
  double compute_only_ms() {
    std::vector<double> t;
    for (int s = 0; s < o_.warmup + o_.steps; ++s) {
      comm_.barrier();
      auto t0 = Clock::now();
      compute_.backward_all([&](size_t i) { return flat_grad(i); });
      compute_.forward();
      if (s >= o_.warmup) t.push_back(ms_since(t0));
    }
    return slowest_median(comm_, t);
  }

  // Runs one configuration; `wrong` counts elements of the checked step that were not the average.
  Figures run(const Config& c, double compute_ms, double flat_comm, int64_t& wrong) {
    Figures f;
    f.compute_ms = compute_ms;
    if (c.mode != Mode::Fine) {
      f.comm_ms = flat_comm;
      f.step_ms = run_unbucketed(c.mode, wrong);
      return f;
    }
    chorus::ReducerOptions ro;
    ro.policy = c.policy;
    ro.bucket_cap_bytes = static_cast<size_t>(c.bucket_mb * static_cast<double>(kMiB));
    ro.first_bucket_bytes =
        std::min(ro.bucket_cap_bytes, static_cast<size_t>(o_.first_bucket_mb * static_cast<double>(kMiB)));
    ro.partition_bytes = static_cast<size_t>(o_.partition_mb * static_cast<double>(kMiB));
    ro.gradient_as_bucket_view = o_.bucket_view;
    ro.average = true;
    chorus::Reducer reducer(comm_, ro);
    for (size_t i = 0; i < layers_.size(); ++i)
      reducer.add_parameter(layers_[i].name, flat_grad(i), layers_[i].count, DataType::Float32);
    f.buckets = reducer.buckets().size();
    auto grad = [&](size_t i) { return static_cast<float*>(reducer.gradient(i)); };

    // Communication alone: every gradient ready at once.
    std::vector<double> comm_t;
    for (int s = 0; s < o_.warmup + o_.steps; ++s) {
      comm_.barrier();
      auto t0 = Clock::now();
      for (size_t i = layers_.size(); i-- > 0;) reducer.mark_ready(i);
      reducer.finalize();
      if (s >= o_.warmup) comm_t.push_back(ms_since(t0));
    }
    f.comm_ms = slowest_median(comm_, comm_t);

    std::vector<double> step_t, span_t, wait_t;
    for (int s = 0; s < o_.warmup + o_.steps; ++s) {
      bool check = s == 0;
      if (check) fill(grad);
      comm_.barrier();
      auto t0 = Clock::now();
      size_t done = 0;
      for (size_t i = layers_.size(); i-- > 0;) {
        if (!check) compute_.backward_layer(i, grad(i), t0, done);
        done += layers_[i].count;
        reducer.mark_ready(i);
      }
      reducer.finalize();
      compute_.forward();
      double ms = ms_since(t0);
      if (check) wrong += count_wrong(grad);
      if (s >= o_.warmup) {
        step_t.push_back(ms);
        span_t.push_back(std::chrono::duration<double, std::milli>(reducer.last_step().comm_span).count());
        wait_t.push_back(std::chrono::duration<double, std::milli>(reducer.last_step().finalize_wait).count());
        f.launches = reducer.last_step().launches;
      }
    }
    f.step_ms = slowest_median(comm_, step_t);
    f.comm_span_ms = slowest_median(comm_, span_t);
    f.wait_ms = slowest_median(comm_, wait_t);
    return f;
  }

 private:
  double run_unbucketed(Mode mode, int64_t& wrong) {
    std::vector<double> step_t;
    auto grad = [&](size_t i) { return flat_grad(i); };
    for (int s = 0; s < o_.warmup + o_.steps; ++s) {
      bool check = s == 0;
      if (check) fill(grad);
      comm_.barrier();
      auto t0 = Clock::now();
      if (!check) compute_.backward_all(grad);
      if (mode == Mode::None) {
        comm_.all_reduce(flat_.data(), flat_.data(), flat_.size(), DataType::Float32, ReduceOp::Avg);
        compute_.forward();
      } else {
        chorus::Work w =
            comm_.all_reduce_async(flat_.data(), flat_.data(), flat_.size(), DataType::Float32, ReduceOp::Avg);
        compute_.forward();
        w.wait();
      }
      double ms = ms_since(t0);
      if (check) wrong += count_wrong(grad);
      if (s >= o_.warmup) step_t.push_back(ms);
    }
    return slowest_median(comm_, step_t);
  }

  // The checked step: rank r's gradients hold r + 1 (+ the element's layer mod 4), so the average is known.
  template <class Grad>
  void fill(Grad&& grad) {
    for (size_t i = 0; i < layers_.size(); ++i) {
      float v = static_cast<float>(comm_.rank() + 1 + static_cast<int>(i % 4));
      std::fill_n(grad(i), layers_[i].count, v);
    }
  }
  template <class Grad>
  int64_t count_wrong(Grad&& grad) {
    int64_t wrong = 0;
    for (size_t i = 0; i < layers_.size(); ++i) {
      float want = static_cast<float>(comm_.size() + 1) / 2.0f + static_cast<float>(i % 4);
      const float* g = grad(i);
      for (size_t k = 0; k < layers_[i].count; ++k) wrong += g[k] != want;
    }
    return wrong;
  }

  Communicator& comm_;
  const Options& o_;
  const std::vector<Layer>& layers_;
  Compute compute_;
  std::vector<size_t> offsets_;
  std::vector<float> flat_;
};

// ---- output ----

void print_header() {
  fmt::print("{:<7} {:<14} {:>9} {:>8} {:>11} {:>9} {:>9} {:>11} {:>10} {:>9} {:>12} {:>9} {:>8}\n", "mode", "policy",
             "bucket_mb", "buckets", "compute_ms", "comm_ms", "step_ms", "exposed_ms", "exposed_%", "step/max",
             "comm_span_ms", "wait_ms", "launches");
}

void print_row(const Config& c, const Figures& f) {
  bool fine = c.mode == Mode::Fine;
  fmt::print("{:<7} {:<14} {:>9} {:>8} {:>11.2f} {:>9.2f} {:>9.2f} {:>11.2f} {:>10.1f} {:>9.3f} {:>12} {:>9} {:>8}\n",
             mode_name(c.mode), policy_label(c), fine ? fmt::format("{:g}", c.bucket_mb) : "-",
             fine ? std::to_string(f.buckets) : "-", f.compute_ms, f.comm_ms, f.step_ms, f.exposed_ms(),
             f.exposed_pct(), f.ratio(), fine ? fmt::format("{:.2f}", f.comm_span_ms) : "-",
             fine ? fmt::format("{:.2f}", f.wait_ms) : "-", fine ? std::to_string(f.launches) : "-");
}

using chorus::tools::rank_label;

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (std::optional<int> rc = parse_options(argc, argv, o)) return *rc;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  if (o.list_layers) {
    std::vector<Layer> layers = build_model(o.model, o.uniform_mb, o.scale);
    size_t total = 0;
    for (const Layer& l : layers) total += l.count;
    fmt::print("# {} x{:g}: {} layers, {} parameters (backward runs from the last layer to the first)\n", o.model,
               o.scale, layers.size(), total);
    fmt::print("{:>5} {:>12} {:>10}  {}\n", "layer", "parameters", "MiB", "tensors (first name, +N merged after it)");
    for (size_t i = 0; i < layers.size(); ++i)
      fmt::print("{:>5} {:>12} {:>10.3f}  {}\n", i, layers[i].count,
                 static_cast<double>(layers[i].count * sizeof(float)) / static_cast<double>(kMiB), layers[i].name);
    return 0;
  }

  std::unique_ptr<Communicator> comm;
  try {
    chorus::CommOptions options;
    if (o.timeout_s > 0) options.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
    comm = Communicator::from_env(options);
    const bool lead = comm->rank() == 0;

    std::vector<Layer> layers = build_model(o.model, o.uniform_mb, o.scale);
    Runner runner(*comm, o, layers);
    double mib = static_cast<double>(runner.total_params() * sizeof(float)) / static_cast<double>(kMiB);

    // Communication of one flat all_reduce; with --compute-ms 0 it sets the compute.
    double flat_comm = runner.flat_comm_ms();
    double backward = o.compute_ms;
    double compute_total_auto = flat_comm * (1 - o.comm_fraction) / o.comm_fraction;
    if (backward <= 0) {
      backward = o.forward_ms >= 0 ? std::max(compute_total_auto - o.forward_ms, 1.0)
                                   : compute_total_auto / (1 + o.forward_ratio);
    }
    double forward = o.forward_ms >= 0 ? o.forward_ms : backward * o.forward_ratio;
    // Every rank uses rank 0's figures.
    double times[2] = {backward, forward};
    comm->broadcast(times, times, 2, DataType::Float64, 0);
    runner.compute().set_times(times[0], times[1]);

    std::string calibration;
    if (o.real_compute) {
      double measured = runner.compute().calibrate([&](size_t i) { return runner.flat_grad(i); });
      uint64_t batch = runner.compute().batch();
      comm->broadcast(&batch, &batch, 1, DataType::UInt64, 0);
      runner.compute().set_batch(batch);
      calibration =
          fmt::format(", real: {} rows per weight-gradient product (rank 0 measured {:.1f} ms)", batch, measured);
    }
    double compute_ms = runner.compute_only_ms();

    if (lead) {
      fmt::print("# chorus-overlap: model {} x{:g}: {} layers, {:.2f} M parameters, {:.1f} MiB of float32 gradients\n",
                 o.model, o.scale, layers.size(), static_cast<double>(runner.total_params()) / 1e6, mib);
      fmt::print("# {} ranks, transport {}, compute {}: backward {:.1f} ms + forward {:.1f} ms per step{}\n",
                 comm->size(), comm->transport_name(), o.real_compute ? "real" : "modelled", times[0], times[1],
                 calibration);
      fmt::print("# one flat all_reduce: {:.2f} ms; steps: {} timed after {} warm-up (medians of the slowest rank)\n",
                 flat_comm, o.steps, o.warmup);
      print_header();
    }

    std::vector<Config> configs;
    for (Mode m : o.modes) {
      if (m != Mode::Fine) {
        configs.push_back({m});
        continue;
      }
      for (double mb : o.bucket_mb)
        for (chorus::BucketPolicy p : o.policies) configs.push_back({m, p, mb});
    }
    std::vector<std::string> summary;
    int64_t wrong = 0;
    for (const Config& c : configs) {
      Figures f = runner.run(c, compute_ms, flat_comm, wrong);
      if (lead) print_row(c, f);
      summary.push_back(
          fmt::format("overlap: mode={} policy={} step_ms={:.3f} compute_ms={:.3f} comm_ms={:.3f} exposed_pct={:.2f}",
                      mode_name(c.mode), policy_label(c), f.step_ms, f.compute_ms, f.comm_ms, f.exposed_pct()));
    }
    comm->all_reduce(&wrong, &wrong, 1, DataType::Int64, ReduceOp::Sum);
    if (lead) {
      fmt::print("# checked results: {} wrong elements {}\n", wrong, wrong ? "FAILED" : "OK");
      for (const std::string& line : summary) fmt::print("{}\n", line);
    }
    return wrong ? kFailure : 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "chorus-overlap: rank {}: {}\n", rank_label(comm.get()), e.what());
    return kFailure;
  }
}
