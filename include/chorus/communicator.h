// The communicator: a group of N ranks that run collectives together.
//
// Semantics follow NCCL: counts are per rank, and an operation is in place when send == recv (for
// all_gather: send == recv + rank * send_count elements; for reduce_scatter: recv == send + rank *
// recv_count elements).
//
// Rules every caller must know:
// - Every rank calls the same collectives in the same order with matching arguments (count, dtype, op,
//   root). If they do not, the ranks involved throw Error(Mismatch) naming both operations; they never
//   silently combine different operations. Point-to-point send/recv pairs must be issued in a consistent
//   order between the two ranks involved, relative to each other and to collectives.
// - Buffers belong to the caller. Chorus reads and writes them only during the call; when a call returns,
//   nothing refers to them any more. The `_async` forms and calls inside a group are the exception: their
//   buffers belong to Chorus until the Work completes or group_end() returns (see chorus/work.h).
// - Operations run in issue order, synchronous and asynchronous alike: a synchronous call made while
//   asynchronous ones are queued waits for them first, then runs on the calling thread.
// - Every call returns or throws within CommOptions::timeout.
// - A communicator is used by one thread at a time. A concurrent call from a second thread throws
//   Error(InvalidArgument) instead of interleaving. Distinct communicators are independent. (Work handles
//   may be waited on from any thread.)
// - Invalid arguments throw Error(InvalidArgument) before anything is sent; the communicator stays usable.
// - Any other error (PeerLost, Mismatch, Timeout) leaves the communicator failed: the error is sent to the
//   peers so that they fail fast too, and every later call throws Error(Aborted) with the original cause.
//   Create a new communicator to continue.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ranges>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/error.h"
#include "chorus/export.h"
#include "chorus/store.h"
#include "chorus/types.h"
#include "chorus/work.h"

namespace chorus {

enum class TransportKind : uint8_t {
  Auto,    // in-process when every rank is a thread of this process; otherwise shared memory between ranks
           // on one host and tcp between hosts
  InProc,  // ranks are threads of one process
  Tcp,     // TCP sockets everywhere (loopback inside a host)
  Shm,     // POSIX shared memory; every rank must be on this host
};

struct CommOptions {
  // Bound on every blocking call. The CHORUS_TIMEOUT_MS environment variable overrides the default of
  // 5 minutes; a value set here explicitly wins over the environment.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // CHORUS_TRANSPORT (auto | inproc | tcp | shm) applies when this is Auto.
  TransportKind transport = TransportKind::Auto;
  // Network interface to listen on (tcp). Empty: CHORUS_SOCKET_IFNAME, else the interface that routes to
  // the store, else loopback when every rank is on this host.
  std::string socket_ifname;
  // Pipelining granularity of large collectives, in bytes. 0: CHORUS_SLICE_BYTES, else 512 KiB.
  size_t slice_bytes = 0;
  // A label for logs and error messages (default "world", or "<parent>.split").
  std::string name;
  // Fault injection, to rehearse failures: "action:key=value,...;..." (e.g. "corrupt:rank=1,peer=0,frame=3",
  // "kill:rank=2,frame=137"); see docs/reliability.md. Empty: CHORUS_FAULT; a value set here wins over it.
  // A malformed spec makes create throw Error(InvalidArgument). Arms this communicator only: its children
  // (split, shrink, replace_lost) are not armed again. "none" disarms. Never set it in production.
  std::string fault;
};

inline constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);

// Choices for one call.
struct CallOptions {
  // Run this algorithm (one of algorithm_names(collective)) instead of CHORUS_ALGO's or the cost model's
  // choice. Every rank must pass the same name. A name the collective does not have throws
  // Error(InvalidArgument) before anything is sent.
  std::string_view algorithm;
  // The call's buffers are registered memory (chorus::mem_alloc, include/chorus/memory.h) on every rank. The
  // shared-memory transport then reads large payloads in place, which changes which algorithm is fastest; with
  // this set, the automatic choice uses the tables measured that way where the tuning has them (from 64 KiB in
  // the built-in tuning; below that registration changes nothing). For all_reduce, all_gather, reduce_scatter
  // and all_to_all, in-place calls have tables of their own (a rank cannot overwrite what a peer still reads in
  // place, which orders the algorithms differently again): with the flag, every rank must also call alike, in
  // place or out of place. Every rank must pass the same value, as for `algorithm`: ranks that disagree may
  // choose different algorithms, which fails the call with Error(Mismatch) on every rank. A wrong value costs
  // speed only: any buffer works under either tables. Registration is each rank's own business, so the
  // library cannot find this out without a message per call; the caller (the Reducer, for its registered
  // buckets) knows it.
  bool registered = false;
};

// The algorithms a collective offers, in the registry's order. `collective` is "allreduce", "allgather",
// "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter" or "barrier" (underscores are
// ignored). Throws Error(InvalidArgument) for another name.
CHORUS_API std::vector<std::string> algorithm_names(std::string_view collective);

// Payload bytes (frame headers excluded) a communicator has moved since it was created.
struct TrafficCounters {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  std::vector<uint64_t> sent_to;        // indexed by peer rank
  std::vector<uint64_t> received_from;  // indexed by peer rank
  std::vector<std::string> via;         // indexed by peer rank: "shm", "tcp", "inproc" ("self" for this rank)
  uint64_t operations = 0;
  // Shared memory only: waits that went to sleep after polling (CHORUS_SHM_SPIN polls), and sleeps that ran
  // their whole 100 ms slice although their data had come. A missed wake-up is a bug: it should stay 0.
  uint64_t sleeps = 0;
  uint64_t missed_wakeups = 0;
  // Shared memory only: payloads received by one copy through cross-memory attach, and those read in place
  // from the sender's registered memory (chorus::mem_alloc, include/chorus/memory.h): large ones, and an
  // exchange's mid-sized ones (CHORUS_SHM_SINGLE_COPY_BUSY_BYTES).
  uint64_t attach_reads = 0;
  uint64_t registered_reads = 0;
  // Shared memory only: times this rank's small frames went back to the start of a peer's ring once the peer
  // had emptied it, rather than on to the ring's end (so small messages keep reusing the same few pages).
  uint64_t ring_rewinds = 0;
  // Shared memory only: large payloads received through the rings (two copies, one on each side), and times
  // this rank changed its choice between the rings and cross-memory attach for a sender's large payloads
  // (CHORUS_SHM_ADAPT; CHORUS_DEBUG=INFO logs each change with the timings behind it).
  uint64_t ring_large_frames = 0;
  uint64_t path_switches = 0;
  // Shared memory only: of the large payloads above, those whose sender had nothing else to do until the send
  // completed (an in-place broadcast's root, a reduce leaf); the receiver chooses their way apart from the rest,
  // since through the rings such a sender copies in while the receiver copies out (CHORUS_SHM_ADAPT).
  uint64_t idle_sender_frames = 0;
  // Shared memory only: frames of exchanges (both ranks sending to each other at once: all_gather, all_to_all,
  // reduce_scatter, ...) that this rank sent to a higher-ranked peer the way it chose for that peer's frames, so
  // that both directions go one way, as the lower rank of each pair chooses (CHORUS_SHM_ADAPT; docs/design.md,
  // "An exchange goes one way"). The highest local rank sends none.
  uint64_t paired_frames = 0;
};

// What the most recent operation on a communicator did.
struct OperationInfo {
  std::string collective;  // "allreduce", ..., or "send" / "recv"
  std::string algorithm;   // "ring", "tree", ... ("direct" for send/recv)
  bool forced = false;     // chosen by CallOptions or CHORUS_ALGO rather than by the cost model
  // The cost model used the tables measured with registered buffers (CallOptions::registered, and the tuning
  // has such tables for this collective, transport and world size).
  bool registered_tables = false;
  size_t count = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t predicted_sent = 0;      // the algorithm's traffic formula for this rank
  uint64_t predicted_received = 0;
  double estimated_seconds = 0;     // the cost model's estimate for this call
  // CHORUS_ADAPT: the model found near-ties for this call's shape and the algorithm was chosen among them by
  // timing them on the job's own calls. `exploring`: this call ran one of them to time it; otherwise it ran
  // the one the ranks agreed was fastest.
  bool adaptive = false;
  bool exploring = false;
};

namespace detail {
template <class R>
concept Buffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                 requires { dtype_of<std::remove_cv_t<std::ranges::range_value_t<R>>>::value; };
template <class R>
constexpr DataType dtype_of_range() {
  return dtype_of<std::remove_cv_t<std::ranges::range_value_t<R>>>::value;
}
}  // namespace detail

class CHORUS_API Communicator {
 public:
  // Color for split() meaning "not a member of any new communicator".
  static constexpr int kNoColor = -1;

  // Builds the world communicator from the launcher's environment:
  //   rank / size: CHORUS_RANK + CHORUS_WORLD_SIZE, else torchrun's RANK + WORLD_SIZE, else Open MPI's
  //   OMPI_COMM_WORLD_RANK/SIZE, else MPICH/Hydra's PMI_RANK/PMI_SIZE, else Slurm's SLURM_PROCID/NTASKS.
  //   store: CHORUS_STORE_ADDR ("host:port", "[v6addr]:port"), else MASTER_ADDR + MASTER_PORT. Rank 0
  //   hosts a TCP store there unless CHORUS_STORE_HOSTED=1 says a launcher (chorus-run) already does.
  //   Under torchrun with its agent store (TORCHELASTIC_USE_AGENT_STORE=True) MASTER_PORT belongs to
  //   torch, so Chorus uses MASTER_PORT + 1. A world of size 1 needs no store.
  // Throws Error(InvalidArgument) listing what it found when the environment is incomplete.
  static std::unique_ptr<Communicator> from_env(const CommOptions& options = {});

  // Builds a communicator of world_size ranks that rendezvous through `store`. Every rank calls this with
  // the same world_size and a distinct rank; it returns when all ranks are connected, or throws
  // Error(Timeout) after options.timeout. Ranks that share a store must create their communicators in
  // the same order.
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int world_size,
                                              const CommOptions& options = {});

  // Closes connections. Peers that later need data from this rank get Error(PeerLost) saying that this
  // rank closed its communicator. Does not wait for peers.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept;
  int size() const noexcept;

  // recv[i] = op over ranks of send[i], on every rank.
  void all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op);
  // Copies root's send into every rank's recv. send is read on root only (may be null elsewhere).
  void broadcast(const void* send, void* recv, size_t count, DataType type, int root);
  // recv[i] = op over ranks of send[i], on root only. recv is written on root only (may be null elsewhere).
  void reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root);
  // recv holds size() * send_count elements: rank r's send lands at recv + r * send_count.
  void all_gather(const void* send, void* recv, size_t send_count, DataType type);
  // send holds size() * recv_count elements; rank r receives block r of the reduction.
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op);
  // send and recv hold size() * count_per_peer elements: block j of send goes to rank j, block j of recv
  // comes from rank j. In place when send == recv.
  void all_to_all(const void* send, void* recv, size_t count_per_peer, DataType type);
  // On root, recv holds size() * send_count elements (block r from rank r); recv is ignored elsewhere.
  // In place on root when send == recv + root * send_count.
  void gather(const void* send, void* recv, size_t send_count, DataType type, int root);
  // On root, send holds size() * recv_count elements (block r goes to rank r); send is ignored elsewhere.
  // In place on root when recv == send + root * recv_count.
  void scatter(const void* send, void* recv, size_t recv_count, DataType type, int root);
  // Returns once every rank has entered the barrier.
  void barrier();
  // Point-to-point. count and type must match the peer's recv exactly. send() returns when the data is
  // handed to the transport; a large send may wait until the peer posts its recv, so two ranks that both
  // send a large message to each other before receiving can deadlock (until the timeout), as in MPI.
  // peer must differ from rank().
  void send(const void* buf, size_t count, DataType type, int peer);
  void recv(void* buf, size_t count, DataType type, int peer);

  // Splits this communicator, as MPI_Comm_split / ncclCommSplit: every rank calls it (collectively);
  // ranks with the same color form a new communicator, ordered by (key, rank in this communicator).
  // Returns nullptr for color kNoColor. The child inherits this communicator's options and store.
  std::unique_ptr<Communicator> split(int color, int key);

  // ---- Failure and recovery (see docs/reliability.md)

  // Aborts this communicator. Callable from any thread, also while another thread is inside a call on it:
  // that call, every queued asynchronous operation and every later call throw Error(Aborted) naming
  // `reason`, within a fraction of a second. Every peer that can still be reached is told (an Abort frame on
  // tcp, the failed flag on shared memory) and throws Error(Aborted) naming this rank and `reason` from its
  // current or next call. Idempotent; never throws. The communicator can then only be destroyed, or used
  // to shrink() or replace_lost().
  void abort(const std::string& reason = "aborted by the application") noexcept;

  // Builds a new communicator of the ranks of this one that are still alive, in the spirit of MPI ULFM's
  // MPI_Comm_shrink and ncclCommShrink. Collective over the survivors: every surviving rank calls it
  // (typically after a call threw PeerLost or Aborted; it works on a failed communicator). The survivors
  // agree through the store on who is alive: a rank is dead when a survivor saw it fail (its error named
  // it), when a rank passed it in `exclude`, or when it has not called shrink within the grace period
  // (CHORUS_SHRINK_GRACE_MS, default 10 s, at most the timeout). Every survivor gets the same membership;
  // ranks keep their relative order (new rank = index among the survivors). The child inherits this
  // communicator's options and store; its name is "<name>.shrink".
  // The store must outlive the dead rank: when rank 0 hosts it (from_env without chorus-run) and rank 0
  // dies, recovery is impossible and shrink throws Error(Timeout) or Error(PeerLost) naming the store.
  // Throws Error(Aborted) on a rank the others excluded (it called too late). This communicator stays
  // as it was (failed or not); destroy it when the child exists.
  std::unique_ptr<Communicator> shrink(const std::vector<int>& exclude = {});

  // Replaces the lost ranks with new processes and returns a communicator of this communicator's size, in
  // which every survivor keeps its rank and each new process takes one of the lost ranks (lowest first).
  // Survivors call this (it agrees on the lost ranks exactly as shrink() does); each replacement process
  // calls join_replacement() with the same store. Returns when every lost rank has been taken, or throws
  // Error(Timeout) after the timeout. With no rank lost it returns a fresh communicator of the same ranks.
  std::unique_ptr<Communicator> replace_lost(const std::vector<int>& exclude = {});
  // Called by a new process to take the place of a lost rank (see replace_lost()). Claims the next lost
  // rank published on `store` by the survivors (waiting up to options.timeout for one), and returns the
  // communicator it joined; rank() tells which rank it now is.
  static std::unique_ptr<Communicator> join_replacement(std::shared_ptr<Store> store,
                                                        const CommOptions& options = {});

  // The same collectives with per-call choices (see CallOptions).
  void all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, const CallOptions& opts);
  void broadcast(const void* send, void* recv, size_t count, DataType type, int root, const CallOptions& opts);
  void reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
              const CallOptions& opts);
  void all_gather(const void* send, void* recv, size_t send_count, DataType type, const CallOptions& opts);
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                      const CallOptions& opts);
  void all_to_all(const void* send, void* recv, size_t count_per_peer, DataType type, const CallOptions& opts);
  void gather(const void* send, void* recv, size_t send_count, DataType type, int root, const CallOptions& opts);
  void scatter(const void* send, void* recv, size_t recv_count, DataType type, int root, const CallOptions& opts);
  void barrier(const CallOptions& opts);

  // ---- asynchronous forms (see chorus/work.h) ----
  // Each checks its arguments now (throwing InvalidArgument, with nothing queued), then queues the
  // operation on this communicator's progress thread and returns. The buffers belong to Chorus until the
  // Work completes. Every rank must issue the same collectives in the same order, synchronous or not.
  Work all_reduce_async(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                        const CallOptions& opts = {});
  Work broadcast_async(const void* send, void* recv, size_t count, DataType type, int root,
                       const CallOptions& opts = {});
  Work reduce_async(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                    const CallOptions& opts = {});
  Work all_gather_async(const void* send, void* recv, size_t send_count, DataType type, const CallOptions& opts = {});
  Work reduce_scatter_async(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                            const CallOptions& opts = {});
  Work all_to_all_async(const void* send, void* recv, size_t count_per_peer, DataType type,
                        const CallOptions& opts = {});
  Work gather_async(const void* send, void* recv, size_t send_count, DataType type, int root,
                    const CallOptions& opts = {});
  Work scatter_async(const void* send, void* recv, size_t recv_count, DataType type, int root,
                     const CallOptions& opts = {});
  Work barrier_async(const CallOptions& opts = {});
  Work send_async(const void* buf, size_t count, DataType type, int peer);
  Work recv_async(void* buf, size_t count, DataType type, int peer);

  // ---- groups (NCCL semantics) ----
  // Between group_start() and the matching group_end(), calls (synchronous or `_async`) are checked and
  // recorded, not run: they return at once, and their buffers belong to Chorus until group_end() returns.
  // Groups nest; the outermost group_end() runs everything recorded as one submission, on the calling thread
  // as a synchronous call does (group_end_async(): on the progress thread):
  //   - consecutive all_reduces with the same dtype and op are fused into one transfer where the cost model
  //     expects that to pay: calls small enough to be latency-bound, whose latencies saved outweigh copying
  //     their buffers into the communicator's staging buffer and back (tens of KiB per call at most; larger
  //     calls run one by one, as separate calls would);
  //   - consecutive send/recv calls progress together, so any set of matching pairs completes without
  //     deadlock, whatever the message sizes and the order of the calls;
  //   - other collectives run in the recorded order.
  // Every rank must record the same collectives in a group. group_end() throws InvalidArgument without a
  // matching group_start(). Works returned by `_async` calls inside a group complete with the group.
  void group_start();
  void group_end();
  // group_end() without waiting: returns the group's Work.
  Work group_end_async();
  // Blocks until every queued asynchronous operation has completed (rethrowing nothing: errors belong to the
  // Works). Bounded like the operations themselves.
  void synchronize();

  // The algorithm this communicator would run for the call, without forcing: the cost model's choice under
  // its tuning (CHORUS_TUNING_FILE or built-in figures). Every rank computes the same answer. With
  // CHORUS_ADAPT=1 a shape with near-ties may run another of them once timed: last_operation() says which ran.
  std::string automatic_algorithm(std::string_view collective, size_t count, DataType type) const;
  // The same for a call made with `opts` (its `registered` flag; `algorithm` is ignored: this is the choice
  // made when nothing is forced), out of place or, with `in_place`, in place (send == recv). In place matters
  // only under `registered`: all_reduce, all_gather, reduce_scatter and all_to_all then have tables of their
  // own; for the rooted collectives and for heap buffers the answer is the out-of-place one.
  std::string automatic_algorithm(std::string_view collective, size_t count, DataType type, const CallOptions& opts,
                                  bool in_place = false) const;
  // Traffic since creation, and the figures of the last operation. Read them between calls (the same
  // one-thread-at-a-time rule as for operations); they first wait for queued asynchronous operations.
  TrafficCounters traffic() const;
  OperationInfo last_operation() const;

  // Effective options (environment applied).
  const CommOptions& options() const noexcept;
  // "inproc", "tcp", "shm", or "shm+tcp" (shared memory inside a host, tcp across hosts).
  std::string_view transport_name() const noexcept;
  // One line on how the transport was set up, the tunables in force (tcp: congestion control, polls before a
  // receive sleeps, read-ahead), for benchmark headers and logs; "" for transports with nothing to say here
  // (shared memory has its own accessors below).
  std::string transport_settings() const;
  // How many ranks of this communicator run on this rank's host, this one included.
  int local_size() const noexcept;
  // Ranks per CPU on the communicator's most crowded host: its ranks over the CPUs they may run on together
  // (the union of their affinity masks, capped by a cgroup CPU quota). Above 1 the ranks take turns on the
  // cores. The same on every rank.
  double ranks_per_core() const noexcept;
  // The copy rate (GB/s of one core's memcpy) by which the cost model's tuning entry was chosen, where the
  // tuning holds tables from more than one kind of host: rank 0's, measured at creation or CHORUS_COPY_GBPS.
  // 0 where the tuning has one kind. The same on every rank.
  double copy_rate_gbps() const noexcept;
  // Where the cost model's figures came from: the tuning file or "built-in tuning", and which entry.
  std::string tuning_source() const;
  // Shared memory inside this host: whether payloads from CHORUS_SHM_SINGLE_COPY_BYTES up go by cross-memory
  // attach (process_vm_readv: one copy, by the receiver) rather than through the shared rings (a copy on each
  // side). CHORUS_SHM_CMA=1 or 0 decides; by default (auto) the host's lowest rank times a 64 KiB attach read
  // against a 64 KiB memcpy at creation, and attach is used where it costs less than 3 copies. False where
  // no peer shares this host, or the kernel forbids attach. The same on every rank of a host.
  bool cross_memory_attach() const noexcept;
  // That probe's figure, in copies; 0 where none was made (CHORUS_SHM_CMA set, no local peer, attach refused).
  double attach_cost() const noexcept;
  // Whether, after that first choice, each receiver on this host chooses between the rings and cross-memory
  // attach for each sender from what its large payloads take each way (CHORUS_SHM_ADAPT, on by default with
  // CHORUS_SHM_CMA=auto, where attach works and the host's ranks do not outnumber its cores). The choices
  // made since show in traffic(): path_switches, ring_large_frames, attach_reads.
  bool adapts_single_copy() const noexcept;
  // True once an error other than InvalidArgument has broken this communicator.
  bool failed() const noexcept;

  // ---- typed conveniences (any contiguous range of a supported element type) ----
  template <detail::Buffer S, detail::Buffer R>
  void all_reduce(const S& send, R&& recv, ReduceOp op) {
    check_sizes(std::ranges::size(send), std::ranges::size(recv), 1, "all_reduce");
    all_reduce(std::ranges::data(send), std::ranges::data(recv), std::ranges::size(send),
               detail::dtype_of_range<R>(), op);
  }
  template <detail::Buffer R>
  void all_reduce(R&& data, ReduceOp op) {
    all_reduce(std::ranges::data(data), std::ranges::data(data), std::ranges::size(data),
               detail::dtype_of_range<R>(), op);
  }
  template <detail::Buffer R>
  void broadcast(R&& data, int root) {
    broadcast(std::ranges::data(data), std::ranges::data(data), std::ranges::size(data),
              detail::dtype_of_range<R>(), root);
  }
  template <detail::Buffer R>
  void reduce(R&& data, ReduceOp op, int root) {
    reduce(std::ranges::data(data), std::ranges::data(data), std::ranges::size(data),
           detail::dtype_of_range<R>(), op, root);
  }
  template <detail::Buffer S, detail::Buffer R>
  void all_gather(const S& send, R&& recv) {
    check_sizes(std::ranges::size(send), std::ranges::size(recv), size(), "all_gather");
    all_gather(std::ranges::data(send), std::ranges::data(recv), std::ranges::size(send),
               detail::dtype_of_range<R>());
  }
  template <detail::Buffer S, detail::Buffer R>
  void reduce_scatter(const S& send, R&& recv, ReduceOp op) {
    check_sizes(std::ranges::size(recv), std::ranges::size(send), size(), "reduce_scatter");
    reduce_scatter(std::ranges::data(send), std::ranges::data(recv), std::ranges::size(recv),
                   detail::dtype_of_range<R>(), op);
  }
  template <detail::Buffer S, detail::Buffer R>
  void all_to_all(const S& send, R&& recv) {
    check_sizes(std::ranges::size(send), std::ranges::size(recv), 1, "all_to_all");
    check_sizes(std::ranges::size(send) / size(), std::ranges::size(send), size(), "all_to_all");
    all_to_all(std::ranges::data(send), std::ranges::data(recv), std::ranges::size(send) / size(),
               detail::dtype_of_range<R>());
  }
  template <detail::Buffer S>
  void send(const S& data, int peer) {
    send(std::ranges::data(data), std::ranges::size(data), detail::dtype_of_range<S>(), peer);
  }
  template <detail::Buffer R>
  void recv(R&& data, int peer) {
    recv(std::ranges::data(data), std::ranges::size(data), detail::dtype_of_range<R>(), peer);
  }

  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  // Throws InvalidArgument unless small * factor == big.
  static void check_sizes(size_t small, size_t big, size_t factor, const char* what);

  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
