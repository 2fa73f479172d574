// The shared-memory transport: ranks on one host exchange frames through single-producer single-consumer
// rings in POSIX shared memory, and large payloads move with one copy by cross-memory attach
// (process_vm_readv) where the kernel allows it. See docs/design.md, "Shared memory inside a host".
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "transport/shm/registered_memory.h"
#include "transport/spin_budget.h"
#include "transport/transport.h"

namespace chorus::transport {

struct ShmOptions {
  size_t ring_bytes = 1 << 20;         // per inbound ring (one per local peer)
  size_t single_copy_bytes = 64 << 10;  // payloads at least this large use cross-memory attach when allowed
  // An exchange's payloads (SenderWork::exchanged(): both ranks send at once, so both cores copy anyway, and
  // the sender leaves the buffer as it is until the operation ends) go the same way from this size, below
  // single_copy_bytes too, where each local rank has a core of its own: there one read by attach (a system
  // call, then one copy) costs less than the ring's two copies, one on each side. Such mid-sized frames follow
  // the way their class has chosen (adapting) and are neither timed nor tried the other way: a few kilobytes
  // read per KiB like fixed costs, not like the copies the choice weighs (docs/performance.md, "Mid-sized
  // exchanges by attach"). Other payloads keep single_copy_bytes: where the receiver only waits, the ring's
  // two copies overlap the handoff. CHORUS_SHM_SINGLE_COPY_BUSY_BYTES; at least single_copy_bytes: exchanges
  // as other sends.
  size_t single_copy_busy_bytes = 8 << 10;
  // Where the local ranks outnumber the cores, a tree's or a chain's edge (SenderWork::one_way: a broadcast's
  // sends, a reduce leaf's) goes by attach only from this size (at least single_copy_bytes): by attach its
  // sender waits for the receiver to be scheduled and read, a switch between ranks that the ring's buffered
  // copy spares it. 4 ranks on 2 cores: broadcast of 64-256 KiB 0.46-0.91 of the time, a reduce of 64-128 KiB
  // 0.71-0.72; broadcast at 3 and 8 ranks 0.67-0.99, reduce at 3 and 8 even (docs/performance.md, "Tree edges
  // through the rings where ranks share cores"). Exchanges, rings and inner tree ranks keep single_copy_bytes: all_gather, all_to_all and
  // reduce_scatter of 256 KiB-1 MiB took 1.1-1.8 times as long through the rings, and a reduce's inner ranks
  // at 8 ranks 1.1-1.2. CHORUS_SHM_SINGLE_COPY_SHARED_CORE_BYTES; 0: single_copy_bytes.
  size_t single_copy_shared_core_bytes = 512 << 10;
  // Cross-memory attach (CHORUS_SHM_CMA): 1 wherever the kernel allows it, 0 never, -1 (auto) where the
  // host's lowest local rank measures at creation that an attach read costs less than kAttachPaysBelow
  // copies (ShmTransport::probe_attach_cost). Elsewhere large payloads stream through the rings.
  int cma = -1;
  // With cma auto (-1), the probe only makes the first choice: each receiver then times its large frames
  // both ways (both copies through the ring, against the attach read) and tells its sender which to use, per
  // pair of ranks, and the sender tries the other way now and then: soon after creation, then less and less
  // often, at most once every `explore_us` microseconds once settled. What the rings cost depends on where
  // the two ranks' cores sit (docs/performance.md, "Ring or attach, chosen while running"), which no probe at
  // creation sees. false: the probe's choice stays (CHORUS_SHM_ADAPT=0). Never where the ranks outnumber the
  // cores: their timings there include being descheduled.
  bool adapt = true;
  uint32_t explore_us = 1000000;  // CHORUS_SHM_EXPLORE_US; 0: tries limited by frame counts only
  // An idle sender's large payloads (SenderWork::idle) stream through the ring, so both ranks' cores copy,
  // where each local rank has a core of its own and the operation sends the peer at least this much (below,
  // cross-memory attach is about as fast); to a receiver that reduces them, at any size. 0: never
  // (CHORUS_SHM_STREAM_IDLE_BYTES).
  size_t stream_idle_bytes = size_t{2} << 20;
  // An idle sender's payload (SenderWork::idle) that streams through the ring (queued: larger than the room in
  // it when sent) is written in pieces of at most this many bytes, the ring's head published after each, so
  // that its consumer copies one piece out while its producer copies the next in. Written as far as the room
  // went (0, the ring's size), a payload larger than the ring moved in halves, each side waiting while the
  // other copied: a 2-rank gather of 8-64 MiB took 1.3-1.6 times as long (docs/performance.md, "Streaming
  // payloads in pieces"). Other senders (an exchange: both ranks copy anyway) write as far as the room goes:
  // in pieces, 2-rank all_reduce of 1-4 MiB took 1.07-1.10 times as long. CHORUS_SHM_STREAM_PIECE_BYTES.
  size_t stream_piece_bytes = size_t{128} << 10;
  // Adapting, the rings are the first choice for the large payloads that the ranks of a reducing collective
  // (all_reduce, reduce_scatter, reduce) exchange, in calls of at least this many bytes (count times element
  // size; ShmTransport::path_class), where the probe would start them by attach: there the receiver reduces
  // from the ring in one pass where by attach it copies the payload aside first, and tries of a few frames
  // the other way do not show what whole calls gain (docs/performance.md, "Ring or attach per size class").
  // From 4 MiB (16 until the fifty-second session): from a class started by attach the two receivers of an
  // exchange decided apart (each reads its ring frames 2-3 times cheaper to reduce, and their tries come at
  // their own times), one rank then copying into the ring and reading by attach while the other only copied
  // out: a 2-rank all_reduce of 8 MiB took 2.1-2.3 ms so, against 1.4 with both alike, in half the runs.
  // Through the rings it takes 1.4 every time, at the cost of 4 MiB (1.08 times attach's time).
  // 0: every class starts as the probe says (CHORUS_SHM_RING_FIRST_BYTES).
  size_t ring_first_bytes = size_t{4} << 20;
  // The same for in-place all_reduce, chosen for apart (ShmTransport::path_class): it sends from the buffer
  // it then reduces into, and there the rings served the 2-rank calls of 1, 2 and 8 MiB in 0.69-0.88 of the
  // time by attach (4 MiB 1.09), where out of place they took 0.97-1.02 of it; and from 64 KiB (1 MiB until the
  // fifty-third session), since the recursive doubling below 1 MiB waits for its send's read before it
  // reduces into that buffer: 2-rank calls of 64-512 KiB took 0.64-0.71 of the time so in sweeps up to 2 MiB,
  // where the class started by attach stayed there until its tries moved it. A class starts through the
  // rings where it holds calls of this size (ShmTransport::size_class_holds; ring_first_bytes too). The other
  // in-place reducing calls are chosen for apart too, from ring_first_bytes: the in-place reduce_scatter took
  // 1.54 times as long through the rings at 2 MiB, and 0.63 from 4 MiB, and in one class with the out-of-place
  // calls it followed their choice (4 MiB: 472 us against 312 in its own) (docs/performance.md, "Reducing calls
  // through the rings from 1 and 4 MiB"). 0: as the probe says (CHORUS_SHM_RING_FIRST_IN_PLACE_BYTES).
  size_t ring_first_in_place_bytes = size_t{64} << 10;
  // Adapting, an idle sender's lane (ShmTransport::kIdleLane) starts through the rings, as those frames stream
  // without adapting, rather than as the probe says: there both cores copy, and the receiver's first try of
  // attach comes 256 frames in, so a lane started by attach moved to the rings only during the 2-rank in-place
  // broadcast's 2 MiB row (2 MiB: 0.74-0.80 of the time with this, 4-64 MiB and the reduce leaf's lane even;
  // docs/performance.md, "An idle sender's lane starts through the rings"). Where attach is the faster way
  // (cores far apart) the receiver's tries move the lane there. false: as the probe says
  // (CHORUS_SHM_IDLE_RING_FIRST=0).
  bool idle_ring_first = true;
  // Read large payloads in registered memory (chorus::mem_alloc) in place, where every local rank can map
  // every other's; false: never (CHORUS_SHM_REGISTERED=0). Independent of cross-memory attach, which some
  // container profiles forbid while they allow this.
  bool allow_registered = true;
  // Wake-ups with asymmetric fences when every local rank can (membarrier(2)): a sender checks whether its
  // peer sleeps with a plain load, and the rank going to sleep pays for the ordering. false: a locked
  // instruction on the peer's doorbell per frame (CHORUS_SHM_MEMBARRIER=0).
  bool allow_membarrier = true;
  int spin = -1;                        // polls before sleeping; -1: chosen from the core count
  // CHORUS_SHM_ADAPTIVE_SPIN (on by default; 0 turns it off): where each local rank has a core of its own and
  // `spin` is unset, a wait polls for as long as the transport's SpinBudget says (ShmTransport::kSpinMin to
  // kSpinMax; the minimum is about what the fixed 4000 polls took on the development host) before it sleeps,
  // the budget taught by the waits that slept (transport/spin_budget.h): longer after those whose data came
  // soon after, shorter after long ones and after any that went to sleep while other work wanted the host's
  // CPUs (then a longer poll keeps a core from it). Polls past the minimum yield the CPU. A rank that waits out
  // its peer's copy of a few hundred microseconds (a gather's leaf while its root copies its own block)
  // otherwise slept each time, and where idle CPUs halt at once woke late (docs/performance.md, "Shared-memory
  // waits poll for a time that adapts"). Not on the progress thread of async calls (on_background_thread()).
  bool adaptive_spin = true;
  // What a timed wait asks before it sleeps: whether other work wants the host's cores. Tests put their own
  // answer here.
  bool (*cores_contended)() noexcept = transport::cores_contended;
  // Whether the local ranks outnumber the CPUs they may run on (then a wait yields the core between polls);
  // -1: the local ranks against this machine's hardware threads.
  int oversubscribed = -1;
};

struct ShmSegment;

class ShmTransport final : public Transport {
 public:
  // `local` lists the communicator ranks on this host (including `rank`), ascending; the transport carries
  // frames between them only. Creates this rank's segment, publishes its name under key_prefix in the
  // store, maps every local peer's segment, then unlinks its own name once every peer has mapped it.
  static std::unique_ptr<ShmTransport> connect(Store& store, const std::string& key_prefix, int rank, int size,
                                               const std::vector<int>& local, uint64_t comm_tag,
                                               const ShmOptions& options, base::Deadline deadline);
  ~ShmTransport() override;

  std::string_view name() const noexcept override { return "shm"; }
  SendHandle isend(int peer, const MessageTag& tag, const void* data, size_t len,
                   const base::Deadline& deadline, SenderWork work) override;
  void recv(int peer, const MessageTag& tag, void* dst, size_t len, const base::Deadline& deadline) override;
  void recv_reduce(int peer, const MessageTag& tag, void* dst, const void* local, size_t len,
                   const Reduction& reduction, const base::Deadline& deadline) override;
  void wait_send(SendHandle handle, const base::Deadline& deadline) override;
  void flush(const base::Deadline& deadline) override;
  void check_peers() override;
  void fail(const Error& error) noexcept override;
  void abort(const std::string& reason) noexcept override;
  void close() noexcept override;
  // Fault injection. send_raw writes the bytes into the peer's ring after the queued frames, as if they were
  // frame bytes (blocking until they fit). sever marks both rings between this rank and `peer` severed,
  // without a failure record: the peer sees the connection lost (PeerLost), as after a crash.
  void send_raw(int peer, std::span<const std::byte> bytes, const base::Deadline& deadline) override;
  void sever(int peer) override;

  // Whether large payloads went by cross-memory attach at creation (else they stream through the rings); with
  // adapt, each pair of ranks may change that later (PathChoice).
  bool single_copy() const { return cma_ && attach_first_; }
  // Whether each receiver chooses ring or attach for its senders from its timings (ShmOptions::adapt).
  bool adapts() const { return adapt_; }
  // The probe behind the automatic choice, in copies (see probe_attach_cost), as the host's lowest local rank
  // measured it; 0 where it was not made (CHORUS_SHM_CMA set, no local peer, or the kernel forbids attach).
  double attach_cost() const { return attach_cost_; }
  // ShmOptions::adaptive_spin's bounds, and the current budget of a wait's polling before it first sleeps (0
  // where the budget is not used: oversubscribed, CHORUS_SHM_SPIN set, or CHORUS_SHM_ADAPTIVE_SPIN=0).
  static constexpr std::chrono::nanoseconds kSpinMin = std::chrono::microseconds(150);  // ~4000 polls here
  static constexpr std::chrono::nanoseconds kSpinMax = std::chrono::microseconds(600);
  std::chrono::nanoseconds spin_budget() const {
    return timed_spin_ ? spin_budget_.budget() : std::chrono::nanoseconds(0);
  }
  // Cross-memory attach moves a payload with one copy, by the receiver, where the rings take one on each
  // side; it also pins the sender's pages and enters the kernel per read. It pays where an attach read costs
  // less than this many plain copies of the same bytes: about two copies is what the rings cost a rank that
  // both sends and receives, and the margin above that keeps attach where the two are close (docs/performance.md,
  // "Cross-memory attach measured at creation").
  static constexpr double kAttachPaysBelow = 3.0;
  // Times a 64 KiB process_vm_readv of this process's own memory against a 64 KiB memcpy, best of 16 each,
  // on fresh 4 KiB pages (as a user's heap buffers): the read's cost in copies. 0 if the read fails. About
  // half a millisecond, most of it the first touch of the 32 pages.
  static double probe_attach_cost();
  static constexpr uint32_t kWarmFrames = 8;  // a channel's first large frames, not timed
  // Nor, in each class, those of its first kWarmCalls calls' worth of bytes (the call's count times its element
  // size, from the frame's fingerprint; at least kWarmFrames frames): a page read by cross-memory attach for
  // the first times costs more than later (on the fifth host, fresh buffers of a 2-rank all_gather of 16 MiB
  // took 3.0 and 2.5 ms for their first two calls by attach, then 1.5-1.8; per frame 250 ns per KiB falling to
  // 100-115 by the fifth call), where the rings' copies do not: timed then, a try of the rings looked 1.5-2.5
  // times cheaper than attach and moved the class onto them for good, 1.2 times slower per call
  // (docs/performance.md, "An exchange goes one way"). Neither side times nor tries the other way before.
  // A call larger than any before it in its class starts that count again (its buffers reach pages no call of
  // the class read before: a 2-rank all_gather sweep moved from 8 to 16 MiB, still in one class, and a try
  // of the rings then met attach's first reads of the new pages).
  static constexpr uint64_t kWarmCalls = 5;
  struct Warmth {
    uint64_t bytes = 0;    // large bytes since the class's largest call so far began
    uint64_t largest = 0;  // that call's bytes
    // Counts a frame of `len` bytes of a call of `call_bytes` (warm_bytes); true while the class is still warming.
    bool warming(uint64_t frames, size_t len, uint64_t call_bytes) {
      if (call_bytes > largest) {
        largest = call_bytes;
        bytes = 0;
      }
      bytes += len;
      return frames <= kWarmFrames || bytes <= kWarmCalls * call_bytes;
    }
  };
  // Which of a sender's pages this receiver has read by attach in fewer than kWarmReads calls: a page's first
  // reads cost more than later ones (fresh buffers of a 2-rank all_gather of 16 MiB: 3.0 and 2.5 ms for the
  // first two calls by attach, then 1.5-1.8; most likely the kernel's page aging, which marks a page accessed
  // at its first pin and moves it to its active list at the second), and so do a class's reads of new buffers
  // long after its warm-up (chorus-perf times each size out of place and then in place, where the peer's input
  // is its output buffer). An attach frame from such pages is not timed (timed_frame's `cold`). Kept per 2 MiB
  // of the sender's addresses, by the call's sequence number (MessageTag::seq), forgotten all at once past
  // kMaxEntries.
  struct ColdPages {
    static constexpr uint32_t kWarmReads = 3;  // calls that read a page before its reads are timed
    static constexpr size_t kMaxEntries = 4096;
    static constexpr int kShift = 21;
    struct Entry {
      uint64_t seq = 0;    // the last call that read it
      uint32_t calls = 0;  // calls that read it
    };
    std::vector<std::pair<uint64_t, Entry>> entries;  // sorted by granule
    // Counts a read of [address, address + len) by the call `seq`; true if some of it was read by fewer than
    // kWarmReads - 1 calls before.
    bool read(uint64_t address, size_t len, uint64_t seq);
  };
  // The receiver's choice between the two ways a large frame can come, from what each took (per byte, the
  // median of the last few frames that came that way), kept apart for frames it copies and frames it reduces.
  // It moves to the other way only where that costs under kSwitchBelow of the current one, summed over the
  // kinds of frame that have come both ways, at two tries in a row, so that figures close together or a
  // moment's disturbance do not make it flap.
  struct PathChoice {
    static constexpr uint32_t kWindow = 16;  // frames the chosen way's figure looks back over
    static constexpr uint32_t kTried = 4;    // frames the other way's figure looks back over (one try's)
    static constexpr double kClearAbove = 2.0;
    double recent[2][2][kWindow] = {};  // [receiver reduces][came by attach]: ns per KiB of the last frames
    uint32_t samples[2][2] = {};
    bool attach = false;
    bool clear = false;      // the other way's figure is over kClearAbove times the chosen one's
    bool candidate = false;  // the other way looked better at try number candidate_try: confirm at a later one
    uint32_t candidate_try = 0;
    uint32_t tries = 0;          // tries seen (frames the other way after frames the chosen way)
    uint32_t tried_samples = 0;  // frames of the last try timed
    uint32_t published = 0;      // the word last stored in the ring's `path` (timed_frame)
    bool last_attach = false;    // the way the last large frame came (timed_frame)
    uint32_t frames = 0;         // large frames that came
    Warmth warmth;               // of the large frames that came
    // Adds one frame's timing; returns true if the choice changed. The caller counts tries (tries,
    // tried_samples): a change needs the figures of two tries to show it.
    bool add(bool reduces, bool by_attach, double ns_per_kib_sample);
    // A way's figure: the median of its last `last` frames, at most kWindow (0: none yet).
    double typical(int reduces, bool by_attach, uint32_t last) const;
  };
  static constexpr double kSwitchBelow = 0.75;
  // Large frames come in two lanes, each with its own choice: kIdleLane for frames from a sender with nothing
  // else to do until the send completes (SenderWork::idle, where the transport would stream without adapting:
  // an in-place broadcast root, a reduce leaf), kBusyLane for the rest. Through the ring an idle sender copies
  // its next frame in while the receiver copies this one out, so a frame there costs the slower of the two
  // copies, not their sum; an exchange's ranks copy both ways themselves and pay the sum. One choice for both
  // kept 2-rank broadcasts on attach on a host where the rings took 0.44-0.73 of its time (docs/performance.md,
  // "Idle senders choose apart").
  static constexpr int kBusyLane = 0, kIdleLane = 1, kLanes = 2;
  // The busy lane's choice is kept per class of operation: by size, since where an operation's buffers stay in
  // the caches the rings copy at cache speed and past them their second copy costs memory bandwidth, so a
  // figure learnt at one size says little about another (chorus-perf's warm-up at 64 MiB once moved a 2-rank
  // all_gather onto the rings at every size, docs/performance.md, "Ring or attach per size class"); and apart
  // for collectives that reduce (all_reduce, reduce_scatter, reduce), whose receivers reduce from the ring in
  // one pass but copy an attach read aside first. The size class is the call's count times its element size,
  // from the frame's fingerprint, which both sides have: below 1 MiB, then by factors of 4, from 64 MiB the
  // last. In-place reducing calls go apart again (path_class), by each rank's own call (MessageTag::in_place,
  // not in the frame: ranks whose calls differ in form still move every byte right, each side then choosing
  // in a different class). An idle sender's frames (kIdleLane) share one class: through the ring its copy
  // overlaps with the receiver's at any size.
  static constexpr int kSizeClasses = 5;
  // [0, kSizeClasses): copied; then reducing collectives out of place; in-place all_reduce; the other
  // in-place reducing calls (kReducingGroup..., each kSizeClasses wide).
  static constexpr int kReducingGroup = 1, kInPlaceAllReduceGroup = 2, kInPlaceReducingGroup = 3;
  static constexpr int kPathClasses = 4 * kSizeClasses;
  static int size_class(const MessageTag& tag) noexcept;
  // The call bytes a lane's class warms by (Warmth): the call's count times its element size, from the frame's
  // fingerprint, in the busy lane; 0 in the idle lane, which warms by kWarmFrames alone: there the rings stream
  // (both cores copy) against the receiver's attach read, and with the longer warm-up the 2-rank in-place
  // broadcast of 2-4 MiB, whose lane moves to the rings during those rows, took 1.33-1.42 times as long.
  static uint64_t warm_bytes(int lane, const MessageTag& tag) noexcept {
    return lane == kBusyLane ? call_bytes(tag) : 0;
  }
  // A call's bytes as its frames' fingerprint gives them: its count times its element size.
  static uint64_t call_bytes(const MessageTag& tag) noexcept { return tag.count * dtype_size(tag.dtype); }
  // The smallest call of a size class, in bytes (count times element size).
  static uint64_t size_class_floor(int cls) noexcept { return cls == 0 ? 0 : (uint64_t{1} << 20) << (2 * (cls - 1)); }
  // Whether a size class holds calls of `bytes` or more (the last class holds every size above its floor).
  static bool size_class_holds(int cls, uint64_t bytes) noexcept {
    return cls + 1 >= kSizeClasses || size_class_floor(cls + 1) > bytes;
  }
  static bool reducing_collective(const MessageTag& tag) noexcept {
    return tag.op == OpKind::AllReduce || tag.op == OpKind::ReduceScatter || tag.op == OpKind::Reduce;
  }
  // The class a lane's frames of the operation `tag` are chosen in.
  static int path_class(int lane, const MessageTag& tag) noexcept {
    if (lane == kIdleLane) return 0;
    if (!reducing_collective(tag)) return size_class(tag);
    const int group = !tag.in_place                 ? kReducingGroup
                      : tag.op == OpKind::AllReduce ? kInPlaceAllReduceGroup
                                                    : kInPlaceReducingGroup;
    return size_class(tag) + group * kSizeClasses;
  }
  // The way a class starts (the choice before any timing; both sides compute it): by attach where the probe
  // says so, except a reducing collective's exchanges from ShmOptions::ring_first_bytes (in-place all_reduce:
  // ring_first_in_place_bytes) and the idle lane (ShmOptions::idle_ring_first).
  bool first_attach(int lane, int path_cls) const {
    if (lane == kBusyLane && path_cls >= kSizeClasses) {
      const size_t from = path_cls / kSizeClasses == kInPlaceAllReduceGroup ? options_.ring_first_in_place_bytes
                                                                            : options_.ring_first_bytes;
      if (from > 0 && size_class_holds(path_cls % kSizeClasses, from)) return false;
    }
    if (lane == kIdleLane && options_.idle_ring_first) return false;
    return attach_first_;
  }
  // What a large frame through the ring cost, per KiB: the receiver's copy out (`own`), plus the producer's
  // copy in (`producer`) for a busy sender, or the slower of the two for an idle one. A frame that streamed was
  // timed with both copies side by side (`own` is the whole of it). An exchange's frame (kExchangeFrame) costs
  // what the receiver waited for it too: `since_wait` (0 or more) is the time from the start of that wait to
  // the frame's end, and the cost is at least both copies, `own` then leaving out the waits within the frame
  // (a frame that had all come before the receiver looked has its copy in in no wait of the receiver's).
  static double ring_frame_cost(double own, double producer, int lane, bool streamed, double since_wait = -1) {
    if (since_wait >= 0) return since_wait > own + producer ? since_wait : own + producer;
    if (streamed) return own;
    return lane == kIdleLane ? (own > producer ? own : producer) : own + producer;
  }
  // The sender's side of one lane's tries of the way not asked for (attach_to).
  struct Exploration {
    std::chrono::steady_clock::time_point at{};  // no try before this
    uint32_t count = 0;                          // tries made
    uint32_t left = 0;                           // frames still to go the other way, as `attach` says
    uint64_t large_frames = 0;                   // large frames sent in this lane (that could go either way)
    Warmth warmth;                               // of the class's large frames sent
    uint64_t tried_at = 0;                       // large_frames when the last try began
    bool attach = false;
  };
  // Frames in a row that try the way not chosen, besides the first (which the receiver does not time).
  static constexpr uint32_t kExploreFrames = PathChoice::kTried;
  static constexpr uint32_t kExploreSpacing = 256;  // large frames at least between two tries
  static constexpr uint32_t kExploreSpacingClear = 4096;  // the same where the last try was far slower
  static constexpr uint32_t kRetrySpacing = 16;           // large frames between a try and the one that confirms it
  static constexpr double kHoldPerExtra = 50;  // a try's extra cost holds the next back this many times as long
  // Whether payloads in registered memory are read in place (every local rank mapped every other's probe).
  bool registered_reads() const { return registered_; }
  WaitCounters wait_counters() const noexcept override { return waits_; }
  // When combined with another transport (HybridTransport): called on every polling round, it keeps the
  // other transport progressing; returns true while it has work in flight (so sleeps stay short).
  void set_external_progress(std::function<bool()> fn) { external_progress_ = std::move(fn); }
  // Progress queued sends without waiting; returns true if some are still queued.
  bool progress();
  // The same, returning whether some bytes moved (a wait's last look before it sleeps).
  bool write_queued();

 private:
  struct SendReq {
    FrameHeader header;
    const char* data;
    size_t len;
    size_t written;  // bytes of header + body written into the ring
    bool remote;     // a single-copy descriptor: the body is the descriptor, the payload stays here
    uint64_t index;  // frame number on this channel
    std::optional<RegionRef> region;  // a single-copy payload in registered memory
    std::chrono::steady_clock::duration copy_in{};  // adapt_: time spent copying its payload into the ring
    size_t piece = 0;  // the most written before the ring's head moves (stream_piece_ for idle senders)
  };
  struct Peer {
    int local = -1;             // index among the host's ranks
    ShmSegment* segment = nullptr;  // the peer's mapping
    size_t map_bytes = 0;
    int pidfd = -1;
    pid_t pid = 0;
    // Channel to the peer: our frames go into the peer's inbound ring for us.
    std::deque<SendReq> queue;
    uint64_t posted = 0;     // frames posted
    uint64_t written = 0;    // frames completely written into the ring
    uint64_t last_remote = 0;  // index + 1 of the last single-copy frame posted
    // The ring's tail and consumed count as last read. Both only grow, so a stale value understates the room
    // and the progress: it is reread only when it is not enough. Reading them on every frame would pull
    // their cache lines from the consumer's core each time, and make its next write fetch them back.
    uint64_t tail_seen = 0;
    uint64_t consumed_seen = 0;
    // Our ring in the peer: the head we published (this rank is its only writer, so it never loads the shared
    // line, which the consumer polls). The peer's ring in us: its head as last read; the consumer rereads it
    // only when that does not cover what it needs, so a producer that runs ahead costs one miss per batch.
    uint64_t head = 0;
    uint64_t head_seen = 0;
    // Payload lines of the peer's last frame, up to kPrefetchLines: how many the next wait for a frame
    // prefetches beside the header (a collective's calls repeat their sizes).
    uint32_t prefetch_lines = 1;
    // Stream position before which rewind() does not look at the tail again (after a look that found the
    // consumer too far behind).
    uint64_t rewind_after = 0;
    // As receiver (adapt_): what the peer's large frames took each way, and our choice for them, per lane
    // (kBusyLane, kIdleLane) and class (path_class). As sender: when and for how many frames our large frames
    // to the peer go the way it did not ask for (attach_to), per lane and class too.
    PathChoice path[kLanes][kPathClasses];
    // As receiver: how many calls have read each 2 MiB of the peer's memory by attach (ColdPages).
    ColdPages attach_sources;
    Exploration explore[kLanes][kPathClasses];
    bool dead = false;
    bool severed = false;  // this rank severed the channel (sever)
  };

  ShmTransport(int rank, int size, uint64_t comm_tag, const ShmOptions& options);
  template <class OnBytes, class OnRemote>
  void receive(int peer, const MessageTag& tag, size_t len, const base::Deadline& deadline, bool reduces,
               OnBytes&& on_bytes, OnRemote&& on_remote);
  // Whether our next large payload to `peer` goes by attach (adapt_): the way the peer asked for, or now and
  // then (less and less often, down to once every explore_us) kExploreFrames frames the other way.
  bool attach_to(Peer& p, int lane, int path_cls, size_t len, uint64_t call_bytes);
  // The way a class goes now (adapting), without counting a frame towards its next try.
  bool current_attach(const Peer& p, int lane, int path_cls) const;
  // The way a receiver's path word `asked` says, or the class's first way while it says none.
  bool asked_attach(uint32_t asked, int lane, int path_cls) const;
  // The two ranks of an exchange go one way (adapting): the lower rank's receiver chooses for both. Where
  // each receiver chose for its own side, one often moved a class onto the rings while the other stayed on
  // attach, and then one rank copied into the ring and read by attach while the other only copied out: a
  // 2-rank all_gather or all_to_all of 16 MiB took 2.2-2.4 ms so, against 1.4-1.5 with both by attach and 1.8-1.9
  // with both through the rings, in a third to half of the runs (docs/performance.md, "An exchange goes one
  // way"). So an exchange's frame (SenderWork::exchange) to a higher-ranked peer goes the way our receiver has
  // chosen for that peer's frames of its class (PathChoice::attach), marked kPairedFrame so that the peer leaves
  // it untimed; the higher rank sends its frames as our receiver asks, tries included (attach_to). Our frames do
  // not follow the peer's tries: an exchange posts its sends before its receives, so they would follow a try a
  // call late, a whole call apart (measured even with following: docs/data/s53/mirror-ab.txt). nullopt where
  // the peer is the lower rank or none of its large frames of this class came to us yet (a ring of 3 or more
  // ranks sends to the next and hears from the one before: there each receiver chooses for its own side).
  std::optional<bool> paired_way(int peer, int path_cls) const;
  // Sender side of adapt_: copying a large payload of `len` bytes into our ring in the peer took `took`;
  // publishes it per KiB in `published` (the ring's producer_ns_per_kib).
  static void timed_copy_in(std::atomic<uint32_t>& published, size_t len, std::chrono::steady_clock::duration took);
  // Receiver side of adapt_: one large frame from `peer` took `took` for `len` bytes (through the ring: our
  // copy out, or where it streamed (we waited for the producer within it) the time from its header to its end).
  // An exchange's frame through the ring also gives `since_wait`, the time from the start of our wait for it
  // (ring_frame_cost); by attach, `took` already starts there.
  void timed_frame(int peer, int lane, int path_cls, bool reduces, bool by_attach, size_t len, uint64_t call_bytes,
                   std::chrono::steady_clock::duration took, bool streamed, bool cold = false,
                   std::optional<std::chrono::steady_clock::duration> since_wait = std::nullopt);
  bool write_some(int peer);
  void rewind(Peer& p, char* ring_data, size_t frame);
  void put_ring(char* data, uint64_t pos, const char* src, size_t n);
  uint64_t ring_room(Peer& p, uint64_t head, size_t need);
  // The trailer word of a small frame at stream position `pos` of a ring of this communicator: different for
  // every position (below 2^63), with the top bit set, so neither a fresh ring's zeros nor an earlier lap's
  // trailer at the same place can pass for it, and mixed with the communicator's random tag, so payload bytes
  // left there by an earlier lap match it by chance only (2^-63 a look).
  static constexpr uint64_t kTrailerSalt = 0xc3a5e1f09b27d44bull;
  uint64_t trailer_word(uint64_t pos) const noexcept { return (pos ^ comm_tag_ ^ kTrailerSalt) | (uint64_t{1} << 63); }
  template <class Ready>
  void wait_until(Ready&& ready, const base::Deadline& deadline, int peer, const char* what, const MessageTag* tag);
  void ring_doorbell(int peer);
  void check_liveness();
  [[noreturn]] void remote_read_failed(int peer);
  [[noreturn]] void throw_peer_failure(int peer);
  bool peer_failed(int peer) const;
  bool channel_severed(int peer) const;  // either side severed the rings between us
  // Throws once the transport was aborted or failed; inline, so the small-message path pays two loads.
  void check_usable() {
    if (aborted_.load(std::memory_order_acquire) || failed_) [[unlikely]] throw_unusable();
  }
  [[noreturn]] void throw_unusable();

  uint64_t comm_tag_;
  ShmOptions options_;
  bool cma_ = false;           // every local rank can read every other's memory by cross-memory attach
  bool attach_first_ = false;  // large payloads go by attach until a receiver asks otherwise (adapt_)
  bool adapt_ = false;         // receivers choose between ring and attach from their timings
  double attach_cost_ = 0;
  bool registered_ = false;
  void* probe_region_ = nullptr;  // a page of registered memory the peers map at creation (freed once all did)
  bool asymmetric_wake_ = false;  // every local rank registered for membarrier(GLOBAL_EXPEDITED)
  WaitCounters waits_;
  int spin_ = 1000;
  bool yield_ = false;  // more local ranks than cores: yield the CPU between polls
  // ShmOptions::adaptive_spin in force: a wait's first round polls for spin_budget_'s time (then spin_ polls
  // between sleeps).
  bool timed_spin_ = false;
  SpinBudget spin_budget_{kSpinMin, kSpinMax};
  bool (*cores_contended_)() noexcept = transport::cores_contended;
  bool stream_idle_ = false;  // idle senders may stream: options_ allow it and each local rank has a core
  size_t stream_piece_ = 0;   // ShmOptions::stream_piece_bytes (the ring's size where 0): idle senders' pieces
  std::vector<int> local_;  // communicator ranks on this host
  std::vector<Peer> peers_;  // indexed by communicator rank; only local ones are used
  ShmSegment* self_ = nullptr;
  size_t self_bytes_ = 0;
  std::string self_name_;
  bool self_unlinked_ = false;
  std::unique_ptr<char[]> staging_;
  RegionCache regions_;         // peers' registered memory, mapped on first use
  bool region_warned_ = false;  // logged once that a peer's region could not be mapped
  std::function<bool()> external_progress_;
  std::optional<Error> failed_;
  bool closed_ = false;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  std::string abort_reason_;  // guarded by abort_mu_
};

}  // namespace chorus::transport
