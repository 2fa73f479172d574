// The TCP transport: one connection per pair of ranks (a full mesh), non-blocking sockets driven by epoll
// from the thread that runs the operation. See docs/design.md for the frame format and failure handling.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/net.h"
#include "chorus/store.h"
#include "transport/spin_budget.h"
#include "transport/transport.h"

namespace chorus::transport {

struct TcpOptions {
  std::string ifname;           // interface to listen on; empty: see choose_listen_address
  int socket_buffer_bytes = 0;  // SO_SNDBUF/SO_RCVBUF on every connection; 0 keeps the kernel's autotuning
  // Where socket_buffer_bytes is 0: the receive buffer of connections whose two ends are addresses of this host
  // (CHORUS_TCP_SAME_HOST_RCVBUF; 0 autotunes them too). See TcpTransport::kSameHostReceiveBuffer.
  int same_host_receive_buffer_bytes = -1;  // -1: kSameHostReceiveBuffer
  // TCP_NOTSENT_LOWAT of connections whose two ends are addresses of this host (CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT;
  // 0 leaves the kernel's). See TcpTransport::kSameHostNotsentLowat.
  int same_host_notsent_lowat_bytes = -1;  // -1: kSameHostNotsentLowat
  // Congestion control (CHORUS_TCP_CONGESTION). "auto": connections whose two ends are addresses of this host
  // use kSameHostCongestion, others the system's default; "system": the system's default everywhere; any other
  // name: that algorithm on every connection (an Error if the kernel refuses it).
  std::string congestion = "auto";
  // The job's secret (CHORUS_AUTH_TOKEN): every connection between ranks starts with the handshake of
  // base/auth.h, before the hello is trusted. Empty: connections are not authenticated.
  std::string auth_token;
  // Whether this host has more of the job's ranks than CPUs for them (then a wait yields the core between
  // polls); -1: the job's whole size against this machine's hardware threads.
  int oversubscribed = -1;
  // Polls of an empty socket before a receive sleeps in epoll_wait (CHORUS_TCP_SPIN), for every receive; -1:
  // 8 when oversubscribed (each yielding the core), else 64.
  int spin = -1;
  // CHORUS_TCP_ADAPTIVE_SPIN (on by default; 0 turns it off): without oversubscription and without `spin`, a
  // receive of at most kTimedSpinMaxBytes polls for as long as the transport's SpinBudget (kSpinMin to
  // kSpinMax) says instead. It breaks the chains of sleeping waits that stall small exchanges where idle CPUs
  // halt at once; while other work wants the host's CPUs (cores_contended below) the budget shrinks instead of
  // growing, since a longer poll would only keep a core from the peer (docs/performance.md).
  bool adaptive_spin = true;
  // What a timed wait asks before it sleeps: whether other work wants the host's cores, so that polling longer
  // would keep one from it (then its budget shrinks instead of growing). Tests put their own answer here.
  bool (*cores_contended)() noexcept = transport::cores_contended;
  // A receive of a small frame (at most a quarter of this) also reads up to this many bytes of what follows it
  // into the peer's read-ahead buffer, in the same readv, and the next receives take their bytes from there
  // without a syscall while it lasts (CHORUS_TCP_READ_AHEAD; 0: each receive reads only its own bytes).
  size_t read_ahead_bytes = 16 << 10;
};

class TcpTransport final : public Transport {
 public:
  // What "auto" gives a connection between two addresses of one host. Nothing between them can be congested,
  // and a pacing algorithm (bbr, the default on some systems) only slows them: on the 2-core test machine
  // (2026-12-03) 2-rank tcp all_reduces of 128 KiB to 2 MiB took 0.51-0.55 times as long with reno as with
  // bbr, and small ones the same. Any process may choose reno.
  static constexpr const char* kSameHostCongestion = "reno";
  // What a connection between two addresses of one host receives into, fixed (SO_RCVBUF; the kernel books
  // twice this), where no socket buffer size is asked for. With the kernel's autotuning the receive buffer starts
  // at tcp_rmem's default (128 KiB) and grows with what the reader takes. On the 2-core test host (2026-12-07)
  // 512 KiB-4 MiB calls of 2-rank sweeps then took 1.3-1.7 times as long for the whole run in 29 of 88 launches,
  // and in the slow all_gather launches a connection ended with a congestion window of 12-29 segments, in the
  // fast ones both with 50-105 (likely: early transfers held by a small window leave the congestion window
  // unused, and the kernel shrinks an unused one). With a fixed buffer of 4 MiB (and large receives' own poll
  // budget) 1 of 58 launches was slow (docs/performance.md, "A fixed receive buffer on same-host tcp"). Across
  // hosts, where the window a path needs is unknown, autotuning stays.
  static constexpr int kSameHostReceiveBuffer = 4 << 20;
  // How many bytes a same-host connection's send may queue beyond what the kernel has sent (TCP_NOTSENT_LOWAT).
  // Loopback delivers a segment on the CPU that transmits it, and queued segments go out from the CPU that
  // processes the ACK that frees them, which in an exchange is the peer's: two per-CPU queues, segments out of
  // order, RACK takes them for lost at a round trip of microseconds, and the congestion window is cut. In the
  // 2-rank tcp rows of 1-16 MiB (2026-12-07) that was 400-800 retransmitted segments per bench launch; with 512
  // KiB 25-59, and all_gather and all_to_all of 1-4 MiB took 0.77-0.90 of the time (docs/performance.md,
  // "Same-host tcp sends queue little").
  static constexpr int kSameHostNotsentLowat = 512 << 10;
  // The timed poll of small receives (TcpOptions::spin): receives of up to this many bytes, a budget between
  // these two (64 polls took about 40 us on the test host; in the chains of sleeping waits seen there each
  // wait took 134-160 us in one hour and 360-390 us in another, docs/performance.md). The maximum is the
  // minimum doubled three times: 1280 us broke the longer chains too, but under CPU contention (ctest's
  // parallel jobs, before waits asked cores_contended) chorus-tune's tcp ping-pong measured a hop at 1.1 ms
  // with it; 320 us came out even with it in alternating runs of the whole range.
  static constexpr size_t kTimedSpinMaxBytes = 64 << 10;
  static constexpr std::chrono::nanoseconds kSpinMin = std::chrono::microseconds(40);
  static constexpr std::chrono::nanoseconds kSpinMax = std::chrono::microseconds(320);
  // The current budget of small receives' polling (kSpinMin until a wait teaches otherwise); 0 where it is off.
  std::chrono::nanoseconds spin_budget() const {
    return timed_spin_ ? spin_budget_.budget() : std::chrono::nanoseconds(0);
  }
  // The same for each wait of a receive of more than kTimedSpinMaxBytes.
  std::chrono::nanoseconds large_spin_budget() const {
    return timed_spin_ ? large_spin_budget_.budget() : std::chrono::nanoseconds(0);
  }
  // The congestion control of the connection to `peer` ("" for this rank or when it cannot be read).
  std::string congestion_control(int peer) const;
  // The receive buffer of the connection to `peer`, as SO_RCVBUF reports it (0 for this rank or when it cannot be
  // read): twice what was asked where it was fixed, else autotuning's current size.
  int receive_buffer(int peer) const;
  // The TCP_NOTSENT_LOWAT of the connection to `peer` (0: the kernel's default, or unreadable).
  int notsent_lowat(int peer) const;
  // Congestion control, spin and read-ahead in force, e.g. "tcp: reno on the 1 connection within this host
  // (CHORUS_TCP_CONGESTION=auto); 64 polls before a receive sleeps (CHORUS_TCP_SPIN); read-ahead of 16384 bytes
  // past frames of up to 4096 (CHORUS_TCP_READ_AHEAD)".
  std::string settings() const override;
  // Listens (on the chosen interface's address only, never a wildcard), publishes "<key_prefix>addr/<rank>"
  // in the store, connects to every lower rank and accepts every higher rank. With options.auth_token, each
  // connection is authenticated first; an accepted connection that fails is dropped, logged, and the wait
  // for the real peer goes on. `store_address` (the TCP store's address, when there is one) picks the interface
  // that routes to it; `all_local` (every rank on this host) picks loopback.
  static std::unique_ptr<TcpTransport> connect(Store& store, const std::string& key_prefix, int rank, int size,
                                               uint64_t comm_tag, const TcpOptions& options,
                                               const std::optional<base::SockAddr>& store_address, bool all_local,
                                               base::Deadline deadline);
  ~TcpTransport() override;

  std::string_view name() const noexcept override { return "tcp"; }
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
  // Fault injection: raw bytes after the queued sends (blocking until written); sever = a TCP reset
  // (SO_LINGER 0 + close), after which this rank's calls involving `peer` throw PeerLost.
  void send_raw(int peer, std::span<const std::byte> bytes, const base::Deadline& deadline) override;
  void sever(int peer) override;

  // Progress queued sends without waiting; returns true if some are still queued.
  bool progress();
  // When combined with another transport (HybridTransport): called before every wait, it keeps the other
  // transport progressing; returns true while it has work in flight (so waits stay short).
  void set_external_progress(std::function<bool()> fn) { external_progress_ = std::move(fn); }

  // The address this rank listened on (for logs and tests).
  const std::string& listen_address() const { return listen_address_; }

 private:
  static constexpr size_t kStagingBytes = 64 * 1024;
  // A small one-way receive waiting for its socket reads it only once epoll reports it readable, and
  // regardless after this many polls that did not (receive).
  static constexpr uint32_t kReadEveryPolls = 64;
  // A large receive's wait reads the socket at each of its first this many polls, then as a one-way receive
  // does (receive).
  static constexpr uint32_t kLargeReadPolls = 16;

  struct SendReq {
    FrameHeader header;
    const char* data;
    size_t len;
    size_t done;  // bytes of header + data already written
  };
  struct Peer {
    base::Fd fd;
    std::deque<SendReq> queue;
    uint64_t posted = 0;
    uint64_t completed = 0;
    uint64_t written = 0;         // bytes written to the socket, frames' headers included
    uint32_t interest = 0;        // EPOLLIN / EPOLLOUT currently registered
    bool hung_up = false;         // the peer's stream has ended; what was left is in `stash`
    bool goodbye = false;         // the peer closed its communicator cleanly
    bool reset = false;           // the connection was reset
    bool severed = false;         // this rank reset it (sever); fd is closed
    bool sent_since_receive = false;  // a frame posted to it since our last receive from it began (receive)
    std::optional<Error> error;   // why the peer's stream ended badly (abort frame, death)
    std::string stash;            // the rest of the stream, read at a hang-up
    size_t stash_pos = 0;
    // Bytes read ahead of the frame being received (TcpOptions::read_ahead_bytes): [ahead_pos, ahead_end) of
    // `ahead` come next in the stream, before anything still in the socket.
    std::unique_ptr<char[]> ahead;
    size_t ahead_pos = 0;
    size_t ahead_end = 0;
  };

  TcpTransport(int rank, int size, uint64_t comm_tag);
  void setup_epoll();
  void receive(int peer, const MessageTag& tag, char* dst, size_t len, const Reduction* reduction,
               const char* local, const base::Deadline& deadline);
  [[noreturn]] void on_unexpected_frame(int peer, const FrameHeader& h, const MessageTag& tag, size_t len,
                                        const char* spilled, size_t spilled_len, const base::Deadline& deadline);
  // Reads from the read-ahead buffer, then the stash, then the socket: > 0 bytes, 0 at the end of the stream,
  // -1 when it would block. With `ahead` (at most two iovecs), a read from the socket also fills the peer's
  // read-ahead buffer with what follows, in the same syscall.
  ssize_t read_some(int peer, iovec* iov, int iovcnt, bool ahead = false);
  void progress_sends(int peer);
  // One round of waiting: flushes writable sockets, notices hang-ups and aborts. reading_peer (or -1) is
  // the peer whose socket the caller reads itself; returns whether epoll reported it (readable, or its end;
  // also true after a signal, when the caller should look again).
  // With `nonblocking`, only handles what is already pending and returns at once.
  bool poll_once(const base::Deadline& deadline, int reading_peer, int waiting_peer, const char* what,
                 const MessageTag* tag, bool nonblocking = false);
  void handle_hangup(int peer);
  [[noreturn]] void throw_peer_error(int peer, const char* context);
  void set_interest(int peer, uint32_t bits, bool on);
  void check_usable();
  void set_oversubscribed(bool yes);  // chooses yield_ and spin_ (below)
  // Applies TcpOptions::congestion to the connection `fd` to `peer`; counts same-host connections given reno.
  static void set_congestion(int fd, const std::string& choice, int rank, int peer, int* same_host);

  uint64_t comm_tag_;
  // A receive that finds its socket empty polls this many times before sleeping in epoll_wait: the reply
  // to a small message often arrives within microseconds, sooner than a sleeping thread wakes up. With more
  // ranks than cores each poll yields the core instead (and polls fewer times).
  int spin_ = 0;
  bool yield_ = false;
  // With TcpOptions::adaptive_spin, without oversubscription and without CHORUS_TCP_SPIN, a receive of at most
  // kTimedSpinMaxBytes polls for spin_budget_'s time instead of spin_ times (transport/spin_budget.h). Larger
  // receives keep the count: for them polling longer made 256 KiB-4 MiB broadcasts slower (docs/performance.md),
  // the readv polls taking the socket's lock from the sender's delivery of the next segment.
  bool timed_spin_ = false;
  SpinBudget spin_budget_{kSpinMin, kSpinMax};
  // The same for each wait of a larger receive (between the peer's segments, or for its late start). Before it,
  // such a receive polled 64 times in all and then slept at every gap: where one rank of a 2-rank exchange woke
  // late, the other's polls ran out and it slept too, call after call, and 512 KiB-4 MiB all_reduces took about
  // 1.5 times as long for whole benchmark rows in about a third of the runs (docs/performance.md).
  SpinBudget large_spin_budget_{kSpinMin, kSpinMax};
  // The same for each wait of a send for room in its socket (wait_send).
  SpinBudget send_spin_budget_{kSpinMin, kSpinMax};
  bool (*cores_contended_)() noexcept = transport::cores_contended;  // TcpOptions::cores_contended
  size_t read_ahead_bytes_ = 0;
  std::string congestion_;  // TcpOptions::congestion
  int same_host_reno_ = 0;  // connections within this host given kSameHostCongestion ("auto")
  int same_host_ = 0;       // connections whose two ends are addresses of this host
  int socket_buffer_bytes_ = 0;     // TcpOptions::socket_buffer_bytes
  int same_host_rcvbuf_asked_ = 0;  // TcpOptions::same_host_receive_buffer_bytes in force (0: none)
  int same_host_rcvbuf_ = 0;        // the receive buffer the kernel reported for them (0: left autotuned)
  int same_host_lowat_ = 0;         // TcpOptions::same_host_notsent_lowat_bytes in force (0: the kernel's)
  std::vector<Peer> peers_;
  base::Fd epoll_;
  base::Fd wake_;  // eventfd: abort() from another thread
  // check_peers() looks at the sockets (an epoll_wait syscall, about a third of a small one-way call) at most
  // once per tick of the coarse clock; in between it reports what is already known.
  base::Clock::time_point next_socket_check_{};
  std::unique_ptr<char[]> staging_;
  std::string listen_address_;
  std::function<bool()> external_progress_;
  std::optional<Error> failed_;  // set by fail(): later calls throw
  bool closed_ = false;

  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  std::string abort_reason_;  // guarded by abort_mu_
};

}  // namespace chorus::transport
