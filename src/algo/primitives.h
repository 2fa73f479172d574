// The step primitives every algorithm is written in, and the per-operation context they run in.
//
// An algorithm sees peers and byte ranges, never sockets. It blocks only in receives; sends are
// asynchronous and complete before the operation returns (flush), or before a temporary buffer is
// reused (wait). Frames to one peer are numbered by `step`, so both sides agree on the order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/time.h"
#include "chorus/types.h"
#include "kernels/copy.h"
#include "kernels/reduce.h"
#include "transport/transport.h"

namespace chorus::algo {

// Frees Scratch's memory: registered (chorus::mem_alloc) or from the heap.
struct ScratchDeleter {
  bool registered = false;
  void operator()(char* p) const;
};

// Memory an operation may borrow, owned by the communicator and reused across calls, so the small-message
// path does not allocate. Large scratch is registered memory (chorus::mem_alloc), so that local peers read
// what an algorithm sends from it in place, as they do a user's registered buffers.
class Scratch {
 public:
  static constexpr size_t kRegisteredScratchBytes = size_t{64} << 10;
  // A 64-byte aligned buffer of at least `bytes`, valid until the next call of buffer().
  char* buffer(size_t bytes);
  // Frame numbers between this rank and each communicator rank within one operation. A counter carries the
  // sequence number of the operation it counts for and restarts when that changes, so an operation resets
  // only the counters it uses, when it uses them: nothing per call and nothing per rank it does not talk to.
  // Sequence numbers only grow (one per collective), and the stages of one operation (a hierarchical
  // algorithm's, a composite's) share its number, so their frames to one peer are numbered on from each other.
  void ensure_ranks(int size) {
    if (send_steps_.size() < static_cast<size_t>(size)) {
      send_steps_.resize(static_cast<size_t>(size));
      recv_steps_.resize(static_cast<size_t>(size));
    }
  }
  uint32_t next_send_step(int rank, uint64_t seq) { return send_steps_[static_cast<size_t>(rank)].next(seq); }
  uint32_t next_recv_step(int rank, uint64_t seq) { return recv_steps_[static_cast<size_t>(rank)].next(seq); }

 private:
  struct StepCounter {
    uint64_t seq = ~uint64_t{0};
    uint32_t n = 0;
    uint32_t next(uint64_t op_seq) {
      if (seq != op_seq) {
        seq = op_seq;
        n = 0;
      }
      return n++;
    }
  };
  std::unique_ptr<char, ScratchDeleter> buf_;
  size_t cap_ = 0;
  std::vector<StepCounter> send_steps_, recv_steps_;
};

// The link figures the cost model uses, all in seconds: alpha is the latency of one hop on the critical
// path, overhead the CPU time to send or receive one message, beta the time per byte on the wire, gamma the
// time per byte reduced (or copied).
struct LinkModel {
  double alpha = 20e-6;
  double overhead = 2e-6;
  double beta = 0.4e-9;
  double gamma = 0.3e-9;
};

// Which ranks share a host: host_of[r] is the index of rank r's host (hosts numbered in order of their
// lowest rank); `ranks_per_host` is 0 when hosts hold different numbers of ranks.
struct Topology {
  std::vector<int> host_of;
  int hosts = 1;
  int ranks_per_host = 0;
  // The ranks on host h, ascending, and rank r's index among them.
  std::vector<int> ranks_on(int h) const;
  int local_index(int r) const;
};

// Everything an algorithm needs for one call. An algorithm may run on a group of the communicator's ranks
// (a hierarchical algorithm's stages do): `rank` and `size` are then positions in the group and `members`
// maps a position to the communicator rank the transport knows.
struct OpContext {
  transport::Transport* transport = nullptr;
  Scratch* scratch = nullptr;
  int rank = 0;
  int size = 1;
  const int* members = nullptr;  // null: the group is the whole communicator
  int world_size = 1;            // the communicator's size (frames are numbered per communicator rank)
  const Topology* topology = nullptr;
  const LinkModel* inter_link = nullptr;  // between hosts, for the stage choices of hierarchical algorithms
  transport::MessageTag tag;  // the operation's fingerprint; `step` is filled per frame
  base::Deadline deadline;
  size_t slice_bytes = 512 * 1024;  // a multiple of esize
  DataType dtype = DataType::Float32;
  size_t esize = 4;
  ReduceOp op = ReduceOp::Sum;
  // Traffic accounting: payload bytes per peer, owned by the communicator (null: not counted).
  uint64_t* sent_to = nullptr;
  uint64_t* received_from = nullptr;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  transport::Reduction reduce;        // one combining step (Sum for Avg)
  transport::Reduction reduce_final;  // the last combining step of an element: divides for Avg
  kernels::DivFn divide = nullptr;    // for Avg where no combining step is left (world of 1)
  // The calling thread waits for this operation. false: it was queued (an `_async` call) and runs on the
  // progress thread while the caller may compute, so no send counts as idle (an idle send shares its copy
  // with the sender's core, which then does more work in all than the receiver would alone).
  bool caller_waits = true;
  // CHORUS_STREAM_COPY: whether large local copies stream (local_copy below); -1: where the working set is
  // past the cache, 0: never, 1: from 1 MiB.
  int stream_copy = -1;
};

class Prims {
 public:
  explicit Prims(OpContext& ctx) : c_(ctx) { ctx.scratch->ensure_ranks(std::max(ctx.world_size, ctx.size)); }

  // `peer` is a position in the context's group. `work`: idle(bytes of the operation to this peer) where this
  // rank does nothing else until its sends complete, with no other receiver to feed; exchanged() where the
  // receiver sends at the same time and the buffer stays as it is until the operation ends
  // (transport::SenderWork). An asynchronous operation's sender is never idle (its caller computes meanwhile);
  // its tree edges are still one-way.
  transport::SendHandle send(int peer, const void* data, size_t bytes,
                             transport::SenderWork work = transport::SenderWork::busy()) {
    const int to = global(peer);
    // The context's own tag carries this frame's step (no copy of the tag per frame; the step is not part of
    // what describes the operation, and every frame sets it before use).
    c_.tag.step = c_.scratch->next_send_step(to, c_.tag.seq);
    auto h = c_.transport->isend(to, c_.tag, data, bytes, c_.deadline,
                                 c_.caller_waits ? work : transport::SenderWork{0, false, work.exchange, work.one_way});
    count_sent(to, bytes);
    return h;
  }
  void recv(int peer, void* dst, size_t bytes) {
    const int from = global(peer);
    c_.tag.step = c_.scratch->next_recv_step(from, c_.tag.seq);
    c_.transport->recv(from, c_.tag, dst, bytes, c_.deadline);
    count_received(from, bytes);
  }
  // dst = incoming (op) local; `last` applies the final step of Avg (divide by the world size).
  void recv_reduce(int peer, void* dst, const void* local, size_t bytes, bool last = false) {
    const int from = global(peer);
    c_.tag.step = c_.scratch->next_recv_step(from, c_.tag.seq);
    c_.transport->recv_reduce(from, c_.tag, dst, local, bytes, last ? c_.reduce_final : c_.reduce, c_.deadline);
    count_received(from, bytes);
  }
  void recv_copy_send(int from, int to, void* dst, size_t bytes) {
    recv(from, dst, bytes);
    send(to, dst, bytes);
  }
  void recv_reduce_copy_send(int from, int to, void* dst, const void* local, size_t bytes, bool last = false) {
    recv_reduce(from, dst, local, bytes, last);
    send(to, dst, bytes);
  }
  void wait(transport::SendHandle h) { c_.transport->wait_send(h, c_.deadline); }
  int global(int peer) const { return c_.members ? c_.members[peer] : peer; }
  void flush() { c_.transport->flush(c_.deadline); }

  const OpContext& ctx() const { return c_; }

 private:
  void count_sent(int peer, size_t bytes) {
    c_.bytes_sent += bytes;
    if (c_.sent_to) c_.sent_to[peer] += bytes;
  }
  void count_received(int peer, size_t bytes) {
    c_.bytes_received += bytes;
    if (c_.received_from) c_.received_from[peer] += bytes;
  }

  OpContext& c_;
};

// Splits `count` elements into `parts` contiguous blocks whose sizes differ by at most one.
struct Partition {
  size_t count;
  int parts;
  size_t offset(int i) const {
    size_t base = count / parts, rem = count % parts;
    return static_cast<size_t>(i) * base + std::min<size_t>(static_cast<size_t>(i), rem);
  }
  size_t size(int i) const { return count / parts + (static_cast<size_t>(i) < count % parts ? 1 : 0); }
};

// A gathering algorithm's output holds a copy of this rank's input block. Whatever it sends of that block
// should come from the input, not from the copy: the copy was written a moment ago, so its lines sit dirty
// in this core's cache, and a local peer that reads them in place (the shared-memory transport's
// cross-memory attach, for large slices) must pull each one from here: 3-4 times slower than reading the
// input, measured on a 2-rank all_gather of 2 MiB (2026-12-02: 400 us against 104 per call). source() maps a slice of
// the output to the place to send it from; a slice that is not wholly inside the own block keeps the output.
struct OwnBlock {
  const char* out;   // the output buffer
  size_t off, len;   // the own block's place in it, in bytes
  const char* send;  // the input block (may be out + off, in place)
  const char* source(size_t o, size_t l) const { return o >= off && o + l <= off + len ? send + (o - off) : out + o; }
};

// Number of slices of at most slice_bytes that `bytes` is cut into (0 for 0 bytes).
inline size_t num_slices(size_t bytes, size_t slice_bytes) { return (bytes + slice_bytes - 1) / slice_bytes; }

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// A copy from this rank's input to its output (its own block of a gathering or all-to-all call, a root's
// out-of-place copy). `rank_bytes` is what the call touches on each rank (input and output); where that
// times the ranks on this host is past the last-level cache, the copy streams (kernels/copy.h).
// local_streams() decides for a copy of `bytes` made in pieces (each then copy_piece'd the same way).
inline bool local_streams(const OpContext& c, size_t bytes, size_t rank_bytes) {
  const int local = c.topology != nullptr && c.topology->ranks_per_host > 0 ? c.topology->ranks_per_host : c.size;
  return kernels::stream_copy_pays(bytes, rank_bytes * static_cast<size_t>(local), c.stream_copy);
}
inline void copy_piece(bool stream, void* dst, const void* src, size_t bytes) {
  if (stream) {
    kernels::stream_copy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}
inline void local_copy(const OpContext& c, void* dst, const void* src, size_t bytes, size_t rank_bytes) {
  copy_piece(local_streams(c, bytes, rank_bytes), dst, src, bytes);
}

}  // namespace chorus::algo
