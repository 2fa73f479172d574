// The gradient reducer. Two ways to launch:
// - ReadyOrder: mark_ready, on the caller's thread, launches complete buckets in bucket order with
//   all_reduce_async on the Reducer's communicator. The order is fixed, so ranks need no agreement.
// - FrontFirst / LargestFirst: the order depends on when gradients become ready, which differs between ranks,
//   so a scheduler thread (the only user of the Reducer's communicator under these policies) agrees with the
//   other ranks on what is ready everywhere (an all_reduce(Min) over a readiness bitmap) and all-reduces the
//   highest-priority such unit. Every choice depends only on agreed data, so every rank runs the same
//   sequence of collectives.
#include "chorus/reducer.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "base/error.h"
#include "base/logging.h"
#include "chorus/trace.h"
#include "core/staging_bytes.h"
#include "overlap/bucketing.h"

namespace chorus {

using Clock = std::chrono::steady_clock;

const char* to_string(BucketPolicy policy) noexcept {
  switch (policy) {
    case BucketPolicy::ReadyOrder:
      return "ready_order";
    case BucketPolicy::FrontFirst:
      return "front_first";
    case BucketPolicy::LargestFirst:
      return "largest_first";
  }
  return "?";
}

BucketPolicy parse_bucket_policy(std::string_view name) {
  std::string s(name);
  std::replace(s.begin(), s.end(), '-', '_');
  for (BucketPolicy p : {BucketPolicy::ReadyOrder, BucketPolicy::FrontFirst, BucketPolicy::LargestFirst})
    if (s == to_string(p)) return p;
  base::throw_error(ErrorCode::InvalidArgument,
                    "unknown bucket policy '" + std::string(name) + "'; use ready_order, front_first or largest_first");
}

namespace {

// How long an idle scheduler waits before asking the other ranks again when something is ready here but
// not yet everywhere.
constexpr auto kPollInterval = std::chrono::microseconds(50);

}  // namespace

struct Reducer::Impl {
  struct Param {
    std::string name;
    void* grad = nullptr;
    size_t count = 0;
    DataType type = DataType::Float32;
    size_t bytes = 0;
    size_t bucket = 0;
    size_t offset = 0;          // bytes into the bucket
    std::vector<size_t> units;  // the units waiting for this parameter
  };
  struct UnitState {
    overlap::Unit unit;
    std::byte* data = nullptr;
    size_t count = 0;
    DataType type = DataType::Float32;
    CallOptions call;               // registered: its bucket is (core::StagingBytes::meant_registered)
    int parameters = 0;             // how many parameters it waits for
    std::atomic<int> remaining{0};  // of those, still unmarked this step (written by the caller's thread)
    bool launched = false;          // this step; ReadyOrder: caller's thread; else scheduler thread
    Work work;                      // ReadyOrder
    bool observed = false;          // ReadyOrder: completion seen
  };

  Impl(Communicator& parent, ReducerOptions o) : options(o), comm(parent.split(0, parent.rank())) {
    if (!comm) base::throw_error(ErrorCode::Internal, "Reducer: split returned no communicator");
  }

  ReducerOptions options;
  std::unique_ptr<Communicator> comm;

  std::vector<Param> params;
  std::map<std::string, size_t, std::less<>> by_name;
  bool fixed = false;
  std::vector<BucketInfo> buckets;
  std::vector<core::StagingBytes> storage;  // one per bucket
  std::vector<UnitState> units;       // units' order: bucket order (ReadyOrder's launch order)

  // ---- the current step (caller's thread) ----
  std::vector<uint8_t> marked;
  size_t marked_count = 0;
  size_t next_launch = 0;   // ReadyOrder: the next unit to launch
  size_t next_observe = 0;  // ReadyOrder: the first launched unit not yet seen complete
  std::exception_ptr ready_order_error;
  std::string ready_order_context;  // what failed, for finalize()'s message
  StepStats last;

  // Times of the current step: first launch and last completion (written by whoever launches).
  Clock::time_point first_launch{}, last_done{};
  size_t launches = 0;

  // ---- the scheduler (FrontFirst, LargestFirst) ----
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;                   // GUARDED_BY(mu)
  uint64_t steps_requested = 0;        // GUARDED_BY(mu); the caller bumps it at a step's first mark_ready
  uint64_t steps_finished = 0;         // GUARDED_BY(mu); the scheduler bumps it when a step is done or failed
  std::exception_ptr scheduler_error;  // GUARDED_BY(mu)
  std::string scheduler_context;       // GUARDED_BY(mu)
  std::thread scheduler;
  static constexpr size_t kAgreeing = SIZE_MAX;
  size_t current = kAgreeing;  // scheduler thread only: the unit being reduced, or kAgreeing

  bool uses_scheduler() const { return options.policy != BucketPolicy::ReadyOrder; }

  const Param& param(size_t index, const char* what) const {
    if (index >= params.size()) {
      base::throw_error(ErrorCode::InvalidArgument,
                        std::string(what) + ": no parameter #" + std::to_string(index) + "; " +
                            std::to_string(params.size()) + " are registered (indices 0.." +
                            (params.empty() ? std::string("none") : std::to_string(params.size() - 1)) + ")");
    }
    return params[index];
  }

  static std::string label(const Param& p, size_t index) { return "'" + p.name + "' (#" + std::to_string(index) + ")"; }

  void fix() {
    if (fixed) return;
    std::vector<overlap::ParamShape> shapes;
    shapes.reserve(params.size());
    for (const Param& p : params) shapes.push_back({p.bytes, p.type});
    buckets = overlap::assign_buckets(shapes, options.first_bucket_bytes, options.bucket_cap_bytes,
                                      options.policy == BucketPolicy::LargestFirst);
    std::vector<size_t> offsets(params.size(), 0);
    storage.clear();
    for (size_t b = 0; b < buckets.size(); ++b) {
      size_t off = 0;
      for (size_t i : buckets[b].parameters) {
        params[i].bucket = b;
        params[i].offset = off;
        offsets[i] = off;
        off += params[i].bytes;
      }
      storage.emplace_back(buckets[b].bytes);
      if (options.gradient_as_bucket_view) {
        // The gradients move into the bucket: start from what the registered buffers hold.
        for (size_t i : buckets[b].parameters)
          if (params[i].bytes > 0) std::memcpy(storage[b].data() + params[i].offset, params[i].grad, params[i].bytes);
      }
    }
    size_t partition = options.policy == BucketPolicy::FrontFirst ? options.partition_bytes : 0;
    std::vector<overlap::Unit> cut = overlap::make_units(buckets, shapes, offsets, partition);
    units = std::vector<UnitState>(cut.size());
    for (size_t k = 0; k < cut.size(); ++k) {
      UnitState& u = units[k];
      u.unit = std::move(cut[k]);
      u.type = buckets[u.unit.bucket].dtype;
      u.data = storage[u.unit.bucket].data() + u.unit.offset;
      u.call.registered = core::StagingBytes::meant_registered(storage[u.unit.bucket].size());
      u.count = u.unit.bytes / std::max<size_t>(dtype_size(u.type), 1);
      u.parameters = static_cast<int>(u.unit.parameters.size());
      u.remaining.store(u.parameters, std::memory_order_relaxed);
      for (size_t i : u.unit.parameters) params[i].units.push_back(k);
    }
    marked.assign(params.size(), 0);
    fixed = true;
  }

  // ---- ReadyOrder ----

  void launch_in_order() {
    while (next_launch < units.size() && units[next_launch].remaining.load(std::memory_order_relaxed) == 0) {
      size_t k = next_launch++;
      UnitState& u = units[k];
      u.launched = true;
      if (launches++ == 0) first_launch = Clock::now();
      if (trace_enabled()) trace_instant(unit_name(k) + " launch", "reducer");
      if (u.count == 0) {
        u.observed = true;
        continue;
      }
      ReduceOp op = options.average ? ReduceOp::Avg : ReduceOp::Sum;
      try {
        u.work = comm->all_reduce_async(u.data, u.data, u.count, u.type, op, u.call);
      } catch (...) {
        // A communicator that failed earlier refuses new work; finalize() reports it.
        keep_ready_order_error(next_launch - 1);
        u.observed = true;
      }
    }
  }

  void keep_ready_order_error(size_t unit) {
    if (ready_order_error) return;
    ready_order_error = std::current_exception();
    ready_order_context = describe(unit);
  }

  // Records the completion of launched operations that have finished, without blocking.
  void observe_completions() {
    while (next_observe < next_launch) {
      UnitState& u = units[next_observe];
      if (!u.observed) {
        try {
          if (u.work.valid() && !u.work.test()) return;
        } catch (...) {
          keep_ready_order_error(next_observe);
        }
        u.observed = true;
        last_done = Clock::now();
        if (trace_enabled()) trace_instant(unit_name(next_observe) + " done", "reducer");
      }
      ++next_observe;
    }
  }

  // Waits for every launched operation; the first error is kept in ready_order_error.
  void wait_launched() noexcept {
    for (size_t k = 0; k < next_launch; ++k) {
      UnitState& u = units[k];
      if (u.observed) continue;
      try {
        if (u.work.valid()) u.work.wait();
      } catch (...) {
        keep_ready_order_error(k);
      }
      u.observed = true;
      last_done = Clock::now();
    }
    next_observe = next_launch;
  }

  // ---- the scheduler ----

  void start_scheduler() {
    if (scheduler.joinable()) return;
    scheduler = std::thread([this] { scheduler_main(); });
  }

  bool locally_pending() const {
    for (const UnitState& u : units)
      if (!u.launched && u.remaining.load(std::memory_order_acquire) == 0) return true;
    return false;
  }

  void scheduler_main() {
    uint64_t done = 0;
    for (;;) {
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || steps_requested > done; });
        if (stop) return;
      }
      std::exception_ptr error;
      bool stopped = false;
      current = kAgreeing;
      try {
        stopped = !run_step();
      } catch (...) {
        error = std::current_exception();
      }
      if (stopped) return;
      std::lock_guard lock(mu);
      done = ++steps_finished;
      if (error) {
        scheduler_error = error;
        scheduler_context = current == kAgreeing ? std::string(to_string(options.policy)) +
                                                       " scheduler, agreeing with the other ranks on which "
                                                       "gradients are ready everywhere"
                                                 : describe(current);
      }
      cv.notify_all();
    }
  }

  // Reduces every unit of one step, in an order all ranks agree on. False when told to stop.
  bool run_step() {
    const size_t n = units.size();
    std::vector<uint8_t> ready(n);
    size_t left = 0;
    for (const UnitState& u : units) left += u.launched ? 0 : 1;
    ReduceOp op = options.average ? ReduceOp::Avg : ReduceOp::Sum;
    while (left > 0) {
      // Nothing new can be ready everywhere until something is ready here: wait without asking the others.
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || locally_pending(); });
        if (stop) return false;
      }
      for (size_t k = 0; k < n; ++k)
        ready[k] = units[k].launched || units[k].remaining.load(std::memory_order_acquire) == 0 ? 1 : 0;
      current = kAgreeing;
      comm->all_reduce(ready.data(), ready.data(), n, DataType::UInt8, ReduceOp::Min);

      size_t best = n;
      for (size_t k = 0; k < n; ++k) {
        if (units[k].launched || ready[k] == 0) continue;
        if (best == n || higher_priority(k, best)) best = k;
      }
      if (best == n) {
        std::this_thread::sleep_for(kPollInterval);
        continue;
      }
      UnitState& u = units[best];
      u.launched = true;
      --left;
      auto now = Clock::now();
      if (launches++ == 0) first_launch = now;
      current = best;
      if (u.count > 0) {
        std::optional<TraceScope> span;
        if (trace_enabled()) span.emplace(unit_name(best) + " all_reduce", "reducer");
        comm->all_reduce(u.data, u.data, u.count, u.type, op, u.call);
      }
      last_done = Clock::now();
    }
    return true;
  }

  // "bucket 3" or "bucket 3 part 2/5": for the trace.
  std::string unit_name(size_t unit) const {
    auto [part, parts] = part_of(unit);
    std::string name = "bucket " + std::to_string(units[unit].unit.bucket);
    if (parts > 1) name += " part " + std::to_string(part + 1) + "/" + std::to_string(parts);
    return name;
  }

  std::pair<size_t, size_t> part_of(size_t unit) const {
    size_t parts = 0, part = 0;
    for (size_t k = 0; k < units.size(); ++k) {
      if (units[k].unit.bucket != units[unit].unit.bucket) continue;
      if (k == unit) part = parts;
      ++parts;
    }
    return {part, parts};
  }

  // "the all_reduce of bucket 3 (part 2 of 5, 4194304 bytes: 'layer7.weight' (#7), ...)"
  std::string describe(size_t unit) const {
    const UnitState& u = units[unit];
    auto [part, parts] = part_of(unit);
    std::string text = "the all_reduce of bucket " + std::to_string(u.unit.bucket) + " (";
    if (parts > 1) text += "part " + std::to_string(part + 1) + " of " + std::to_string(parts) + ", ";
    text += std::to_string(u.unit.bytes) + " bytes:";
    constexpr size_t kNamed = 4;
    for (size_t j = 0; j < u.unit.parameters.size() && j < kNamed; ++j)
      text += (j ? ", " : " ") + label(params[u.unit.parameters[j]], u.unit.parameters[j]);
    if (u.unit.parameters.size() > kNamed)
      text += " and " + std::to_string(u.unit.parameters.size() - kNamed) + " more";
    return text + ")";
  }

  bool higher_priority(size_t a, size_t b) const {
    const overlap::Unit& x = units[a].unit;
    const overlap::Unit& y = units[b].unit;
    if (options.policy == BucketPolicy::FrontFirst) {
      if (x.lowest_param != y.lowest_param) return x.lowest_param < y.lowest_param;
    } else {
      if (x.bytes != y.bytes) return x.bytes > y.bytes;
    }
    return a < b;
  }

  // Waits until the scheduler has finished the current step; false after `limit`.
  bool wait_scheduler(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return steps_finished == steps_requested; });
  }

  void reset_step() {
    std::fill(marked.begin(), marked.end(), 0);
    marked_count = 0;
    next_launch = next_observe = 0;
    launches = 0;
    first_launch = last_done = {};
    ready_order_error = nullptr;
    for (UnitState& u : units) {
      u.remaining.store(u.parameters, std::memory_order_relaxed);
      u.launched = false;
      u.observed = false;
      u.work = Work();
    }
  }

  std::chrono::milliseconds bound() const {
    // The scheduler's calls are each bounded by the communicator's timeout; a step's last unit can wait for
    // the agreement round before it and for its own transfer.
    return comm->options().timeout * 3 + std::chrono::seconds(1);
  }
};

Reducer::Reducer(Communicator& comm, ReducerOptions options) : impl_(std::make_unique<Impl>(comm, options)) {}

Reducer::~Reducer() {
  Impl& m = *impl_;
  if (m.uses_scheduler()) {
    if (m.scheduler.joinable()) {
      {
        std::lock_guard lock(m.mu);
        m.stop = true;
      }
      m.cv.notify_all();
      m.scheduler.join();
    }
  } else if (m.fixed) {
    m.wait_launched();
  }
}

size_t Reducer::add_parameter(std::string name, void* grad, size_t count, DataType type) {
  Impl& m = *impl_;
  size_t index = m.params.size();
  std::string what = "add_parameter '" + name + "' (#" + std::to_string(index) + ")";
  if (m.fixed) {
    base::throw_error(ErrorCode::InvalidArgument,
                      what +
                          ": the buckets are already fixed (by mark_ready, gradient() or buckets()); register "
                          "every parameter before the first step");
  }
  if (dtype_size(type) == 0) base::throw_error(ErrorCode::InvalidArgument, what + ": unknown data type");
  if (grad == nullptr && count > 0)
    base::throw_error(ErrorCode::InvalidArgument, what + ": the gradient buffer is null");
  if (name.empty()) base::throw_error(ErrorCode::InvalidArgument, what + ": the name is empty");
  if (m.by_name.count(name) > 0) {
    base::throw_error(ErrorCode::InvalidArgument, what + ": the name is already used by parameter #" +
                                                      std::to_string(m.by_name.find(name)->second));
  }
  Impl::Param p;
  p.name = name;
  p.grad = grad;
  p.count = count;
  p.type = type;
  p.bytes = count * dtype_size(type);
  m.params.push_back(std::move(p));
  m.by_name.emplace(std::move(name), index);
  return index;
}

void Reducer::mark_ready(size_t index) {
  Impl& m = *impl_;
  const Impl::Param& p = m.param(index, "mark_ready");
  m.fix();
  if (m.marked[index]) {
    base::throw_error(ErrorCode::InvalidArgument, "mark_ready: parameter " + Impl::label(p, index) +
                                                      " was already marked ready this step; mark each gradient once, "
                                                      "then call finalize()");
  }
  if (!m.options.gradient_as_bucket_view && p.bytes > 0)
    std::memcpy(m.storage[p.bucket].data() + p.offset, p.grad, p.bytes);
  m.marked[index] = 1;
  bool first = m.marked_count++ == 0;

  if (!m.uses_scheduler()) {
    for (size_t k : p.units) {
      if (m.units[k].remaining.fetch_sub(1, std::memory_order_relaxed) == 1 && trace_enabled()) {
        trace_instant(m.unit_name(k) + " ready", "reducer");
      }
    }
    m.launch_in_order();
    m.observe_completions();
    return;
  }
  for (size_t k : p.units) {
    if (m.units[k].remaining.fetch_sub(1, std::memory_order_release) == 1 && trace_enabled()) {
      trace_instant(m.unit_name(k) + " ready", "reducer");
    }
  }
  if (first) m.start_scheduler();
  {
    std::lock_guard lock(m.mu);
    if (first) ++m.steps_requested;
  }
  m.cv.notify_all();
}

void Reducer::mark_ready(std::string_view name) {
  Impl& m = *impl_;
  auto it = m.by_name.find(name);
  if (it == m.by_name.end()) {
    base::throw_error(ErrorCode::InvalidArgument,
                      "mark_ready: no parameter named '" + std::string(name) + "' is registered");
  }
  mark_ready(it->second);
}

void Reducer::finalize() {
  Impl& m = *impl_;
  m.fix();
  if (m.marked_count < m.params.size()) {
    size_t missing = m.params.size() - m.marked_count;
    std::string list;
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (m.marked[i]) continue;
      if (!list.empty()) list += ", ";
      list += Impl::label(m.params[i], i);
    }
    base::throw_error(ErrorCode::InvalidArgument,
                      "finalize: " + std::to_string(missing) + (missing == 1 ? " parameter was" : " parameters were") +
                          " never marked ready this step: " + list + "; mark them, then call finalize() again");
  }

  auto wait_start = Clock::now();
  std::exception_ptr error;
  std::string context;
  if (m.uses_scheduler()) {
    if (m.marked_count > 0 && !m.wait_scheduler(m.bound())) {
      // Unreachable while the communicator keeps its own timeouts; never hang if it does not.
      base::throw_error(ErrorCode::Timeout, "finalize: the Reducer's scheduler did not finish the step within " +
                                                std::to_string(m.bound().count()) + " ms");
    }
    std::lock_guard lock(m.mu);
    error = std::exchange(m.scheduler_error, nullptr);
    context = m.scheduler_context;
  } else {
    m.wait_launched();
    error = m.ready_order_error;
    context = m.ready_order_context;
  }
  auto wait_end = Clock::now();

  StepStats stats;
  stats.finalize_wait = std::chrono::duration_cast<std::chrono::nanoseconds>(wait_end - wait_start);
  if (m.launches > 0 && m.last_done > m.first_launch)
    stats.comm_span = std::chrono::duration_cast<std::chrono::nanoseconds>(m.last_done - m.first_launch);
  stats.launches = m.launches;
  m.reset_step();
  m.last = stats;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      throw Error(e.code(), "finalize: " + context + ": " + e.message(), e.peer());
    }
  }

  if (!m.options.gradient_as_bucket_view) {
    for (const Impl::Param& p : m.params)
      if (p.bytes > 0) std::memcpy(p.grad, m.storage[p.bucket].data() + p.offset, p.bytes);
  }
}

void* Reducer::gradient(size_t index) {
  Impl& m = *impl_;
  const Impl::Param& p = m.param(index, "gradient");
  if (!m.options.gradient_as_bucket_view) return p.grad;
  m.fix();
  return m.storage[p.bucket].data() + p.offset;
}

const std::vector<BucketInfo>& Reducer::buckets() {
  impl_->fix();
  return impl_->buckets;
}

size_t Reducer::num_parameters() const noexcept { return impl_->params.size(); }

const ReducerOptions& Reducer::options() const noexcept { return impl_->options; }

Reducer::StepStats Reducer::last_step() const noexcept { return impl_->last; }

TrafficCounters Reducer::traffic() const { return impl_->comm->traffic(); }

}  // namespace chorus
