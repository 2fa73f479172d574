// The transport interface: how an algorithm moves bytes between ranks.
//
// A transport connects every pair of ranks with an ordered stream of frames. Frames between one pair of
// ranks arrive in the order they were sent, so a receiver matches frames to its receives by order and only
// checks that the frame's fingerprint is the expected one.
//
// Threading: a Transport is driven by one thread at a time (the thread running the current operation).
// Only abort() may be called from another thread.
//
// Buffers: isend() does not copy (except small in-process messages); the data must stay valid and unchanged
// until the send completes (wait_send/flush). recv() writes only into [dst, dst + len).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "base/time.h"
#include "chorus/error.h"
#include "kernels/reduce.h"
#include "transport/frame.h"

namespace chorus::transport {

struct SendHandle {
  int peer = -1;
  uint64_t index = 0;
};

// How recv_reduce combines an incoming frame with local data.
struct Reduction {
  kernels::ReduceFn fn = nullptr;         // dst = incoming (op) local
  kernels::SumDivFn sum_div = nullptr;    // when set: dst = (incoming + local) / divisor
  uint64_t divisor = 1;
  size_t elem_size = 1;

  void apply(void* dst, const void* incoming, const void* local, size_t bytes) const {
    size_t n = bytes / elem_size;
    if (sum_div) {
      sum_div(dst, incoming, local, n, divisor);
    } else {
      fn(dst, incoming, local, n);
    }
  }
};

// What the sending rank does while a send is in flight. A transport that can move a large payload more than
// one way uses it to share the copying between the two ranks' cores: shared memory streams an idle
// sender's payload through the ring (one copy on each side, pipelined) instead of leaving the receiver to copy
// all of it by cross-memory attach, where that pays. busy() is always correct; idle() is a hint.
struct SenderWork {
  // 0: the sender copies, reduces or feeds other receivers meanwhile (an exchange, a tree's inner rank).
  // Otherwise the sender only waits for its sends to this peer (an in-place broadcast's root with one
  // receiver, a leaf, a lone send), which carry this many bytes in all in this operation.
  uint64_t idle_bytes = 0;
  // The receiver combines the payload with data of its own (a reduce's parent). By cross-memory attach it
  // would copy the payload aside and then reduce it; from the ring it reduces in one pass.
  bool receiver_reduces = false;
  // An exchange: the receiver sends to this sender (or, in a ring, to its own next rank) at the same time,
  // so both cores copy anyway, and the sender leaves the payload's buffer as it is until the operation ends
  // (the caller's input of an out-of-place call, a final block of the output). Mid-sized payloads may then go
  // by cross-memory attach (ShmOptions::single_copy_busy_bytes): one read by the receiver, a system call and
  // one copy, costs less than the ring's copy in and copy out, and nothing waits for the read to end.
  bool exchange = false;
  // An edge of a tree or a chain (a broadcast's sends, a reduce leaf's): the receiver waits for this payload
  // and sends nothing back to this sender in the operation, and the sender then goes on to other edges or
  // returns. Where the ranks outnumber the cores, such payloads go through the shared-memory ring up to a
  // larger size (ShmOptions::single_copy_shared_core_bytes), so that the sender need not wait for its
  // receiver to be scheduled.
  bool one_way = false;
  constexpr SenderWork along_tree() const {
    SenderWork w = *this;
    w.one_way = true;
    return w;
  }
  static constexpr SenderWork busy() { return {}; }
  static constexpr SenderWork exchanged() { return {0, false, true}; }
  static constexpr SenderWork idle(uint64_t operation_bytes) { return {operation_bytes, false}; }
  static constexpr SenderWork idle_to_reducer(uint64_t operation_bytes) { return {operation_bytes, true}; }
};

// True when `ranks` processes on this host outnumber its cores: then a waiting rank should yield its core
// (most likely to the rank it waits for) rather than spin on it.
bool more_ranks_than_cores(int ranks) noexcept;

// True when more tasks are runnable on this host at this moment than it has CPUs online (the running count of
// /proc/loadavg, which counts the caller): other work then waits for a core, and a thread that polls keeps one
// from it. False where the count cannot be read. About a microsecond: for waits about to sleep, not hot paths.
bool cores_contended() noexcept;

// Marks the calling thread as one that runs operations in the background (core's progress engine) while the
// caller's own thread goes on computing. A wait there keeps its polling short: a long poll would take the core
// from that computation (the tcp transport's timed poll of small receives, tcp_transport.h, is off there).
void set_background_thread(bool yes) noexcept;
bool on_background_thread() noexcept;

// How a transport's waits and large payloads went (shared memory; the others report zeros).
struct WaitCounters {
  uint64_t sleeps = 0;          // waits that went to sleep after polling
  uint64_t missed_wakeups = 0;  // sleeps that ran their whole time slice although their data had come
  uint64_t attach_reads = 0;    // frames received by one copy through cross-memory attach
  uint64_t mapped_reads = 0;    // frames received by reading the sender's registered memory in place
  uint64_t ring_rewinds = 0;    // times this rank's sends went back to the start of a peer's ring early
  uint64_t ring_large_frames = 0;  // frames of at least the single-copy size received through the ring
  uint64_t path_switches = 0;      // changes of this receiver's choice between ring and attach (adapt)
  uint64_t idle_sender_frames = 0;  // large frames received (either way) from idle senders: their own lane (adapt)
  uint64_t paired_frames = 0;       // an exchange's frames sent the way the peer's own frames came (adapt: paired_way)
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string_view name() const noexcept = 0;
  // The transport that carries frames to `peer` (differs from name() only in a hybrid).
  virtual std::string_view transport_for(int peer) const noexcept { return name(); }
  virtual WaitCounters wait_counters() const noexcept { return {}; }
  // One line on how this transport was set up (its tunables in force), for benchmark headers and logs; "" where
  // there is nothing to say.
  virtual std::string settings() const { return {}; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  // Queues `len` bytes at `data` for `peer`. Returns at once; the send completes later. `work` says whether
  // this rank has other work while the send is in flight (a hint; it never changes what arrives).
  virtual SendHandle isend(int peer, const MessageTag& tag, const void* data, size_t len,
                           const base::Deadline& deadline, SenderWork work) = 0;
  // Receives the next frame from `peer` into dst. Throws Mismatch if it does not carry `tag` and `len`
  // bytes, PeerLost if the peer is gone, Timeout at the deadline.
  virtual void recv(int peer, const MessageTag& tag, void* dst, size_t len, const base::Deadline& deadline) = 0;
  // Receives the next frame from `peer` and stores incoming (op) local into dst (dst may equal local).
  virtual void recv_reduce(int peer, const MessageTag& tag, void* dst, const void* local, size_t len,
                           const Reduction& reduction, const base::Deadline& deadline) = 0;
  // Waits until a send and every earlier send to the same peer have completed (their buffers may be
  // reused), or until every send has.
  virtual void wait_send(SendHandle handle, const base::Deadline& deadline) = 0;
  virtual void flush(const base::Deadline& deadline) = 0;

  // Throws the error of a peer that already failed or left, without waiting (a cheap check an operation
  // makes before it sends anything, so a call on a communicator whose peer is gone fails at once rather than
  // completing from data that happened to be in flight). tcp looks at its sockets at most once per tick of
  // the coarse clock (1-4 ms; a syscall is a third of a small call): a hang-up within that window is found by
  // the call's next send or wait instead.
  virtual void check_peers() = 0;

  // After a fatal error: tells every reachable peer why (best effort, bounded in time) and stops using the
  // connections. Later calls throw.
  virtual void fail(const Error& error) noexcept = 0;
  // Makes a waiting or later call throw Error(Aborted, reason) promptly. Callable from any thread.
  virtual void abort(const std::string& reason) noexcept = 0;
  // Clean shutdown: flush what is queued (bounded), say goodbye to every peer, close. Idempotent.
  virtual void close() noexcept = 0;

  // Called from waits that have seen nothing arrive for a while (every few hundred milliseconds at most); it
  // may throw to end the wait. Core uses it to find ranks stuck in different operations. Virtual so that a
  // transport made of others (hybrid, fault wrapper) hands the hook to the ones that wait.
  virtual void set_stall_hook(std::function<void()> hook) { stall_hook_ = std::move(hook); }

  // Seams for fault injection (transport/fault/); the defaults throw Error(InvalidArgument, "... not
  // supported by <name> transport").
  // send_raw: puts `bytes` on the stream to `peer` as if they were frame bytes, after every send queued to
  // that peer so far. Blocks until they are handed to the connection (socket or ring), bounded by deadline.
  virtual void send_raw(int peer, std::span<const std::byte> bytes, const base::Deadline& deadline);
  // sever: tears the connection to `peer` down abruptly, without a goodbye or an abort record, as a network
  // failure would; the peer sees the connection lost, and later calls of this rank involving `peer` throw
  // PeerLost.
  virtual void sever(int peer);

 protected:
  Transport(int rank, int size) : rank_(rank), size_(size) {}
  void stalled() {
    if (stall_hook_) stall_hook_();
  }
  std::function<void()> stall_hook_;

  int rank_;
  int size_;
};

}  // namespace chorus::transport

namespace chorus::transport {

// Checks a received data frame header against what the receiver expects; throws the matching Error
// (Internal for a corrupted header, Mismatch for another job/communicator, another operation or another
// length). `me` and `peer` are ranks, for the message.
void check_data_frame(const FrameHeader& h, const MessageTag& expected, size_t expected_len, uint64_t comm_tag,
                      int me, int peer);
// The same checks less the integrity one, for a header whose checksum the caller has already verified (the
// receive paths: one checksum per frame instead of two).
[[noreturn]] void throw_frame_mismatch(const FrameHeader& h, const MessageTag& expected, size_t expected_len,
                                       uint64_t comm_tag, int me, int peer);
inline void check_intact_data_frame(const FrameHeader& h, const MessageTag& expected, size_t expected_len,
                                    uint64_t comm_tag, int me, int peer) {
  if (h.comm_tag != comm_tag || h.length != expected_len || !same_operation(h, expected)) {
    throw_frame_mismatch(h, expected, expected_len, comm_tag, me, peer);
  }
}

// The error to raise when `peer` has gone away while this rank needed a frame from it.
Error peer_closed_error(int me, int peer, bool said_goodbye, const std::string& detail);

}  // namespace chorus::transport
