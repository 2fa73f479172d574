// The public Communicator: argument checks, operation fingerprints and sequence numbers, dispatch to the
// algorithms, and the failure state.
#include <cstring>

#include <fmt/format.h>

#include "algo/algorithms.h"
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

  // Builds the context for an operation whose arguments were checked.
  algo::OpContext context(OpKind kind, AlgoId algo, size_t count, DataType dtype, const ReduceOp* rop, int root) {
    algo::OpContext c;
    c.transport = impl_.transport.get();
    c.scratch = &impl_.scratch;
    c.rank = impl_.rank;
    c.size = impl_.size;
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
      fail(e);
      throw;
    } catch (const std::bad_alloc&) {
      Error e(ErrorCode::Internal, fmt::format("{}: out of memory", op_));
      fail(e);
      throw e;
    } catch (const std::exception& e) {
      Error err(ErrorCode::Internal, fmt::format("{}: {}", op_, e.what()));
      fail(err);
      throw err;
    }
  }

 private:
  void fail(const Error& e) {
    impl_.failure.emplace(e);
    impl_.failed.store(true, std::memory_order_release);
    base::log_warn("{} failed: {} [{}]", op_, e.message(), to_string(e.code()));
    impl_.transport->fail(e);
  }

  Communicator::Impl& impl_;
  const char* op_;
  std::unique_lock<std::mutex> lock_;
  base::LogTag log_tag_;
};

void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

}  // namespace

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

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) {
  constexpr const char* kOp = "all_reduce";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  core::check_reduce_op(kOp, op);
  size_t bytes = core::checked_bytes(kOp, count, type);
  core::check_pointer(kOp, "send", send, bytes);
  core::check_pointer(kOp, "recv", recv, bytes);
  core::check_overlap(kOp, send, bytes, recv, bytes, recv, "requires send == recv");
  auto c = scope.context(OpKind::AllReduce, AlgoId::Ring, count, type, &op, -1);
  scope.run([&] {
    if (impl_->size == 1) {
      copy_if_distinct(recv, send, bytes);
      return;
    }
    algo::all_reduce_ring(c, send, recv, count);
  });
}

void Communicator::broadcast(const void* send, void* recv, size_t count, DataType type, int root) {
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
  auto c = scope.context(OpKind::Broadcast, AlgoId::Binomial, count, type, nullptr, root);
  scope.run([&] {
    if (impl_->size == 1) {
      copy_if_distinct(recv, send, bytes);
      return;
    }
    algo::broadcast_binomial(c, send, recv, count, root);
  });
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root) {
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
  auto c = scope.context(OpKind::Reduce, AlgoId::Binomial, count, type, &op, root);
  scope.run([&] {
    if (impl_->size == 1) {
      copy_if_distinct(recv, send, bytes);
      return;
    }
    algo::reduce_binomial(c, send, recv, count, root);
  });
}

void Communicator::all_gather(const void* send, void* recv, size_t send_count, DataType type) {
  constexpr const char* kOp = "all_gather";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  size_t bytes = core::checked_bytes(kOp, send_count, type);
  size_t total = core::checked_bytes(kOp, send_count, type, static_cast<size_t>(impl_->size));
  core::check_pointer(kOp, "send", send, bytes);
  core::check_pointer(kOp, "recv", recv, total);
  const void* in_place = recv ? static_cast<const char*>(recv) + static_cast<size_t>(impl_->rank) * bytes : nullptr;
  core::check_overlap(kOp, send, bytes, recv, total, in_place, "requires send == recv + rank * send_count");
  auto c = scope.context(OpKind::AllGather, AlgoId::Ring, send_count, type, nullptr, -1);
  scope.run([&] {
    if (impl_->size == 1) {
      copy_if_distinct(recv, send, bytes);
      return;
    }
    algo::all_gather_ring(c, send, recv, send_count);
  });
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) {
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
  auto c = scope.context(OpKind::ReduceScatter, AlgoId::Ring, recv_count, type, &op, -1);
  scope.run([&] {
    if (impl_->size == 1) {
      copy_if_distinct(recv, send, bytes);
      return;
    }
    algo::reduce_scatter_ring(c, send, recv, recv_count);
  });
}

void Communicator::all_to_all(const void* send, void* recv, size_t count_per_peer, DataType type) {
  constexpr const char* kOp = "all_to_all";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  size_t total = core::checked_bytes(kOp, count_per_peer, type, static_cast<size_t>(impl_->size));
  core::check_pointer(kOp, "send", send, total);
  core::check_pointer(kOp, "recv", recv, total);
  core::check_overlap(kOp, send, total, recv, total, recv, "requires send == recv");
  auto c = scope.context(OpKind::AllToAll, AlgoId::Pairwise, count_per_peer, type, nullptr, -1);
  scope.run([&] {
    if (impl_->size == 1) {
      copy_if_distinct(recv, send, total);
      return;
    }
    algo::all_to_all_pairwise(c, send, recv, count_per_peer);
  });
}

void Communicator::gather(const void* send, void* recv, size_t send_count, DataType type, int root) {
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
  auto c = scope.context(OpKind::Gather, AlgoId::Linear, send_count, type, nullptr, root);
  scope.run([&] {
    if (impl_->size == 1) {
      copy_if_distinct(recv, send, bytes);
      return;
    }
    algo::gather_linear(c, send, recv, send_count, root);
  });
}

void Communicator::scatter(const void* send, void* recv, size_t recv_count, DataType type, int root) {
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
  auto c = scope.context(OpKind::Scatter, AlgoId::Linear, recv_count, type, nullptr, root);
  scope.run([&] {
    if (impl_->size == 1) {
      copy_if_distinct(recv, send, bytes);
      return;
    }
    algo::scatter_linear(c, send, recv, recv_count, root);
  });
}

void Communicator::barrier() {
  OpScope scope(*impl_, "barrier");
  auto c = scope.context(OpKind::Barrier, AlgoId::Dissemination, 0, DataType::UInt8, nullptr, -1);
  scope.run([&] {
    if (impl_->size > 1) algo::barrier_dissemination(c);
  });
}

void Communicator::send(const void* buf, size_t count, DataType type, int peer) {
  constexpr const char* kOp = "send";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  core::check_rank_arg(kOp, "peer", peer, impl_->size);
  if (peer == impl_->rank) {
    base::throw_error(ErrorCode::InvalidArgument, "send: peer is this rank; copy the data locally instead");
  }
  size_t bytes = core::checked_bytes(kOp, count, type);
  core::check_pointer(kOp, "buf", buf, bytes);
  MessageTag tag;
  tag.op = OpKind::SendRecv;
  tag.dtype = type;
  tag.algo = AlgoId::Direct;
  tag.count = count;
  tag.seq = impl_->p2p_send_seq[peer];
  auto deadline = base::Deadline::after(impl_->config.timeout);
  scope.run([&] {
    impl_->transport->isend(peer, tag, buf, bytes, deadline);
    impl_->transport->flush(deadline);
    ++impl_->p2p_send_seq[peer];
  });
}

void Communicator::recv(void* buf, size_t count, DataType type, int peer) {
  constexpr const char* kOp = "recv";
  OpScope scope(*impl_, kOp);
  core::check_dtype(kOp, type);
  core::check_rank_arg(kOp, "peer", peer, impl_->size);
  if (peer == impl_->rank) {
    base::throw_error(ErrorCode::InvalidArgument, "recv: peer is this rank; copy the data locally instead");
  }
  size_t bytes = core::checked_bytes(kOp, count, type);
  core::check_pointer(kOp, "buf", buf, bytes);
  MessageTag tag;
  tag.op = OpKind::SendRecv;
  tag.dtype = type;
  tag.algo = AlgoId::Direct;
  tag.count = count;
  tag.seq = impl_->p2p_recv_seq[peer];
  auto deadline = base::Deadline::after(impl_->config.timeout);
  scope.run([&] {
    impl_->transport->recv(peer, tag, buf, bytes, deadline);
    ++impl_->p2p_recv_seq[peer];
  });
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
