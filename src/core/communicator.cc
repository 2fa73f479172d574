// The public Communicator: argument checks, operation fingerprints and sequence numbers, dispatch to the
// algorithms, and the failure state.
#include <algorithm>
#include <cstring>
#include <thread>
#include <variant>

#include <fmt/format.h>

#include "algo/algorithms.h"
#include "algo/registry.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/communicator_impl.h"
#include "core/progress.h"
#include "core/trace.h"
#include "core/validate.h"
#include "kernels/reduce.h"

namespace chorus {

using transport::AlgoId;
using transport::MessageTag;
using transport::OpKind;
using core::CollCall;
using core::Op;
using core::P2PCall;

namespace {

[[noreturn]] [[gnu::noinline]] void throw_failed(const Communicator::Impl& impl, const char* op) {
  throw Error(ErrorCode::Aborted,
              fmt::format("{}: the communicator failed earlier and can no longer be used (create a new one): {}", op,
                          impl.failure->message()),
              impl.failure->peer());
}

inline void throw_if_failed(const Communicator::Impl& impl, const char* op) {
  if (impl.failed.load(std::memory_order_acquire)) [[unlikely]] throw_failed(impl, op);
}

enum class Mode { Sync, Async };

// One API call: the one-thread-at-a-time check (api_mu, held for the call) and the failure check. A
// synchronous call holds it until it returns, together with exec_mu where that is free (one locked
// instruction for both; see core/call_gate.h); an asynchronous one holds api_mu while it checks and queues.
class ApiScope {
 public:
  ApiScope(Communicator::Impl& impl, const char* op, Mode mode = Mode::Async) : impl_(impl), log_tag_(&impl.label) {
    if (mode == Mode::Sync) {
      bool exec = false;
      if (!impl.gate.try_lock_both(&exec)) core::throw_busy(op);
      impl.api_holds_exec = exec;
    } else if (!impl.gate.try_lock_api()) {
      core::throw_busy(op);
    }
    if (impl.failed.load(std::memory_order_acquire)) [[unlikely]] {
      release();
      throw_failed(impl, op);
    }
  }
  ~ApiScope() { release(); }
  ApiScope(const ApiScope&) = delete;
  ApiScope& operator=(const ApiScope&) = delete;

 private:
  void release() noexcept {
    if (impl_.api_holds_exec) {
      impl_.api_holds_exec = false;
      impl_.gate.unlock_both();
    } else {
      impl_.gate.unlock_api();
    }
  }

  Communicator::Impl& impl_;
  base::LogTag log_tag_;
};

// EXEC for a synchronous call, once everything queued before it has run. Its ApiScope usually took EXEC
// with API; if operations are still queued, the progress thread needs EXEC to run them, so the call gives it
// back, waits for the queue to drain and takes it again. Either way impl.api_holds_exec is then true, and the
// call's ApiScope gives EXEC back when the call returns.
void hold_exec_for_sync_call(Communicator::Impl& impl) {
  if (impl.engine && !impl.engine->idle()) {
    if (impl.api_holds_exec) {
      impl.api_holds_exec = false;
      impl.gate.unlock_exec();
    }
    impl.engine->drain();
  }
  if (!impl.api_holds_exec) {
    impl.gate.lock_exec();
    impl.api_holds_exec = true;
  }
}

Error fail(Communicator::Impl& impl, const char* op, const Error& original) {
  return core::fail_communicator(impl, op, original);
}

// Runs the I/O of one operation; any failure inside becomes the communicator's failure.
template <class Body>
void run_guarded(Communicator::Impl& impl, const char* op, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    throw fail(impl, op, e);
  } catch (const std::bad_alloc&) {
    throw fail(impl, op, Error(ErrorCode::Internal, fmt::format("{}: out of memory", op)));
  } catch (const std::exception& e) {
    throw fail(impl, op, Error(ErrorCode::Internal, fmt::format("{}: {}", op, e.what())));
  }
}

// The context for an operation about to run: the communicator's reused context (its constant fields set once,
// by init_op_context at creation) with this call's fields written over the previous call's. Consumes a
// sequence number, so it is built on the executing thread, in execution order, which is issue order. Reusing
// one context saves a small call the stores of building ~200 bytes afresh.
algo::OpContext& make_context(Communicator::Impl& impl, OpKind kind, AlgoId algo, size_t count, DataType dtype,
                              const ReduceOp* rop, int root) {
  algo::OpContext& c = impl.op_context;
  c.tag.op = kind;
  c.tag.dtype = dtype;
  c.tag.algo = algo;
  c.tag.root = root;
  c.tag.count = count;
  c.tag.seq = impl.next_seq++;
  c.tag.step = 0;
  c.tag.in_place = false;
  c.deadline = base::Deadline::lazy_after(impl.config.timeout);
  c.dtype = dtype;
  c.esize = core::element_size(dtype);
  c.slice_bytes = std::max(c.esize, impl.config.slice_bytes - impl.config.slice_bytes % c.esize);
  c.bytes_sent = 0;
  c.bytes_received = 0;
  c.tag.has_reduce_op = rop != nullptr;
  if (rop) {
    c.tag.reduce_op = *rop;
    c.op = *rop;
    c.reduce = transport::Reduction{};
    c.reduce.fn = kernels::reduce_fn(dtype, *rop);
    c.reduce.elem_size = c.esize;
    c.reduce_final = c.reduce;
    c.divide = nullptr;
    if (*rop == ReduceOp::Avg) {
      c.reduce_final.sum_div = kernels::sum_div_fn(dtype);
      c.reduce_final.divisor = static_cast<uint64_t>(impl.size);
      c.divide = kernels::div_fn(dtype);
    }
  } else {
    // The reduction fields keep the last reducing call's values; no algorithm of a call without a reduction
    // reads them.
    c.tag.reduce_op = ReduceOp::Sum;
  }
  return c;
}

void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}


algo::CallShape shape_of(const Communicator::Impl& impl, algo::Collective coll, size_t count, DataType dtype,
                         int root) {
  algo::CallShape s;
  s.coll = coll;
  s.size = impl.size;
  s.rank = impl.rank;
  s.root = std::max(root, 0);
  s.count = count;
  s.esize = core::element_size(dtype);
  s.slice_bytes = std::max(s.esize, impl.config.slice_bytes - impl.config.slice_bytes % s.esize);
  s.topology = &impl.topology;
  s.intra = &impl.intra_link;
  s.inter = &impl.link;
  return s;
}

algo::CallShape shape_of(const Communicator::Impl& impl, const CollCall& call) {
  return shape_of(impl, call.coll, call.count, call.dtype, call.root);
}

// The choice cache's key: collective, registered-buffer tables (out of place, in place), forced algorithm + 1
// (0: none, else at most 16), bytes.
uint64_t key_of(algo::Collective coll, int forced, uint64_t bytes, bool registered, bool in_place) {
  return (static_cast<uint64_t>(coll) << 56) | (static_cast<uint64_t>(registered) << 55) |
         (static_cast<uint64_t>(registered && in_place) << 54) | (static_cast<uint64_t>(forced) << 48) |
         (bytes & ((uint64_t{1} << 48) - 1));
}

// Whether a call with CallOptions::registered chooses from the registered-buffer tables (in place or not):
// the collective has them, from at most `bytes` up.
bool uses_registered_tables(const Communicator::Impl& impl, algo::Collective coll, uint64_t bytes, bool in_place) {
  const uint64_t from = impl.registered_from[in_place][static_cast<int>(coll)];
  return from != 0 && bytes >= from;
}

// The cost model's tables for a call: those measured with registered buffers (in place or not) where the
// call asked for them and they exist (CollCall::registered says both), else the heap-buffer ones.
const std::vector<algo::Calibration>& calibration_of(const Communicator::Impl& impl, algo::Collective coll,
                                                     bool registered, bool in_place) {
  const int c = static_cast<int>(coll);
  return registered ? impl.calibration_registered[in_place][c] : impl.calibration[c];
}

// Chooses the algorithm for a call: CallOptions::algorithm, else CHORUS_ALGO, else the cost model (with the
// registered-buffer tables under CallOptions::registered). An unknown or inapplicable name is an
// InvalidArgument, raised before anything is queued or sent. Runs on the API thread (it owns the choice cache).
void resolve_choice(Communicator::Impl& impl, CollCall& call, const CallOptions& opts) {
  std::string_view name = !opts.algorithm.empty()
                              ? opts.algorithm
                              : std::string_view(impl.config.forced_algorithm[static_cast<int>(call.coll)]);
  const uint64_t bytes = static_cast<uint64_t>(call.count) * core::element_size(call.dtype);
  call.registered = opts.registered && uses_registered_tables(impl, call.coll, bytes, call.in_place);
  // The common case, a loop of same-shaped calls with nothing forced, is settled by the previous choice.
  if (name.empty() && key_of(call.coll, 0, bytes, call.registered, call.in_place) == impl.last_choice.key) {
    call.algorithm = impl.last_choice.algorithm;
    call.estimate = impl.last_choice.estimate;
    return;
  }
  const algo::CallShape shape = shape_of(impl, call);
  auto algos = algo::algorithms_for(call.coll);
  const auto& calibration = calibration_of(impl, call.coll, call.registered, call.in_place);
  const algo::Algorithm* chosen = nullptr;
  if (!name.empty()) {
    chosen = algo::find_algorithm(call.coll, name);
    if (!chosen) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("{}: no algorithm named '{}' (valid: {})", call.op_name, name,
                                    algo::algorithm_names(call.coll)));
    }
    if (chosen->applicable && !chosen->applicable(shape)) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("{}: algorithm '{}' needs {}", call.op_name, chosen->name, chosen->requirement));
    }
  }
  call.forced = chosen != nullptr;
  const uint64_t key = key_of(call.coll, chosen ? static_cast<int>(chosen - algos.data()) + 1 : 0, bytes,
                              call.registered, call.in_place);
  if (key == impl.last_choice.key) {
    call.algorithm = impl.last_choice.algorithm;
    call.estimate = impl.last_choice.estimate;
    return;
  }
  if (auto it = impl.choices.find(key); it != impl.choices.end()) {
    call.algorithm = it->second.first;
    call.estimate = it->second.second;
    impl.last_choice = {key, call.algorithm, call.estimate};
    return;
  }
  if (chosen) {
    call.estimate = algo::estimate(*chosen, shape, impl.link, calibration[chosen - algos.data()]);
  } else {
    double estimates[16];
    chosen = &algo::choose_algorithm(shape, impl.link, calibration.data(), estimates);
    call.estimate = estimates[chosen - algos.data()];
    if (base::log_enabled(base::LogLevel::Info) &&
        impl.logged_choices
            .insert({static_cast<int>(call.coll) * 4 + call.registered * 2 + (call.registered && call.in_place),
                     shape.bytes()})
            .second) {
      std::string alternatives;
      for (size_t i = 0; i < algos.size(); ++i) {
        alternatives += fmt::format("{}{} {:.1f} us", i ? ", " : "", algos[i].name, estimates[i] * 1e6);
      }
      base::log_info("{} of {} bytes on {} ranks{}: {} (estimates: {})", algo::collective_name(call.coll),
                     shape.bytes(), impl.size,
                     !call.registered ? ""
                     : call.in_place  ? ", registered buffers, in place"
                                      : ", registered buffers",
                     chosen->name, alternatives);
    }
  }
  call.algorithm = chosen;
  if (impl.choices.size() < 4096) impl.choices.emplace(key, std::make_pair(chosen, call.estimate));
  impl.last_choice = {key, chosen, call.estimate};
}

void resolve(Communicator::Impl& impl, CollCall& call, const CallOptions& opts) {
  resolve_choice(impl, call, opts);
  call.adaptive = impl.config.adapt_rounds > 0 && !call.forced && impl.size > 1;
}

// Marks the collective in progress for the stall check, for the scope of one call.
class CurrentOpScope {
 public:
  CurrentOpScope(Communicator::Impl& impl, const transport::MessageTag& tag, base::Clock::time_point now)
      : impl_(impl) {
    impl.current.tag = &tag;
    impl.current.start = now;
  }
  ~CurrentOpScope() { impl_.current.tag = nullptr; }

 private:
  Communicator::Impl& impl_;
};

// ---- execution: the calling thread of a synchronous call or the progress thread, holding exec_mu

// CHORUS_ADAPT: the run-time state of a call's shape, created on its first call from the model's estimates
// (the same on every rank). Null when the table of shapes is full: the call then runs the model's choice.
core::AdaptState* adapt_state(Communicator::Impl& impl, const CollCall& call) {
  const uint64_t key = key_of(call.coll, 0, static_cast<uint64_t>(call.count) * core::element_size(call.dtype),
                              call.registered, call.in_place);
  if (key == impl.adapt_last_key) return impl.adapt_last;
  auto it = impl.adapt.find(key);
  if (it == impl.adapt.end()) {
    if (impl.adapt.size() >= 4096) return nullptr;
    const algo::CallShape shape = shape_of(impl, call);
    auto algos = algo::algorithms_for(call.coll);
    double estimates[16];
    algo::choose_algorithm(shape, impl.link, calibration_of(impl, call.coll, call.registered, call.in_place).data(),
                           estimates);
    int idx[core::kAdaptMaxCandidates];
    const int m = core::near_ties(estimates, algos.size(), core::kAdaptMargin, idx);
    const algo::Algorithm* cand[core::kAdaptMaxCandidates];
    for (int i = 0; i < m; ++i) cand[i] = &algos[static_cast<size_t>(idx[i])];
    if (m == 0) cand[0] = call.algorithm;
    const int block = core::adapt_block(m > 0 ? estimates[idx[0]] : 0);
    it = impl.adapt.emplace(key, core::AdaptState(cand, std::max(m, 1), impl.config.adapt_rounds, block)).first;
  }
  impl.adapt_last_key = key;
  impl.adapt_last = &it->second;
  return impl.adapt_last;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The agreement that ends a shape's timing: every rank contributes its figure per candidate (core/adapt.h), the
// elementwise maximum (the slowest rank's figure, which is when the collective completes) is every rank's, and every
// rank takes its argmin. An all_reduce of a few doubles by recursive doubling, in the communicator's sequence like any
// call: every rank reaches it after the same user call. Its bytes are counted in the traffic counters; it is not an
// operation of its own in them or in last_operation().
void agree_on_fastest(Communicator::Impl& impl, const CollCall& call, core::AdaptState& state) {
  static const algo::Algorithm* const kAgreement =
      algo::find_algorithm(algo::Collective::AllReduce, "recursive_doubling");
  double figures[core::kAdaptMaxCandidates];
  const int m = state.candidates();
  state.local_figures(figures);
  const ReduceOp max = ReduceOp::Max;
  algo::OpContext& c =
      make_context(impl, OpKind::AllReduce, kAgreement->id, static_cast<size_t>(m), DataType::Float64, &max, -1);
  CurrentOpScope current(impl, c.tag, base::coarse_now());
  const int64_t trace_start = core::trace::enabled() ? core::trace::now_us() : 0;
  run_guarded(impl, "all_reduce (CHORUS_ADAPT's agreement)",
              [&] { kAgreement->run(c, figures, figures, static_cast<size_t>(m), -1); });
  const int winner = state.decide(figures);
  if (trace_start) {
    core::trace::record_span("adapt agreement", "collective", trace_start, core::trace::now_us(),
                             fmt::format(R"({{"seq":{},"for":"{}","chosen":"{}","comm":"{}"}})", c.tag.seq,
                                         algo::collective_name(call.coll), state.candidate(winner)->name, impl.label));
  }
  if (base::log_enabled(base::LogLevel::Info)) {
    std::string figures_text;
    for (int i = 0; i < m; ++i) {
      figures_text += fmt::format("{}{} {:.1f} us", i ? ", " : "", state.candidate(i)->name, figures[i] * 1e6);
    }
    base::log_info(
        "{} of {} bytes on {} ranks: timed near-ties ({}; per call, slowest rank's median of {} blocks of {}): {}",
        algo::collective_name(call.coll), call.local_bytes, impl.size, figures_text, state.rounds(), state.block(),
        state.candidate(winner)->name);
  }
}

void execute_collective(Communicator::Impl& impl, const CollCall& call) {
  const algo::Algorithm* run = call.algorithm;
  core::AdaptState* adapt = nullptr;
  if (call.adaptive) [[unlikely]] {
    adapt = adapt_state(impl, call);
    if (adapt) run = adapt->next();
  }
  const bool timed = adapt && adapt->exploring();
  const algo::Algorithm& algorithm = *run;
  const auto now = base::coarse_now();  // for the stall check, which is good to a few ms
  algo::OpContext& c = make_context(impl, call.kind, algorithm.id, call.count, call.dtype,
                                    call.has_rop ? &call.rop : nullptr, call.root);
  c.tag.in_place = call.in_place;
  CurrentOpScope current(impl, c.tag, now);
  const int64_t trace_start = core::trace::enabled() ? core::trace::now_us() : 0;
  const double t0 = timed ? seconds_now() : 0;
  run_guarded(impl, call.op_name, [&] {
    impl.transport->check_peers();
    if (impl.size == 1) {
      copy_if_distinct(call.recv, call.send, call.local_bytes);
    } else {
      algorithm.run(c, call.send, call.recv, call.count, call.root);
    }
  });
  const bool agree = timed && adapt->record(t0, seconds_now());
  Communicator::Impl::LastOp& last = impl.last_op;
  last.algorithm = &algorithm;
  last.coll = call.coll;
  last.dtype = call.dtype;
  last.root = call.root;
  last.forced = call.forced;
  last.registered = call.registered;
  last.adapt = !adapt || adapt->candidates() == 1 ? 0 : timed ? 1 : 2;
  last.count = call.count;
  last.sent = c.bytes_sent;
  last.received = c.bytes_received;
  last.estimate = call.estimate;
  ++impl.operations;
  if (trace_start) {
    core::trace::record_span(
        algo::collective_name(call.coll), "collective", trace_start, core::trace::now_us(),
        fmt::format(R"({{"seq":{},"algorithm":"{}","bytes":{},"count":{},"sent":{},"received":{},"comm":"{}"}})",
                    c.tag.seq, algorithm.name, call.local_bytes, call.count, c.bytes_sent, c.bytes_received,
                    impl.label));
  }
  if (agree) [[unlikely]] {
    agree_on_fastest(impl, call, *adapt);
  }
}

MessageTag p2p_frame_tag(const P2PCall& p, uint64_t seq) {
  MessageTag tag;
  tag.op = OpKind::SendRecv;
  tag.dtype = p.dtype;
  tag.algo = AlgoId::Direct;
  tag.count = p.count;
  tag.seq = seq;
  return tag;
}

// Point-to-point calls that progress together: every send is queued first, then every receive runs, then
// the sends are flushed. The transports keep writing queued sends while a receive waits, so any set of
// matching pairs completes, whatever the sizes and the order of the calls on either side.
void execute_p2p(Communicator::Impl& impl, const P2PCall* calls, size_t n) {
  auto deadline = base::Deadline::lazy_after(impl.config.timeout);
  const char* name = n == 1 ? (calls[0].is_send ? "send" : "recv") : "group send/recv";
  const int64_t trace_start = core::trace::enabled() ? core::trace::now_us() : 0;
  run_guarded(impl, name, [&] {
    impl.transport->check_peers();
    // A lone send that the caller waits for leaves this rank idle until it completes: the transport may share
    // the copying with the receiver's core. Receives or other sends in the call keep this rank busy, and a
    // queued send runs while the caller may compute (OpContext::caller_waits).
    const auto work = n == 1 && impl.op_context.caller_waits ? transport::SenderWork::idle(calls[0].bytes)
                                                             : transport::SenderWork::busy();
    for (size_t i = 0; i < n; ++i) {
      const P2PCall& p = calls[i];
      if (p.is_send) {
        impl.transport->isend(p.peer, p2p_frame_tag(p, impl.p2p_send_seq[p.peer]++), p.send, p.bytes, deadline, work);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const P2PCall& p = calls[i];
      if (!p.is_send) impl.transport->recv(p.peer, p2p_frame_tag(p, impl.p2p_recv_seq[p.peer]++), p.recv, p.bytes, deadline);
    }
    impl.transport->flush(deadline);
  });
  uint64_t sent = 0, received = 0;
  for (size_t i = 0; i < n; ++i) {
    const P2PCall& p = calls[i];
    (p.is_send ? impl.sent_to : impl.received_from)[p.peer] += p.bytes;
    (p.is_send ? sent : received) += p.bytes;
  }
  Communicator::Impl::LastOp& last = impl.last_op;
  last = Communicator::Impl::LastOp{};
  last.p2p_name = n == 1 ? name : "sendrecv";
  last.count = n == 1 ? calls[0].count : 0;
  last.sent = sent;
  last.received = received;
  impl.operations += n;
  if (trace_start) {
    core::trace::record_span(name, "p2p", trace_start, core::trace::now_us(),
                             fmt::format(R"({{"calls":{},"sent":{},"received":{},"comm":"{}"}})", n, sent, received,
                                         impl.label));
  }
}

void execute_op(Communicator::Impl& impl, const Op& op) {
  if (auto* c = std::get_if<CollCall>(&op)) {
    execute_collective(impl, *c);
  } else {
    execute_p2p(impl, &std::get<P2PCall>(op), 1);
  }
}

const char* op_name(const Op& op) {
  if (auto* c = std::get_if<CollCall>(&op)) return c->op_name;
  return std::get<P2PCall>(op).is_send ? "send" : "recv";
}

// ---- groups

// All-reduces at most this large are candidates for fusion inside a group (plan_fusable_run decides), into
// transfers at most kFuseMaxTotal large.
constexpr size_t kFuseMaxBytes = size_t{4} << 20;
constexpr size_t kFuseMaxTotal = size_t{64} << 20;
// The copy rate that prices a fusion's two copies when the communicator has none (a tuning without kinds of
// host, and no CHORUS_COPY_GBPS): the slower kind of host in the built-in tuning.
constexpr double kFuseDefaultCopyGbps = 8.0;
// A stretch of all_reduces that are not all latency-bound is fused where that is estimated to take at most this
// share of their time one by one: the estimates are not exact enough to act on a few percent, and a wrong
// fusion of large calls costs far more than a missed one of calls that gain little (plan_fusable_run).
constexpr double kFuseMargin = 0.8;

// A recorded group, planned at group_end on the API thread: runs of fusable all_reduces become one call over
// a staging buffer, runs of point-to-point calls progress together, the rest runs one by one.
struct GroupPlan {
  struct Step {
    enum Kind { Single, Fused, P2P } kind;
    size_t begin, end;  // [begin, end) in ops
    CollCall fused{};   // Fused: the all_reduce over the staging buffer (its pointers set when it runs)
  };
  std::vector<Op> ops;
  std::vector<Step> steps;
};

bool fusable(const Op& op) {
  auto* c = std::get_if<CollCall>(&op);
  return c && c->coll == algo::Collective::AllReduce && !c->forced && c->local_bytes <= kFuseMaxBytes;
}

double copy_bytes_per_second(const Communicator::Impl& impl) {
  return (impl.copy_gbps > 0 ? impl.copy_gbps : kFuseDefaultCopyGbps) * 1e9;
}

// Plans ops [begin, end), a run of fusable all_reduces with one dtype and op. Fusing calls saves every call's
// latency but the first, and costs copying their inputs into the staging buffer and their results out. Small
// calls gain (16 shm all_reduces of 1 KiB on 2 ranks: 4.6 against 15.6 us; over tcp 21 against 242 us); large
// ones lose (16 shm calls of 1 MiB: 5.4 against 2.6 ms), and in between the model's estimates, off by a
// quarter either way at some sizes, decide (16 tcp calls of 4 MiB, estimated 3% faster fused, took 1.5 times
// as long; bench/group_fusion.cc, docs/performance.md). So, by the cost model: a call whose two copies alone
// take longer than the call is never fused, and each stretch of the others is fused where one fused call plus
// the copies is estimated faster than its calls one by one: by any margin where every call is latency-bound
// (estimated at most twice a one-element call; the model, if anything, underestimates what such calls cost
// one by one), else by at least 1 - kFuseMargin. The estimates and the copy rate are the same on every rank,
// so every rank plans alike.
void plan_fusable_run(Communicator::Impl& impl, GroupPlan& plan, size_t begin, size_t end) {
  const auto& v = plan.ops;
  const double copy_rate = copy_bytes_per_second(impl);
  auto copies = [&](size_t bytes) { return 2.0 * static_cast<double>(bytes) / copy_rate; };
  // A call of no elements adds nothing to a fused call (and a table may time it above a one-element call).
  auto worth = [&](const CollCall& c) { return c.local_bytes == 0 || copies(c.local_bytes) < c.estimate; };
  CollCall one = std::get<CollCall>(v[begin]);
  one.count = 1;
  one.local_bytes = dtype_size(one.dtype);
  one.in_place = false;
  resolve(impl, one, CallOptions{});
  auto latency_bound = [&](const CollCall& c) { return c.local_bytes == 0 || c.estimate <= 2.0 * one.estimate; };
  for (size_t i = begin; i < end;) {
    size_t j = i + 1;
    size_t total = std::get<CollCall>(v[i]).local_bytes;
    double separate = std::get<CollCall>(v[i]).estimate;
    bool all_latency_bound = latency_bound(std::get<CollCall>(v[i]));
    if (worth(std::get<CollCall>(v[i]))) {
      while (j < end) {
        const auto& c = std::get<CollCall>(v[j]);
        if (!worth(c)) break;
        total += c.local_bytes;
        separate += c.estimate;
        all_latency_bound = all_latency_bound && latency_bound(c);
        ++j;
      }
    }
    if (j - i > 1) {
      GroupPlan::Step step{GroupPlan::Step::Fused, i, j};
      const auto& first = std::get<CollCall>(v[i]);
      step.fused = first;
      step.fused.op_name = "all_reduce (fused group)";
      step.fused.count = total / dtype_size(first.dtype);
      step.fused.local_bytes = total;
      step.fused.send = step.fused.recv = nullptr;  // the staging buffer, set when it runs: in place
      step.fused.in_place = true;
      // Staged in plain memory, or in registered memory, which local peers read in place, where the tables
      // measured that way (in place) exist for this size and expect it to be faster. Decided from the model
      // alone, which every rank shares.
      CollCall registered = step.fused;
      resolve(impl, step.fused, CallOptions{});
      CallOptions reg;
      reg.registered = true;
      resolve(impl, registered, reg);
      if (registered.registered && registered.estimate < step.fused.estimate) step.fused = registered;
      const double fused = step.fused.estimate + copies(total);
      if (all_latency_bound ? fused < separate : fused <= kFuseMargin * separate) {
        plan.steps.push_back(std::move(step));
        i = j;
        continue;
      }
    }
    for (size_t k = i; k < j; ++k) plan.steps.push_back({GroupPlan::Step::Single, k, k + 1});
    i = j;
  }
}

GroupPlan plan_group(Communicator::Impl& impl, std::vector<Op> ops) {
  GroupPlan plan;
  plan.ops = std::move(ops);
  const auto& v = plan.ops;
  for (size_t i = 0; i < v.size();) {
    size_t j = i + 1;
    if (std::holds_alternative<P2PCall>(v[i])) {
      while (j < v.size() && std::holds_alternative<P2PCall>(v[j])) ++j;
      plan.steps.push_back({GroupPlan::Step::P2P, i, j});
    } else if (fusable(v[i])) {
      const auto& first = std::get<CollCall>(v[i]);
      size_t total = first.local_bytes;
      while (j < v.size() && fusable(v[j])) {
        const auto& c = std::get<CollCall>(v[j]);
        if (c.dtype != first.dtype || c.rop != first.rop || total + c.local_bytes > kFuseMaxTotal) break;
        total += c.local_bytes;
        ++j;
      }
      plan_fusable_run(impl, plan, i, j);
    } else {
      plan.steps.push_back({GroupPlan::Step::Single, i, j});
    }
    i = j;
  }
  return plan;
}

void execute_group(Communicator::Impl& impl, GroupPlan& plan) {
  const int64_t trace_start = core::trace::enabled() ? core::trace::now_us() : 0;
  struct TraceGroup {
    int64_t start;
    size_t calls, steps;
    ~TraceGroup() {
      if (start) {
        core::trace::record_span("group", "group", start, core::trace::now_us(),
                                 fmt::format(R"({{"calls":{},"steps":{}}})", calls, steps));
      }
    }
  } trace_group{trace_start, plan.ops.size(), plan.steps.size()};
  std::vector<P2PCall> p2p;
  for (GroupPlan::Step& step : plan.steps) {
    switch (step.kind) {
      case GroupPlan::Step::Single:
        execute_op(impl, plan.ops[step.begin]);
        break;
      case GroupPlan::Step::P2P:
        p2p.clear();
        for (size_t i = step.begin; i < step.end; ++i) p2p.push_back(std::get<P2PCall>(plan.ops[i]));
        execute_p2p(impl, p2p.data(), p2p.size());
        break;
      case GroupPlan::Step::Fused: {
        // Grown, never shrunk. A registered staging buffer that mem_alloc could not give is plain memory: the
        // call still chooses as planned (every rank must), which costs speed only.
        core::StagingBytes& buffer = step.fused.registered ? impl.fusion_registered : impl.fusion_heap;
        if (buffer.size() < step.fused.local_bytes) {
          buffer = core::StagingBytes(step.fused.local_bytes, step.fused.registered);
        }
        std::byte* staging = buffer.data();
        size_t off = 0;
        for (size_t i = step.begin; i < step.end; ++i) {
          const auto& c = std::get<CollCall>(plan.ops[i]);
          if (c.local_bytes) std::memcpy(staging + off, c.send, c.local_bytes);
          off += c.local_bytes;
        }
        step.fused.send = staging;
        step.fused.recv = staging;
        execute_collective(impl, step.fused);
        off = 0;
        for (size_t i = step.begin; i < step.end; ++i) {
          const auto& c = std::get<CollCall>(plan.ops[i]);
          if (c.local_bytes) std::memcpy(c.recv, staging + off, c.local_bytes);
          off += c.local_bytes;
        }
        break;
      }
    }
  }
}

// ---- submission

core::ProgressEngine& engine_of(Communicator::Impl& impl) {
  if (!impl.engine) impl.engine = std::make_unique<core::ProgressEngine>(impl.label);
  return *impl.engine;
}

// Runs a task on the progress thread and completes its Work.
template <class Task>
void submit_task(Communicator::Impl& impl, const char* name, std::shared_ptr<detail::WorkState> state, Task task) {
  auto shared = std::make_shared<Task>(std::move(task));
  if (core::trace::enabled()) core::trace::record_instant(fmt::format("queue {}", name), "queue");
  engine_of(impl).submit([&impl, name, state = std::move(state), shared] {
    std::lock_guard<core::ExecMutex> lock(impl.exec_mu);
    // The caller does not wait for a queued operation: none of its sends counts as idle.
    impl.op_context.caller_waits = false;
    try {
      throw_if_failed(impl, name);
      (*shared)(impl);
      state->complete();
    } catch (...) {
      state->complete(std::current_exception());
    }
    impl.op_context.caller_waits = true;
  });
}

// Hands a checked operation on: into the open group, onto the progress thread, or (synchronous) run here
// once everything queued before it has run.
// A synchronous call outside a group runs on its own arguments (Call is CollCall or P2PCall); only a queued
// or recorded one becomes an Op.
template <class Call>
Work dispatch(Communicator::Impl& impl, Call&& call, Mode mode) {
  if (mode == Mode::Sync && impl.group_depth == 0) {
    hold_exec_for_sync_call(impl);
    if constexpr (std::is_same_v<std::decay_t<Call>, CollCall>) {
      throw_if_failed(impl, call.op_name);  // something queued before this call may have failed
      execute_collective(impl, call);
    } else {
      throw_if_failed(impl, call.is_send ? "send" : "recv");
      execute_p2p(impl, &call, 1);
    }
    return Work();
  }
  Op op(std::forward<Call>(call));
  if (impl.group_depth > 0) {
    impl.group_ops.push_back(std::move(op));
    return mode == Mode::Async ? Work(impl.group_state) : Work();
  }
  auto state = std::make_shared<detail::WorkState>();
  submit_task(impl, op_name(op), state, [op = std::move(op)](Communicator::Impl& im) { execute_op(im, op); });
  return Work(std::move(state));
}

// Waits until no asynchronous operation is queued or running.
void quiesce(Communicator::Impl& impl) {
  if (impl.engine && !impl.engine->idle()) impl.engine->drain();
}

// ---- argument checks (on the API thread, before anything is queued or sent)

CollCall make_call(algo::Collective coll, OpKind kind, const char* name, const void* send, void* recv, size_t count,
                   DataType type, const ReduceOp* op, int root, size_t local_bytes) {
  return CollCall{coll, kind, name, send, recv, count, type, op != nullptr, op ? *op : ReduceOp::Sum, root,
                  local_bytes};
}

CollCall prepare_all_reduce(Communicator::Impl& impl, const void* send, void* recv, size_t count, DataType type,
                            ReduceOp op, const CallOptions& opts) {
  constexpr const char* kOp = "all_reduce";
  core::check_dtype(kOp, type);
  core::check_reduce_op(kOp, op);
  size_t bytes = core::checked_bytes(kOp, count, type);
  core::check_pointer(kOp, "send", send, bytes);
  core::check_pointer(kOp, "recv", recv, bytes);
  core::check_overlap(kOp, send, bytes, recv, bytes, recv, "requires send == recv");
  CollCall c = make_call(algo::Collective::AllReduce, OpKind::AllReduce, kOp, send, recv, count, type, &op, -1, bytes);
  c.in_place = send == recv;
  resolve(impl, c, opts);
  return c;
}

CollCall prepare_broadcast(Communicator::Impl& impl, const void* send, void* recv, size_t count, DataType type,
                           int root, const CallOptions& opts) {
  constexpr const char* kOp = "broadcast";
  core::check_dtype(kOp, type);
  core::check_rank_arg(kOp, "root", root, impl.size);
  size_t bytes = core::checked_bytes(kOp, count, type);
  core::check_pointer(kOp, "recv", recv, bytes);
  if (impl.rank == root) {
    core::check_pointer(kOp, "send (on the root)", send, bytes);
    core::check_overlap(kOp, send, bytes, recv, bytes, recv, "requires send == recv");
  }
  CollCall c =
      make_call(algo::Collective::Broadcast, OpKind::Broadcast, kOp, send, recv, count, type, nullptr, root, bytes);
  resolve(impl, c, opts);
  return c;
}

CollCall prepare_reduce(Communicator::Impl& impl, const void* send, void* recv, size_t count, DataType type,
                        ReduceOp op, int root, const CallOptions& opts) {
  constexpr const char* kOp = "reduce";
  core::check_dtype(kOp, type);
  core::check_reduce_op(kOp, op);
  core::check_rank_arg(kOp, "root", root, impl.size);
  size_t bytes = core::checked_bytes(kOp, count, type);
  core::check_pointer(kOp, "send", send, bytes);
  if (impl.rank == root) {
    core::check_pointer(kOp, "recv (on the root)", recv, bytes);
    core::check_overlap(kOp, send, bytes, recv, bytes, recv, "requires send == recv");
  }
  CollCall c = make_call(algo::Collective::Reduce, OpKind::Reduce, kOp, send, recv, count, type, &op, root, bytes);
  resolve(impl, c, opts);
  return c;
}

CollCall prepare_all_gather(Communicator::Impl& impl, const void* send, void* recv, size_t send_count, DataType type,
                            const CallOptions& opts) {
  constexpr const char* kOp = "all_gather";
  core::check_dtype(kOp, type);
  size_t bytes = core::checked_bytes(kOp, send_count, type);
  size_t total = core::checked_bytes(kOp, send_count, type, static_cast<size_t>(impl.size));
  core::check_pointer(kOp, "send", send, bytes);
  core::check_pointer(kOp, "recv", recv, total);
  const void* in_place = recv ? static_cast<const char*>(recv) + static_cast<size_t>(impl.rank) * bytes : nullptr;
  core::check_overlap(kOp, send, bytes, recv, total, in_place, "requires send == recv + rank * send_count");
  CollCall c = make_call(algo::Collective::AllGather, OpKind::AllGather, kOp, send, recv, send_count, type, nullptr,
                         -1, bytes);
  c.in_place = send == in_place;
  resolve(impl, c, opts);
  return c;
}

CollCall prepare_reduce_scatter(Communicator::Impl& impl, const void* send, void* recv, size_t recv_count,
                                DataType type, ReduceOp op, const CallOptions& opts) {
  constexpr const char* kOp = "reduce_scatter";
  core::check_dtype(kOp, type);
  core::check_reduce_op(kOp, op);
  size_t bytes = core::checked_bytes(kOp, recv_count, type);
  size_t total = core::checked_bytes(kOp, recv_count, type, static_cast<size_t>(impl.size));
  core::check_pointer(kOp, "send", send, total);
  core::check_pointer(kOp, "recv", recv, bytes);
  // In place: recv == send + rank * recv_count, i.e. send == recv - rank * recv_count.
  const void* in_place = recv ? static_cast<const char*>(recv) - static_cast<size_t>(impl.rank) * bytes : nullptr;
  core::check_overlap(kOp, send, total, recv, bytes, in_place, "requires recv == send + rank * recv_count");
  CollCall c = make_call(algo::Collective::ReduceScatter, OpKind::ReduceScatter, kOp, send, recv, recv_count, type,
                         &op, -1, bytes);
  c.in_place = send == in_place;
  resolve(impl, c, opts);
  return c;
}

CollCall prepare_all_to_all(Communicator::Impl& impl, const void* send, void* recv, size_t count_per_peer,
                            DataType type, const CallOptions& opts) {
  constexpr const char* kOp = "all_to_all";
  core::check_dtype(kOp, type);
  size_t total = core::checked_bytes(kOp, count_per_peer, type, static_cast<size_t>(impl.size));
  core::check_pointer(kOp, "send", send, total);
  core::check_pointer(kOp, "recv", recv, total);
  core::check_overlap(kOp, send, total, recv, total, recv, "requires send == recv");
  CollCall c = make_call(algo::Collective::AllToAll, OpKind::AllToAll, kOp, send, recv, count_per_peer, type, nullptr,
                         -1, total);
  c.in_place = send == recv;
  resolve(impl, c, opts);
  return c;
}

CollCall prepare_gather(Communicator::Impl& impl, const void* send, void* recv, size_t send_count, DataType type,
                        int root, const CallOptions& opts) {
  constexpr const char* kOp = "gather";
  core::check_dtype(kOp, type);
  core::check_rank_arg(kOp, "root", root, impl.size);
  size_t bytes = core::checked_bytes(kOp, send_count, type);
  size_t total = core::checked_bytes(kOp, send_count, type, static_cast<size_t>(impl.size));
  core::check_pointer(kOp, "send", send, bytes);
  if (impl.rank == root) {
    core::check_pointer(kOp, "recv (on the root)", recv, total);
    const void* in_place = recv ? static_cast<const char*>(recv) + static_cast<size_t>(root) * bytes : nullptr;
    core::check_overlap(kOp, send, bytes, recv, total, in_place, "requires send == recv + root * send_count");
  }
  CollCall c =
      make_call(algo::Collective::Gather, OpKind::Gather, kOp, send, recv, send_count, type, nullptr, root, bytes);
  resolve(impl, c, opts);
  return c;
}

CollCall prepare_scatter(Communicator::Impl& impl, const void* send, void* recv, size_t recv_count, DataType type,
                         int root, const CallOptions& opts) {
  constexpr const char* kOp = "scatter";
  core::check_dtype(kOp, type);
  core::check_rank_arg(kOp, "root", root, impl.size);
  size_t bytes = core::checked_bytes(kOp, recv_count, type);
  size_t total = core::checked_bytes(kOp, recv_count, type, static_cast<size_t>(impl.size));
  core::check_pointer(kOp, "recv", recv, bytes);
  if (impl.rank == root) {
    core::check_pointer(kOp, "send (on the root)", send, total);
    const void* in_place = recv ? static_cast<const char*>(recv) - static_cast<size_t>(root) * bytes : nullptr;
    core::check_overlap(kOp, send, total, recv, bytes, in_place, "requires recv == send + root * recv_count");
  }
  CollCall c =
      make_call(algo::Collective::Scatter, OpKind::Scatter, kOp, send, recv, recv_count, type, nullptr, root, bytes);
  resolve(impl, c, opts);
  return c;
}

CollCall prepare_barrier(Communicator::Impl& impl, const CallOptions& opts) {
  CollCall c = make_call(algo::Collective::Barrier, OpKind::Barrier, "barrier", nullptr, nullptr, 0, DataType::UInt8,
                         nullptr, -1, 0);
  resolve(impl, c, opts);
  return c;
}

P2PCall prepare_p2p(const Communicator::Impl& impl, bool is_send, const void* send, void* recv, size_t count,
                    DataType type, int peer) {
  const char* op = is_send ? "send" : "recv";
  const void* buf = is_send ? send : recv;
  core::check_dtype(op, type);
  core::check_rank_arg(op, "peer", peer, impl.size);
  if (peer == impl.rank) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("{}: peer is this rank; copy the data locally instead", op));
  }
  size_t bytes = core::checked_bytes(op, count, type);
  core::check_pointer(op, "buf", buf, bytes);
  return P2PCall{is_send, send, recv, count, type, peer, bytes};
}

}  // namespace

// ---------------------------------------------------------------- failure records

namespace core {
// Out of line and cold: the synchronous calls' hot path only tests a bit before it.
[[noreturn]] [[gnu::noinline]] [[gnu::cold]] void throw_busy(const char* op) {
  base::throw_error(ErrorCode::InvalidArgument,
                    fmt::format("{}: another thread is using this communicator; a communicator is used by one "
                                "thread at a time",
                                op));
}

std::unique_lock<ApiMutex> enter_api(Communicator::Impl& impl, const char* op) {
  std::unique_lock<ApiMutex> api(impl.api_mu, std::try_to_lock);
  if (!api.owns_lock()) throw_busy(op);
  return api;
}

Error fail_communicator(Communicator::Impl& impl, const char* op, const Error& original) {
  Error e = impl.explain(original);
  impl.failure.emplace(e);
  impl.failed.store(true, std::memory_order_release);
  base::log_warn("{} failed: {} [{}]", op, e.message(), to_string(e.code()));
  // The record goes to the store before the connections are torn down: a peer that sees them go looks it up
  // (Impl::explain) and learns the real cause, even if our abort frames never reach it.
  impl.record_failure(e);
  impl.transport->fail(e);
  return e;
}
}  // namespace core

void Communicator::abort(const std::string& reason) noexcept {
  Impl& impl = *impl_;
  if (impl.abort_called.exchange(true)) return;
  try {
    std::string message = fmt::format("{} (Communicator::abort on rank {})", reason, impl.rank);
    base::LogTag log_tag(&impl.label);
    // Wakes the thread that is executing an operation, if any: its wait throws Aborted, and its failure path
    // tells the peers. Otherwise (or if it does not let go in time) the failure path runs here.
    impl.transport->abort(message);
    std::unique_lock<core::ExecMutex> lock(impl.exec_mu, std::defer_lock);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!lock.try_lock()) {
      if (impl.failed.load(std::memory_order_acquire) || std::chrono::steady_clock::now() >= until) return;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!impl.failed.load(std::memory_order_acquire)) {
      core::fail_communicator(impl, "abort", Error(ErrorCode::Aborted, message, impl.rank));
    }
  } catch (const std::exception& e) {
    base::log_warn("abort: {}", e.what());
  }
}

void Communicator::Impl::record_failure(const Error& e) noexcept {
  try {
    store->set(fmt::format("{}failed/{}", key_prefix, rank),
               fmt::format("{}\n{}\n{}", static_cast<int>(e.code()), e.peer(), e.message()));
  } catch (const std::exception&) {
    // The store may be the thing that is gone; the abort frames still carry the cause.
  }
}

Error Communicator::Impl::explain(const Error& e) noexcept {
  // A lost peer may not be the culprit: it may have failed first, for its own reason, and left. Its record
  // says why. A failing rank writes it (and waits for the store's answer) before it drops its connections,
  // so by the time we see them drop it is there; the short grace covers a store slower than the sockets. A
  // killed process writes none, and this wait is part of how long its death takes to report.
  if (e.code() != ErrorCode::PeerLost || e.peer() < 0 || e.peer() >= size || e.peer() == rank) return e;
  try {
    std::string key = fmt::format("{}failed/{}", key_prefix, e.peer());
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (!store->check({key})) {
      if (std::chrono::steady_clock::now() >= until) return e;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::string rec = store->get(key, std::chrono::seconds(1));
    size_t a = rec.find('\n'), b = rec.find('\n', a + 1);
    if (a == std::string::npos || b == std::string::npos) return e;
    int code = std::stoi(rec.substr(0, a)), culprit = std::stoi(rec.substr(a + 1, b - a - 1));
    return Error(static_cast<ErrorCode>(code),
                 fmt::format("rank {} failed and left: {}", e.peer(), rec.substr(b + 1)),
                 culprit >= 0 ? culprit : e.peer());
  } catch (const std::exception&) {
    return e;
  }
}

// ---------------------------------------------------------------- stalls

void Communicator::Impl::on_stall() {
  if (!current.tag || config.mismatch_check.count() == 0 || size == 1) return;
  const transport::MessageTag& tag = *current.tag;
  auto now = std::chrono::steady_clock::now();
  if (now - current.start < config.mismatch_check) return;
  const bool published = current.published_seq == tag.seq;
  if (published && now - current.last_check < std::chrono::milliseconds(500)) return;
  current.last_check = now;
  // Ranks stuck at the same sequence number publish what they are doing; two different operations there are
  // certainly a mismatch (a slow rank that has not reached the call yet publishes nothing and is no conclusion).
  const std::string mine = transport::describe_operation(tag);
  const std::string base = fmt::format("{}op/{}/", key_prefix, tag.seq);
  if (!published) {
    store->set(base + std::to_string(rank), mine);
    current.published_seq = tag.seq;
  }
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    std::string key = base + std::to_string(q);
    if (!store->check({key})) continue;
    std::string theirs = store->get(key, std::chrono::seconds(5));
    if (theirs != mine) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("collective mismatch: call #{} is {} on rank {} but {} on rank {}; every rank must call "
                              "the same collectives in the same order with the same arguments",
                              tag.seq, mine, rank, theirs, q),
                  q);
    }
  }
}

// ---------------------------------------------------------------- construction

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank, int world_size,
                                                   const CommOptions& options) {
  return std::unique_ptr<Communicator>(new Communicator(core::bootstrap(std::move(store), rank, world_size, options)));
}

int Communicator::rank() const noexcept { return impl_->rank; }
int Communicator::size() const noexcept { return impl_->size; }
const CommOptions& Communicator::options() const noexcept { return impl_->options; }
std::string_view Communicator::transport_name() const noexcept { return impl_->transport->name(); }
std::string Communicator::transport_settings() const { return impl_->transport->settings(); }
int Communicator::local_size() const noexcept { return impl_->local_size; }
double Communicator::ranks_per_core() const noexcept { return impl_->ranks_per_core; }
double Communicator::copy_rate_gbps() const noexcept { return impl_->copy_gbps; }
std::string Communicator::tuning_source() const { return impl_->tuning_source; }
bool Communicator::cross_memory_attach() const noexcept { return impl_->cross_memory_attach; }
double Communicator::attach_cost() const noexcept { return impl_->attach_cost; }
bool Communicator::adapts_single_copy() const noexcept { return impl_->adapts_single_copy; }
bool Communicator::failed() const noexcept { return impl_->failed.load(std::memory_order_acquire); }

void Communicator::check_sizes(size_t small, size_t big, size_t factor, const char* what) {
  if (small * factor != big) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("{}: buffer sizes do not match: {} x {} != {} elements", what, small, factor, big));
  }
}

// ---------------------------------------------------------------- collectives
//
// Each public call takes the API scope, checks its arguments and chooses the algorithm (throwing
// InvalidArgument before anything is queued or sent), then dispatches: synchronously, to the progress
// thread, or into the open group.

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) {
  all_reduce(send, recv, count, type, op, CallOptions{});
}
void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                              const CallOptions& opts) {
  ApiScope api(*impl_, "all_reduce", Mode::Sync);
  dispatch(*impl_, prepare_all_reduce(*impl_, send, recv, count, type, op, opts), Mode::Sync);
}
Work Communicator::all_reduce_async(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                                    const CallOptions& opts) {
  ApiScope api(*impl_, "all_reduce");
  return dispatch(*impl_, prepare_all_reduce(*impl_, send, recv, count, type, op, opts), Mode::Async);
}

void Communicator::broadcast(const void* send, void* recv, size_t count, DataType type, int root) {
  broadcast(send, recv, count, type, root, CallOptions{});
}
void Communicator::broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                             const CallOptions& opts) {
  ApiScope api(*impl_, "broadcast", Mode::Sync);
  dispatch(*impl_, prepare_broadcast(*impl_, send, recv, count, type, root, opts), Mode::Sync);
}
Work Communicator::broadcast_async(const void* send, void* recv, size_t count, DataType type, int root,
                                   const CallOptions& opts) {
  ApiScope api(*impl_, "broadcast");
  return dispatch(*impl_, prepare_broadcast(*impl_, send, recv, count, type, root, opts), Mode::Async);
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root) {
  reduce(send, recv, count, type, op, root, CallOptions{});
}
void Communicator::reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                          const CallOptions& opts) {
  ApiScope api(*impl_, "reduce", Mode::Sync);
  dispatch(*impl_, prepare_reduce(*impl_, send, recv, count, type, op, root, opts), Mode::Sync);
}
Work Communicator::reduce_async(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                                const CallOptions& opts) {
  ApiScope api(*impl_, "reduce");
  return dispatch(*impl_, prepare_reduce(*impl_, send, recv, count, type, op, root, opts), Mode::Async);
}

void Communicator::all_gather(const void* send, void* recv, size_t send_count, DataType type) {
  all_gather(send, recv, send_count, type, CallOptions{});
}
void Communicator::all_gather(const void* send, void* recv, size_t send_count, DataType type,
                              const CallOptions& opts) {
  ApiScope api(*impl_, "all_gather", Mode::Sync);
  dispatch(*impl_, prepare_all_gather(*impl_, send, recv, send_count, type, opts), Mode::Sync);
}
Work Communicator::all_gather_async(const void* send, void* recv, size_t send_count, DataType type,
                                    const CallOptions& opts) {
  ApiScope api(*impl_, "all_gather");
  return dispatch(*impl_, prepare_all_gather(*impl_, send, recv, send_count, type, opts), Mode::Async);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) {
  reduce_scatter(send, recv, recv_count, type, op, CallOptions{});
}
void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                                  const CallOptions& opts) {
  ApiScope api(*impl_, "reduce_scatter", Mode::Sync);
  dispatch(*impl_, prepare_reduce_scatter(*impl_, send, recv, recv_count, type, op, opts), Mode::Sync);
}
Work Communicator::reduce_scatter_async(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                                        const CallOptions& opts) {
  ApiScope api(*impl_, "reduce_scatter");
  return dispatch(*impl_, prepare_reduce_scatter(*impl_, send, recv, recv_count, type, op, opts), Mode::Async);
}

void Communicator::all_to_all(const void* send, void* recv, size_t count_per_peer, DataType type) {
  all_to_all(send, recv, count_per_peer, type, CallOptions{});
}
void Communicator::all_to_all(const void* send, void* recv, size_t count_per_peer, DataType type,
                              const CallOptions& opts) {
  ApiScope api(*impl_, "all_to_all", Mode::Sync);
  dispatch(*impl_, prepare_all_to_all(*impl_, send, recv, count_per_peer, type, opts), Mode::Sync);
}
Work Communicator::all_to_all_async(const void* send, void* recv, size_t count_per_peer, DataType type,
                                    const CallOptions& opts) {
  ApiScope api(*impl_, "all_to_all");
  return dispatch(*impl_, prepare_all_to_all(*impl_, send, recv, count_per_peer, type, opts), Mode::Async);
}

void Communicator::gather(const void* send, void* recv, size_t send_count, DataType type, int root) {
  gather(send, recv, send_count, type, root, CallOptions{});
}
void Communicator::gather(const void* send, void* recv, size_t send_count, DataType type, int root,
                          const CallOptions& opts) {
  ApiScope api(*impl_, "gather", Mode::Sync);
  dispatch(*impl_, prepare_gather(*impl_, send, recv, send_count, type, root, opts), Mode::Sync);
}
Work Communicator::gather_async(const void* send, void* recv, size_t send_count, DataType type, int root,
                                const CallOptions& opts) {
  ApiScope api(*impl_, "gather");
  return dispatch(*impl_, prepare_gather(*impl_, send, recv, send_count, type, root, opts), Mode::Async);
}

void Communicator::scatter(const void* send, void* recv, size_t recv_count, DataType type, int root) {
  scatter(send, recv, recv_count, type, root, CallOptions{});
}
void Communicator::scatter(const void* send, void* recv, size_t recv_count, DataType type, int root,
                           const CallOptions& opts) {
  ApiScope api(*impl_, "scatter", Mode::Sync);
  dispatch(*impl_, prepare_scatter(*impl_, send, recv, recv_count, type, root, opts), Mode::Sync);
}
Work Communicator::scatter_async(const void* send, void* recv, size_t recv_count, DataType type, int root,
                                 const CallOptions& opts) {
  ApiScope api(*impl_, "scatter");
  return dispatch(*impl_, prepare_scatter(*impl_, send, recv, recv_count, type, root, opts), Mode::Async);
}

void Communicator::barrier() { barrier(CallOptions{}); }
void Communicator::barrier(const CallOptions& opts) {
  ApiScope api(*impl_, "barrier", Mode::Sync);
  dispatch(*impl_, prepare_barrier(*impl_, opts), Mode::Sync);
}
Work Communicator::barrier_async(const CallOptions& opts) {
  ApiScope api(*impl_, "barrier");
  return dispatch(*impl_, prepare_barrier(*impl_, opts), Mode::Async);
}

// ---------------------------------------------------------------- groups

void Communicator::group_start() {
  ApiScope api(*impl_, "group_start");
  if (impl_->group_depth++ == 0) {
    impl_->group_ops.clear();
    impl_->group_state = std::make_shared<detail::WorkState>();
  }
}

namespace {
// Closes a group level. The outermost one sets *submitted, plans the recorded calls and runs them:
// group_end_async on the progress thread, group_end (`sync`) right here on the caller's thread, as a
// synchronous call runs once the queue has drained (a hand-off to the progress thread and back costs more
// than a small group's work). Either way the Works of the asynchronous calls recorded in the group complete
// with the group.
Work end_group(Communicator::Impl& impl, bool* submitted, bool sync = false) {
  *submitted = false;
  if (impl.group_depth == 0) {
    base::throw_error(ErrorCode::InvalidArgument, "group_end: no group is open (call group_start first)");
  }
  if (--impl.group_depth > 0) return Work(impl.group_state);
  auto state = std::move(impl.group_state);
  std::vector<Op> ops = std::move(impl.group_ops);
  impl.group_ops.clear();
  *submitted = true;
  if (ops.empty()) {
    state->complete();
    return Work(std::move(state));
  }
  GroupPlan plan = plan_group(impl, std::move(ops));
  if (sync) {
    hold_exec_for_sync_call(impl);
    try {
      throw_if_failed(impl, "group");  // something queued before the group may have failed
      execute_group(impl, plan);
      state->complete();
    } catch (...) {
      state->complete(std::current_exception());
      throw;
    }
    return Work(std::move(state));
  }
  submit_task(impl, "group", state,
              [plan = std::move(plan)](Communicator::Impl& im) mutable { execute_group(im, plan); });
  return Work(std::move(state));
}
}  // namespace

Work Communicator::group_end_async() {
  ApiScope api(*impl_, "group_end");
  bool submitted;
  return end_group(*impl_, &submitted);
}

void Communicator::group_end() {
  ApiScope api(*impl_, "group_end", Mode::Sync);
  bool submitted;
  end_group(*impl_, &submitted, /*sync=*/true);
}

void Communicator::synchronize() {
  auto api = core::enter_api(*impl_, "synchronize");
  quiesce(*impl_);
}

// ---------------------------------------------------------------- introspection

std::vector<std::string> algorithm_names(std::string_view collective) {
  algo::Collective c;
  if (!algo::parse_collective(collective, &c)) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("unknown collective '{}' (valid: allreduce, allgather, reducescatter, broadcast, "
                                  "reduce, alltoall, gather, scatter, barrier)",
                                  collective));
  }
  std::vector<std::string> names;
  for (const algo::Algorithm& a : algo::algorithms_for(c)) names.emplace_back(a.name);
  return names;
}

std::string Communicator::automatic_algorithm(std::string_view collective, size_t count, DataType type) const {
  return automatic_algorithm(collective, count, type, CallOptions{});
}

std::string Communicator::automatic_algorithm(std::string_view collective, size_t count, DataType type,
                                              const CallOptions& opts, bool in_place) const {
  algo::Collective c;
  if (!algo::parse_collective(collective, &c)) algorithm_names(collective);  // throws the precise error
  core::check_dtype("automatic_algorithm", type);
  // As the calls set CollCall::in_place: only these four collectives have in-place tables.
  const bool ip = in_place && (c == algo::Collective::AllReduce || c == algo::Collective::AllGather ||
                               c == algo::Collective::ReduceScatter || c == algo::Collective::AllToAll);
  const bool registered = opts.registered && uses_registered_tables(*impl_, c, count * core::element_size(type), ip);
  return algo::choose_algorithm(shape_of(*impl_, c, count, type, 0), impl_->link,
                                calibration_of(*impl_, c, registered, ip).data())
      .name;
}

TrafficCounters Communicator::traffic() const {
  quiesce(*impl_);
  std::lock_guard<core::ExecMutex> lock(impl_->exec_mu);
  TrafficCounters t;
  t.sent_to = impl_->sent_to;
  t.received_from = impl_->received_from;
  for (int q = 0; q < impl_->size; ++q) {
    t.via.emplace_back(q == impl_->rank ? std::string_view("self") : impl_->transport->transport_for(q));
  }
  for (uint64_t b : t.sent_to) t.bytes_sent += b;
  for (uint64_t b : t.received_from) t.bytes_received += b;
  t.operations = impl_->operations;
  const transport::WaitCounters w = impl_->transport->wait_counters();
  t.sleeps = w.sleeps;
  t.missed_wakeups = w.missed_wakeups;
  t.attach_reads = w.attach_reads;
  t.registered_reads = w.mapped_reads;
  t.ring_rewinds = w.ring_rewinds;
  t.ring_large_frames = w.ring_large_frames;
  t.path_switches = w.path_switches;
  t.idle_sender_frames = w.idle_sender_frames;
  t.paired_frames = w.paired_frames;
  return t;
}

OperationInfo Communicator::last_operation() const {
  quiesce(*impl_);
  std::lock_guard<core::ExecMutex> lock(impl_->exec_mu);
  const Impl::LastOp& last = impl_->last_op;
  OperationInfo info;
  info.forced = last.forced;
  info.registered_tables = last.registered;
  info.count = last.count;
  info.bytes_sent = last.sent;
  info.bytes_received = last.received;
  info.estimated_seconds = last.estimate;
  info.adaptive = last.adapt != 0;
  info.exploring = last.adapt == 1;
  if (last.algorithm) {
    algo::Traffic predicted = last.algorithm->traffic(shape_of(*impl_, last.coll, last.count, last.dtype, last.root));
    info.collective = algo::collective_name(last.coll);
    info.algorithm = last.algorithm->name;
    info.predicted_sent = predicted.sent;
    info.predicted_received = predicted.received;
  } else if (*last.p2p_name) {
    info.collective = last.p2p_name;
    info.algorithm = "direct";
    info.predicted_sent = last.sent;
    info.predicted_received = last.received;
  }
  return info;
}

// ---------------------------------------------------------------- point to point

void Communicator::send(const void* buf, size_t count, DataType type, int peer) {
  ApiScope api(*impl_, "send", Mode::Sync);
  dispatch(*impl_, prepare_p2p(*impl_, true, buf, nullptr, count, type, peer), Mode::Sync);
}
void Communicator::recv(void* buf, size_t count, DataType type, int peer) {
  ApiScope api(*impl_, "recv", Mode::Sync);
  dispatch(*impl_, prepare_p2p(*impl_, false, nullptr, buf, count, type, peer), Mode::Sync);
}
Work Communicator::send_async(const void* buf, size_t count, DataType type, int peer) {
  ApiScope api(*impl_, "send");
  return dispatch(*impl_, prepare_p2p(*impl_, true, buf, nullptr, count, type, peer), Mode::Async);
}
Work Communicator::recv_async(void* buf, size_t count, DataType type, int peer) {
  ApiScope api(*impl_, "recv");
  return dispatch(*impl_, prepare_p2p(*impl_, false, nullptr, buf, count, type, peer), Mode::Async);
}

// ---------------------------------------------------------------- split

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  if (color < kNoColor) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("split: color {} is negative; use a color >= 0, or kNoColor to opt out", color));
  }
  // Everyone learns everyone's (color, key) with an all_gather over this communicator.
  int64_t mine[2] = {color, key};
  std::vector<int64_t> all(static_cast<size_t>(2 * size()));
  all_gather(mine, all.data(), 2, DataType::Int64);
  uint64_t split_index;
  {
    std::lock_guard<core::ExecMutex> lock(impl_->exec_mu);
    split_index = impl_->splits++;
  }
  if (color == kNoColor) return nullptr;
  std::vector<std::pair<int64_t, int>> members;  // (key, parent rank)
  for (int r = 0; r < size(); ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == rank()) new_rank = static_cast<int>(i);
  }
  auto child_store = std::make_shared<PrefixStore>(
      fmt::format("{}split{}/color{}/", impl_->key_prefix, split_index, color), impl_->store);
  CommOptions opts = impl_->options;
  opts.name = fmt::format("{}.{}", impl_->options.name, color);
  auto child = create(std::move(child_store), new_rank, static_cast<int>(members.size()), opts);
  child->impl_->keepalive = impl_->keepalive;
  return child;
}

}  // namespace chorus
