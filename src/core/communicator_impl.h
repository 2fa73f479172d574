// The inside of a Communicator: its identity, transport, sequence numbers and failure state.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "algo/primitives.h"
#include "algo/registry.h"
#include "chorus/communicator.h"
#include "core/adapt.h"
#include "core/call.h"
#include "core/call_gate.h"
#include "core/config.h"
#include "core/progress.h"
#include "core/staging_bytes.h"
#include "transport/transport.h"

namespace chorus {

struct Communicator::Impl {
  std::shared_ptr<Store> store;
  std::shared_ptr<void> keepalive;  // e.g. the TcpStoreServer that from_env hosts on rank 0
  CommOptions options;              // effective values, environment applied
  core::Config config;
  int rank = 0;
  int size = 1;
  uint64_t comm_tag = 0;
  std::string key_prefix;  // this communicator's keys in the store: "chorus/c<n>/"
  std::vector<int> local_ranks;  // the ranks on this rank's host (itself included), ascending
  std::string label;       // "world r3/8", in logs
  std::unique_ptr<transport::Transport> transport;
  // Cost-model inputs for this transport and world size, from the tuning file or the built-in tuning.
  algo::LinkModel link;        // the slowest level: between hosts when there are several
  algo::LinkModel intra_link;  // inside a host
  std::array<std::vector<algo::Calibration>, algo::kNumCollectives> calibration;
  // The tables for calls with CallOptions::registered of at least registered_from bytes, [0] out of place and
  // [1] in place, for the collectives that have registered-buffer measurements at this world size and
  // transport (empty for the others, whose registered_from is 0: their registered calls, as smaller ones, use
  // `calibration`; uses_registered_tables).
  std::array<std::array<std::vector<algo::Calibration>, algo::kNumCollectives>, 2> calibration_registered;
  std::array<std::array<uint64_t, algo::kNumCollectives>, 2> registered_from{};
  algo::Topology topology;
  int local_size = 1;  // ranks on this host, this one included
  // The most ranks per usable CPU on any host of the communicator (base::cores_of), the same on every rank.
  double ranks_per_core = 0;
  // Rank 0's copy rate (base::copy_rate_gbps or CHORUS_COPY_GBPS), by which the tuning entry was chosen; 0: not
  // needed (the tuning has one kind of host).
  double copy_gbps = 0;
  std::string tuning_source;
  // Shared memory on this host: whether large payloads go by cross-memory attach, and the probe behind the
  // automatic choice (ShmTransport::attach_cost; 0 where none was made).
  bool cross_memory_attach = false;
  double attach_cost = 0;
  bool adapts_single_copy = false;  // ShmTransport::adapts()
  bool trace_opened = false;  // counted in the trace's open communicators (see core/trace.h)

  // The two locks below share one word (core/call_gate.h), so that a synchronous call takes both with one
  // locked instruction and gives them back with a plain store.
  core::CallGate gate;
  // api_mu: held by the caller for one API call (a synchronous call: all of it; an asynchronous one: its
  // checks and enqueue). try_lock on it is the one-thread-at-a-time check. Guards the choice cache, the
  // group being recorded and the creation of the engine.
  core::ApiMutex api_mu{gate};
  // A synchronous call's API scope holds exec_mu too (taken with api_mu, or once the queue has drained).
  bool api_holds_exec = false;
  int group_depth = 0;
  std::vector<core::Op> group_ops;
  std::shared_ptr<detail::WorkState> group_state;
  std::unique_ptr<core::ProgressEngine> engine;  // created by the first asynchronous call

  // exec_mu: held by the thread executing operations (the progress thread, or a synchronous caller once the
  // queue has drained). It guards everything below, up to `choices`, which the API thread owns.
  core::ExecMutex exec_mu{gate};
  // Staging for fused all_reduces in a group: plain memory, and registered memory for the fused calls that
  // choose from the registered-buffer tables (GroupPlan). Each grows to the largest such call and is reused.
  core::StagingBytes fusion_heap, fusion_registered;
  uint64_t next_seq = 0;
  // The context every collective runs in: the constant fields set at creation (core::init_op_context), the
  // call's fields rewritten by each call (make_context in communicator.cc).
  algo::OpContext op_context;
  std::vector<uint64_t> p2p_send_seq, p2p_recv_seq;
  std::optional<Error> failure;
  std::atomic<bool> failed{false};
  algo::Scratch scratch;
  uint64_t splits = 0;
  uint64_t shrinks = 0;  // shrink() / replace_lost() calls so far: the epoch of the next one's store keys
  std::atomic<bool> abort_called{false};  // abort() has run (it is idempotent)
  std::vector<uint64_t> sent_to, received_from;
  uint64_t operations = 0;
  // What the last operation did, recorded cheaply on the small-message path (no strings, no traffic formula);
  // last_operation() builds the OperationInfo from it.
  struct LastOp {
    const algo::Algorithm* algorithm = nullptr;  // null: point-to-point, or nothing has run yet
    // The call's shape, rebuilt on demand (storing a whole CallShape on every call costs the small-message path).
    algo::Collective coll = algo::Collective::AllReduce;
    DataType dtype = DataType::UInt8;
    int root = -1;
    const char* p2p_name = "";  // "send", "recv" or "sendrecv"
    bool forced = false;
    bool registered = false;  // CollCall::registered
    uint8_t adapt = 0;  // 0: no run-time choice; 1: a near-tie being timed; 2: the agreed fastest
    size_t count = 0;
    uint64_t sent = 0, received = 0;
    double estimate = 0;
  } last_op;
  // CHORUS_ADAPT: the run-time choice among near-ties, per call shape (key_of(collective, 0, bytes, registered,
  // in_place)); the previous call's entry skips the lookup.
  std::unordered_map<uint64_t, core::AdaptState> adapt;
  uint64_t adapt_last_key = ~uint64_t{0};
  core::AdaptState* adapt_last = nullptr;
  // (collective x 4 + 2 x registered-buffer tables + in place with them, bytes) whose choice was logged
  std::set<std::pair<int, size_t>> logged_choices;
  // Choices already made, so the small-message path does not evaluate every formula on every call: key
  // (collective, forced algorithm + 1 or 0, bytes), value (algorithm, its estimate).
  std::unordered_map<uint64_t, std::pair<const algo::Algorithm*, double>> choices;
  // The previous call's entry: a loop of same-shaped calls skips the hash lookup.
  struct LastChoice {
    uint64_t key = ~uint64_t{0};
    const algo::Algorithm* algorithm = nullptr;
    double estimate = 0;
  } last_choice;

  // The collective in progress, for the stall check (set per operation; formatted only when stalled).
  struct CurrentOp {
    const transport::MessageTag* tag = nullptr;  // in the running operation's context; null: none runs
    std::chrono::steady_clock::time_point start;
    // Set by the stall check: the operation (by sequence number) whose fingerprint it published, and when it
    // last compared. Not reset per call, so a call that never stalls stores nothing here.
    uint64_t published_seq = ~uint64_t{0};
    std::chrono::steady_clock::time_point last_check;
  } current;
  // Called by the transport when a wait has stalled: ranks stuck at the same sequence number compare their
  // operations through the store, and different ones are a Mismatch.
  void on_stall();
  // Failure records in the store (see docs/design.md, Failures): write ours, and replace "lost rank p" by
  // rank p's own record when it has one.
  void record_failure(const Error& e) noexcept;
  Error explain(const Error& e) noexcept;

  ~Impl();
};

namespace core {
// The one-thread-at-a-time refusal: InvalidArgument naming `op`, thrown when another thread is inside a
// call on the same communicator. Nothing has been sent.
[[noreturn]] void throw_busy(const char* op);
// api_mu alone, for the calls that do not take an ApiScope (synchronize, and the recovery calls, which work
// on a failed communicator); throw_busy's error when another thread holds it.
std::unique_lock<ApiMutex> enter_api(Communicator::Impl& impl, const char* op);
// Makes `e` the communicator's failure: records it in the store for the peers and tells every reachable
// peer through the transport. The caller holds exec_mu. Returns the error to throw (explained: a lost peer
// that failed first is named with its own cause).
Error fail_communicator(Communicator::Impl& impl, const char* op, const Error& e);
// Sets the constant fields of impl.op_context (transport, scratch, ranks, topology, traffic counters); called
// once the transport and the counters exist.
inline void init_op_context(Communicator::Impl& impl) {
  algo::OpContext& c = impl.op_context;
  c = algo::OpContext{};
  c.transport = impl.transport.get();
  c.scratch = &impl.scratch;
  c.rank = impl.rank;
  c.size = impl.size;
  c.world_size = impl.size;
  c.topology = &impl.topology;
  c.inter_link = &impl.link;
  c.sent_to = impl.sent_to.data();
  c.received_from = impl.received_from.data();
  c.stream_copy = impl.config.stream_copy;
}

// Rendezvous through the store and connect the transport (Communicator::create).
std::unique_ptr<Communicator::Impl> bootstrap(std::shared_ptr<Store> store, int rank, int size,
                                              const CommOptions& options);
}  // namespace core

}  // namespace chorus
