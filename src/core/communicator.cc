// The public Communicator: argument checks, operation fingerprints and sequence numbers, dispatch to the
// algorithms, and the failure state.
#include <algorithm>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "algo/algorithms.h"
#include "algo/registry.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/communicator_impl.h"
#include "core/validate.h"
#include "kernels/reduce.h"

namespace chorus {

using transport::AlgoId;
using transport::MessageTag;
using transport::OpKind;

namespace {

// Holds the call lock for one operation and turns any failure inside it into the communicator's failure.
class OpScope {
 public:
  OpScope(Communicator::Impl& impl, const char* op)
      : impl_(impl), op_(op), lock_(impl.call_mu, std::try_to_lock), log_tag_(&impl.label) {
    if (!lock_.owns_lock()) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("{}: another thread is using this communicator; a communicator is used by one "
                                    "thread at a time",
                                    op));
    }
    if (impl.failure) {
      throw Error(ErrorCode::Aborted,
                  fmt::format("{}: the communicator failed earlier and can no longer be used (create a new one): {}",
                              op, impl.failure->message()),
                  impl.failure->peer());
    }
  }

  // Builds the context for an operation whose arguments were checked; consumes a sequence number.
  algo::OpContext context(OpKind kind, AlgoId algo, size_t count, DataType dtype, const ReduceOp* rop, int root) {
    algo::OpContext c;
    c.transport = impl_.transport.get();
    c.scratch = &impl_.scratch;
    c.rank = impl_.rank;
    c.size = impl_.size;
    c.world_size = impl_.size;
    c.topology = &impl_.topology;
    c.inter_link = &impl_.link;
    c.sent_to = impl_.sent_to.data();
    c.received_from = impl_.received_from.data();
    c.tag.op = kind;
    c.tag.dtype = dtype;
    c.tag.algo = algo;
    c.tag.root = root;
    c.tag.count = count;
    c.tag.seq = impl_.next_seq++;
    c.deadline = base::Deadline::after(impl_.config.timeout);
    c.dtype = dtype;
    c.esize = dtype_size(dtype);
    c.slice_bytes = std::max(c.esize, impl_.config.slice_bytes - impl_.config.slice_bytes % c.esize);
    if (rop) {
      c.tag.has_reduce_op = true;
      c.tag.reduce_op = *rop;
      c.op = *rop;
      c.reduce.fn = kernels::reduce_fn(dtype, *rop);
      c.reduce.elem_size = c.esize;
      c.reduce_final = c.reduce;
      if (*rop == ReduceOp::Avg) {
        c.reduce_final.sum_div = kernels::sum_div_fn(dtype);
        c.reduce_final.divisor = static_cast<uint64_t>(impl_.size);
        c.divide = kernels::div_fn(dtype);
      }
    }
    return c;
  }

  template <class Body>
  void run(Body&& body) {
    try {
      body();
    } catch (const Error& e) {
      throw fail(e);
    } catch (const std::bad_alloc&) {
      throw fail(Error(ErrorCode::Internal, fmt::format("{}: out of memory", op_)));
    } catch (const std::exception& e) {
      throw fail(Error(ErrorCode::Internal, fmt::format("{}: {}", op_, e.what())));
    }
  }

 private:
  // Records the failure and returns the error to throw.
  Error fail(const Error& original) {
    Error e = impl_.explain(original);
    impl_.failure.emplace(e);
    impl_.failed.store(true, std::memory_order_release);
    base::log_warn("{} failed: {} [{}]", op_, e.message(), to_string(e.code()));
    // The record goes to the store before the connections are torn down: a peer that sees them go looks it up
    // (Impl::explain) and learns the real cause, even if our abort frames never reach it.
    impl_.record_failure(e);
    impl_.transport->fail(e);
    return e;
  }

  Communicator::Impl& impl_;
  const char* op_;
  std::unique_lock<std::mutex> lock_;
  base::LogTag log_tag_;
};

void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

// One collective call, its arguments already checked.
struct CollCall {
  algo::Collective coll;
  OpKind kind;
  const char* op_name;
  const void* send;
  void* recv;
  size_t count;
  DataType dtype;
  const ReduceOp* rop;  // null for data movement
  int root;             // -1 when the collective has none
  size_t local_bytes;   // what a world of one copies from send to recv
  const CallOptions* opts;
};

algo::CallShape shape_of(const Communicator::Impl& impl, const CollCall& call) {
  algo::CallShape s;
  s.coll = call.coll;
  s.size = impl.size;
  s.rank = impl.rank;
  s.root = std::max(call.root, 0);
  s.count = call.count;
  s.esize = dtype_size(call.dtype);
  s.slice_bytes = std::max(s.esize, impl.config.slice_bytes - impl.config.slice_bytes % s.esize);
  s.topology = &impl.topology;
  s.intra = &impl.intra_link;
  s.inter = &impl.link;
  return s;
}

// The algorithm for a call: the call's option, else CHORUS_ALGO, else the cost model. An unknown name is an
// InvalidArgument, raised before anything is sent.
const algo::Algorithm& select_algorithm(Communicator::Impl& impl, const CollCall& call, const algo::CallShape& shape,
                                        bool* forced, double* estimate) {
  std::string_view name = call.opts && !call.opts->algorithm.empty()
                              ? call.opts->algorithm
                              : std::string_view(impl.config.forced_algorithm[static_cast<int>(call.coll)]);
  auto algos = algo::algorithms_for(call.coll);
  const auto& calibration = impl.calibration[static_cast<int>(call.coll)];
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
  *forced = chosen != nullptr;
  const uint64_t key = (static_cast<uint64_t>(call.coll) << 56) |
                       (static_cast<uint64_t>(chosen ? chosen - algos.data() + 1 : 0) << 48) |
                       (static_cast<uint64_t>(shape.bytes()) & ((uint64_t{1} << 48) - 1));
  if (auto it = impl.choices.find(key); it != impl.choices.end()) {
    *estimate = it->second.second;
    return *it->second.first;
  }
  if (chosen) {
    *estimate = algo::estimate(*chosen, shape, impl.link, calibration[chosen - algos.data()]);
  } else {
    double estimates[16];
    chosen = &algo::choose_algorithm(shape, impl.link, calibration.data(), estimates);
    *estimate = estimates[chosen - algos.data()];
    if (base::log_enabled(base::LogLevel::Info) &&
        impl.logged_choices.insert({static_cast<int>(call.coll), shape.bytes()}).second) {
      std::string alternatives;
      for (size_t i = 0; i < algos.size(); ++i) {
        alternatives += fmt::format("{}{} {:.1f} us", i ? ", " : "", algos[i].name, estimates[i] * 1e6);
      }
      base::log_info("{} of {} bytes on {} ranks: {} (estimates: {})", algo::collective_name(call.coll),
                     shape.bytes(), impl.size, chosen->name, alternatives);
    }
  }
  if (impl.choices.size() < 4096) impl.choices.emplace(key, std::make_pair(chosen, *estimate));
  return *chosen;
}

// Marks the collective in progress for the stall check, for the scope of one call.
class CurrentOpScope {
 public:
  CurrentOpScope(Communicator::Impl& impl, const transport::MessageTag& tag) : impl_(impl) {
    auto& cur = impl.current;
    cur.active = true;
    cur.tag = tag;
    cur.start = std::chrono::steady_clock::now();
    cur.last_check = cur.start;
    cur.published = false;
  }
  ~CurrentOpScope() { impl_.current.active = false; }

 private:
  Communicator::Impl& impl_;
};

void run_collective(Communicator::Impl& impl, OpScope& scope, const CollCall& call) {
  algo::CallShape shape = shape_of(impl, call);
  bool forced = false;
  double estimate = 0;
  const algo::Algorithm& algorithm = select_algorithm(impl, call, shape, &forced, &estimate);
  algo::OpContext c = scope.context(call.kind, algorithm.id, call.count, call.dtype, call.rop, call.root);
  CurrentOpScope current(impl, c.tag);
  scope.run([&] {
    impl.transport->check_peers();
    if (impl.size == 1) {
      copy_if_distinct(call.recv, call.send, call.local_bytes);
    } else {
      algorithm.run(c, call.send, call.recv, call.count, call.root);
    }
  });
  algo::Traffic predicted = algorithm.traffic(shape);
  OperationInfo& info = impl.last_op;
  info.collective = algo::collective_name(call.coll);
  info.algorithm = algorithm.name;
  info.forced = forced;
  info.count = call.count;
  info.bytes_sent = c.bytes_sent;
  info.bytes_received = c.bytes_received;
  info.predicted_sent = predicted.sent;
  info.predicted_received = predicted.received;
  info.estimated_seconds = estimate;
  ++impl.operations;
}

void record_p2p(Communicator::Impl& impl, const char* what, size_t count, uint64_t sent, uint64_t received) {
  OperationInfo& info = impl.last_op;
  info = OperationInfo{};
  info.collective = what;
  info.algorithm = "direct";
  info.count = count;
  info.bytes_sent = info.predicted_sent = sent;
  info.bytes_received = info.predicted_received = received;
  ++impl.operations;
}

}  // namespace

// ---------------------------------------------------------------- failure records

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
  // (written before it dropped its connections) says why; give it a moment to land.
  if (e.code() != ErrorCode::PeerLost || e.peer() < 0 || e.peer() >= size || e.peer() == rank) return e;
  try {
    std::string key = fmt::format("{}failed/{}", key_prefix, e.peer());
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
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
  if (!current.active || config.mismatch_check.count() == 0 || size == 1) return;
  auto now = std::chrono::steady_clock::now();
  if (now - current.start < config.mismatch_check) return;
  if (current.published && now - current.last_check < std::chrono::milliseconds(500)) return;
  current.last_check = now;
  // Ranks stuck at the same sequence number publish what they are doing; two different operations there are
  // certainly a mismatch (a slow rank that has not reached the call yet publishes nothing and is no conclusion).
  const std::string mine = transport::describe_operation(current.tag);
  const std::string base = fmt::format("{}op/{}/", key_prefix, current.tag.seq);
  if (!current.published) {
    store->set(base + std::to_string(rank), mine);
    current.published = true;
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
                              current.tag.seq, mine, rank, theirs, q),
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
bool Communicator::failed() const noexcept { return impl_->failed.load(std::memory_order_acquire); }

void Communicator::check_sizes(size_t small, size_t big, size_t factor, const char* what) {
  if (small * factor != big) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("{}: buffer sizes do not match: {} x {} != {} elements", what, small, factor, big));
  }
}

// ---------------------------------------------------------------- collectives
//
// Each public call checks its arguments (throwing InvalidArgument before anything is sent), then hands a
// CollCall to run_collective. The overloads without CallOptions pass none.

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) {
  all_reduce(send, recv, count, type, op, CallOptions{});
}

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                              const CallOptions& opts) {
  constexpr const char* kOp = "all_reduce";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  core::check_reduce_op(kOp, op);
  size_t bytes = core::checked_bytes(kOp, count, type);
  core::check_pointer(kOp, "send", send, bytes);
  core::check_pointer(kOp, "recv", recv, bytes);
  core::check_overlap(kOp, send, bytes, recv, bytes, recv, "requires send == recv");
  run_collective(*impl_, scope,
                 {algo::Collective::AllReduce, OpKind::AllReduce, kOp, send, recv, count, type, &op, -1, bytes, &opts});
}

void Communicator::broadcast(const void* send, void* recv, size_t count, DataType type, int root) {
  broadcast(send, recv, count, type, root, CallOptions{});
}

void Communicator::broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                             const CallOptions& opts) {
  constexpr const char* kOp = "broadcast";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  core::check_rank_arg(kOp, "root", root, impl_->size);
  size_t bytes = core::checked_bytes(kOp, count, type);
  core::check_pointer(kOp, "recv", recv, bytes);
  if (impl_->rank == root) {
    core::check_pointer(kOp, "send (on the root)", send, bytes);
    core::check_overlap(kOp, send, bytes, recv, bytes, recv, "requires send == recv");
  }
  run_collective(*impl_, scope, {algo::Collective::Broadcast, OpKind::Broadcast, kOp, send, recv, count, type,
                                 nullptr, root, bytes, &opts});
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root) {
  reduce(send, recv, count, type, op, root, CallOptions{});
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                          const CallOptions& opts) {
  constexpr const char* kOp = "reduce";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  core::check_reduce_op(kOp, op);
  core::check_rank_arg(kOp, "root", root, impl_->size);
  size_t bytes = core::checked_bytes(kOp, count, type);
  core::check_pointer(kOp, "send", send, bytes);
  if (impl_->rank == root) {
    core::check_pointer(kOp, "recv (on the root)", recv, bytes);
    core::check_overlap(kOp, send, bytes, recv, bytes, recv, "requires send == recv");
  }
  run_collective(*impl_, scope,
                 {algo::Collective::Reduce, OpKind::Reduce, kOp, send, recv, count, type, &op, root, bytes, &opts});
}

void Communicator::all_gather(const void* send, void* recv, size_t send_count, DataType type) {
  all_gather(send, recv, send_count, type, CallOptions{});
}

void Communicator::all_gather(const void* send, void* recv, size_t send_count, DataType type,
                              const CallOptions& opts) {
  constexpr const char* kOp = "all_gather";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  size_t bytes = core::checked_bytes(kOp, send_count, type);
  size_t total = core::checked_bytes(kOp, send_count, type, static_cast<size_t>(impl_->size));
  core::check_pointer(kOp, "send", send, bytes);
  core::check_pointer(kOp, "recv", recv, total);
  const void* in_place = recv ? static_cast<const char*>(recv) + static_cast<size_t>(impl_->rank) * bytes : nullptr;
  core::check_overlap(kOp, send, bytes, recv, total, in_place, "requires send == recv + rank * send_count");
  run_collective(*impl_, scope, {algo::Collective::AllGather, OpKind::AllGather, kOp, send, recv, send_count, type,
                                 nullptr, -1, bytes, &opts});
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) {
  reduce_scatter(send, recv, recv_count, type, op, CallOptions{});
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                                  const CallOptions& opts) {
  constexpr const char* kOp = "reduce_scatter";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  core::check_reduce_op(kOp, op);
  size_t bytes = core::checked_bytes(kOp, recv_count, type);
  size_t total = core::checked_bytes(kOp, recv_count, type, static_cast<size_t>(impl_->size));
  core::check_pointer(kOp, "send", send, total);
  core::check_pointer(kOp, "recv", recv, bytes);
  // In place: recv == send + rank * recv_count, i.e. send == recv - rank * recv_count.
  const void* in_place = recv ? static_cast<const char*>(recv) - static_cast<size_t>(impl_->rank) * bytes : nullptr;
  core::check_overlap(kOp, send, total, recv, bytes, in_place, "requires recv == send + rank * recv_count");
  run_collective(*impl_, scope, {algo::Collective::ReduceScatter, OpKind::ReduceScatter, kOp, send, recv, recv_count,
                                 type, &op, -1, bytes, &opts});
}

void Communicator::all_to_all(const void* send, void* recv, size_t count_per_peer, DataType type) {
  all_to_all(send, recv, count_per_peer, type, CallOptions{});
}

void Communicator::all_to_all(const void* send, void* recv, size_t count_per_peer, DataType type,
                              const CallOptions& opts) {
  constexpr const char* kOp = "all_to_all";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  size_t total = core::checked_bytes(kOp, count_per_peer, type, static_cast<size_t>(impl_->size));
  core::check_pointer(kOp, "send", send, total);
  core::check_pointer(kOp, "recv", recv, total);
  core::check_overlap(kOp, send, total, recv, total, recv, "requires send == recv");
  run_collective(*impl_, scope, {algo::Collective::AllToAll, OpKind::AllToAll, kOp, send, recv, count_per_peer, type,
                                 nullptr, -1, total, &opts});
}

void Communicator::gather(const void* send, void* recv, size_t send_count, DataType type, int root) {
  gather(send, recv, send_count, type, root, CallOptions{});
}

void Communicator::gather(const void* send, void* recv, size_t send_count, DataType type, int root,
                          const CallOptions& opts) {
  constexpr const char* kOp = "gather";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  core::check_rank_arg(kOp, "root", root, impl_->size);
  size_t bytes = core::checked_bytes(kOp, send_count, type);
  size_t total = core::checked_bytes(kOp, send_count, type, static_cast<size_t>(impl_->size));
  core::check_pointer(kOp, "send", send, bytes);
  if (impl_->rank == root) {
    core::check_pointer(kOp, "recv (on the root)", recv, total);
    const void* in_place = recv ? static_cast<const char*>(recv) + static_cast<size_t>(root) * bytes : nullptr;
    core::check_overlap(kOp, send, bytes, recv, total, in_place, "requires send == recv + root * send_count");
  }
  run_collective(*impl_, scope, {algo::Collective::Gather, OpKind::Gather, kOp, send, recv, send_count, type, nullptr,
                                 root, bytes, &opts});
}

void Communicator::scatter(const void* send, void* recv, size_t recv_count, DataType type, int root) {
  scatter(send, recv, recv_count, type, root, CallOptions{});
}

void Communicator::scatter(const void* send, void* recv, size_t recv_count, DataType type, int root,
                           const CallOptions& opts) {
  constexpr const char* kOp = "scatter";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  core::check_rank_arg(kOp, "root", root, impl_->size);
  size_t bytes = core::checked_bytes(kOp, recv_count, type);
  size_t total = core::checked_bytes(kOp, recv_count, type, static_cast<size_t>(impl_->size));
  core::check_pointer(kOp, "recv", recv, bytes);
  if (impl_->rank == root) {
    core::check_pointer(kOp, "send (on the root)", send, total);
    const void* in_place = recv ? static_cast<const char*>(recv) - static_cast<size_t>(root) * bytes : nullptr;
    core::check_overlap(kOp, send, total, recv, bytes, in_place, "requires recv == send + root * recv_count");
  }
  run_collective(*impl_, scope, {algo::Collective::Scatter, OpKind::Scatter, kOp, send, recv, recv_count, type,
                                 nullptr, root, bytes, &opts});
}

void Communicator::barrier() { barrier(CallOptions{}); }

void Communicator::barrier(const CallOptions& opts) {
  OpScope scope(*impl_, "barrier");
  run_collective(*impl_, scope, {algo::Collective::Barrier, OpKind::Barrier, "barrier", nullptr, nullptr, 0,
                                 DataType::UInt8, nullptr, -1, 0, &opts});
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
  algo::Collective c;
  if (!algo::parse_collective(collective, &c)) algorithm_names(collective);  // throws the precise error
  core::check_dtype("automatic_algorithm", type);
  CollCall call{c, OpKind::None, "automatic_algorithm", nullptr, nullptr, count, type, nullptr, 0, 0, nullptr};
  return algo::choose_algorithm(shape_of(*impl_, call), impl_->link, impl_->calibration[static_cast<int>(c)].data())
      .name;
}

TrafficCounters Communicator::traffic() const {
  TrafficCounters t;
  t.sent_to = impl_->sent_to;
  t.received_from = impl_->received_from;
  for (int q = 0; q < impl_->size; ++q) {
    t.via.emplace_back(q == impl_->rank ? std::string_view("self") : impl_->transport->transport_for(q));
  }
  for (uint64_t b : t.sent_to) t.bytes_sent += b;
  for (uint64_t b : t.received_from) t.bytes_received += b;
  t.operations = impl_->operations;
  return t;
}

OperationInfo Communicator::last_operation() const { return impl_->last_op; }

// ---------------------------------------------------------------- point to point

namespace {
// Checks a point-to-point call's arguments and builds its frame tag; `seq` is the pair's counter.
MessageTag p2p_tag(const Communicator::Impl& impl, const char* op, const void* buf, size_t count, DataType type,
                   int peer, uint64_t seq, size_t* bytes) {
  core::check_dtype(op, type);
  core::check_rank_arg(op, "peer", peer, impl.size);
  if (peer == impl.rank) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("{}: peer is this rank; copy the data locally instead", op));
  }
  *bytes = core::checked_bytes(op, count, type);
  core::check_pointer(op, "buf", buf, *bytes);
  MessageTag tag;
  tag.op = OpKind::SendRecv;
  tag.dtype = type;
  tag.algo = AlgoId::Direct;
  tag.count = count;
  tag.seq = seq;
  return tag;
}
}  // namespace

void Communicator::send(const void* buf, size_t count, DataType type, int peer) {
  OpScope scope(*impl_, "send");
  size_t bytes = 0;
  MessageTag tag = p2p_tag(*impl_, "send", buf, count, type, peer,
                           peer >= 0 && peer < impl_->size ? impl_->p2p_send_seq[peer] : 0, &bytes);
  auto deadline = base::Deadline::after(impl_->config.timeout);
  scope.run([&] {
    impl_->transport->check_peers();
    impl_->transport->isend(peer, tag, buf, bytes, deadline);
    impl_->transport->flush(deadline);
    ++impl_->p2p_send_seq[peer];
  });
  impl_->sent_to[peer] += bytes;
  record_p2p(*impl_, "send", count, bytes, 0);
}

void Communicator::recv(void* buf, size_t count, DataType type, int peer) {
  OpScope scope(*impl_, "recv");
  size_t bytes = 0;
  MessageTag tag = p2p_tag(*impl_, "recv", buf, count, type, peer,
                           peer >= 0 && peer < impl_->size ? impl_->p2p_recv_seq[peer] : 0, &bytes);
  auto deadline = base::Deadline::after(impl_->config.timeout);
  scope.run([&] {
    impl_->transport->check_peers();
    impl_->transport->recv(peer, tag, buf, bytes, deadline);
    ++impl_->p2p_recv_seq[peer];
  });
  impl_->received_from[peer] += bytes;
  record_p2p(*impl_, "recv", count, 0, bytes);
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
    std::lock_guard<std::mutex> lock(impl_->call_mu);
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
