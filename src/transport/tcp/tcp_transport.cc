#include "transport/tcp/tcp_transport.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "base/auth.h"
#include "base/error.h"
#include "base/files.h"
#include "base/logging.h"

namespace chorus::transport {

namespace {

constexpr uint32_t kHelloMagic = 0x31484843;  // "CHH1"
// The hello a rank with an auth token answers to a hello sent without the handshake: the connecting rank (with
// no token) recognises it and says so, instead of a vague failure.
constexpr uint32_t kAuthRequiredMagic = 0x52484843;  // "CHHR"
constexpr uint32_t kWakeId = 0xffffffffu;
constexpr int kMaxIov = 64;

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint64_t comm_tag;
  int32_t rank;
  int32_t size;
};

Hello make_hello(uint64_t tag, int rank, int size) { return Hello{kHelloMagic, 1, tag, rank, size}; }

base::SockAddr choose_listen_address(const TcpOptions& options, const std::optional<base::SockAddr>& store_address,
                                     bool all_local) {
  if (!options.ifname.empty()) {
    auto a = base::interface_address(options.ifname);
    if (!a) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("socket interface '{}' (CHORUS_SOCKET_IFNAME) has no usable IP address",
                                    options.ifname));
    }
    return *a;
  }
  if (all_local) return base::loopback_address(store_address ? store_address->family() : AF_INET);
  if (store_address) {
    if (store_address->is_loopback()) return base::loopback_address(store_address->family());
    if (auto a = base::route_source_address(*store_address)) return *a;
  }
  base::throw_error(ErrorCode::InvalidArgument,
                    "cannot choose a network interface for the tcp transport: set CHORUS_SOCKET_IFNAME");
}

void send_hello(int fd, const Hello& h, const base::Deadline& deadline, int peer) {
  if (base::write_full(fd, &h, sizeof(h), deadline) != base::IoStatus::Ok) {
    base::throw_error(ErrorCode::PeerLost, fmt::format("connection to rank {} failed during setup", peer), peer);
  }
}

}  // namespace

TcpTransport::TcpTransport(int rank, int size, uint64_t comm_tag)
    : Transport(rank, size), comm_tag_(comm_tag), peers_(size), staging_(new char[kStagingBytes]) {
  set_oversubscribed(more_ranks_than_cores(size));
}

void TcpTransport::set_oversubscribed(bool yes) {
  // Oversubscribed: a few polls, each yielding the core, before sleeping; otherwise more, without yielding.
  yield_ = yes;
  spin_ = yes ? 8 : 64;
}

std::unique_ptr<TcpTransport> TcpTransport::connect(Store& store, const std::string& key_prefix, int rank, int size,
                                                    uint64_t comm_tag, const TcpOptions& options,
                                                    const std::optional<base::SockAddr>& store_address,
                                                    bool all_local, base::Deadline deadline) {
  std::unique_ptr<TcpTransport> t(new TcpTransport(rank, size, comm_tag));
  if (options.oversubscribed >= 0) t->set_oversubscribed(options.oversubscribed > 0);
  t->timed_spin_ = options.adaptive_spin && !t->yield_;
  if (options.cores_contended != nullptr) t->cores_contended_ = options.cores_contended;
  if (options.spin >= 0) {
    t->spin_ = options.spin;
    t->timed_spin_ = false;
  }
  t->read_ahead_bytes_ = options.read_ahead_bytes;
  base::SockAddr addr = choose_listen_address(options, store_address, all_local);
  addr.set_port(0);
  base::Fd listener = base::listen_tcp(addr, std::max(128, size + 16));
  base::SockAddr bound = base::local_address(listener.get());
  t->listen_address_ = bound.to_string();
  store.set(key_prefix + "addr/" + std::to_string(rank), t->listen_address_);
  base::log_debug("tcp transport listening on {}", t->listen_address_);
  const std::string& token = options.auth_token;
  if (token.empty()) base::auth::note_unauthenticated();

  // Higher ranks connect to us; an acceptor thread takes them while this thread connects to lower ranks.
  std::exception_ptr accept_error;
  std::thread acceptor([&] {
    try {
      int expected = size - 1 - rank;
      while (expected > 0) {
        pollfd p{listener.get(), POLLIN, 0};
        int rc = ::poll(&p, 1, deadline.poll_timeout_ms(200));
        if (rc < 0 && errno != EINTR) base::throw_errno("poll", errno);
        if (rc <= 0) {
          if (deadline.expired()) {
            std::string missing;
            for (int r = rank + 1; r < size; ++r)
              if (!t->peers_[r].fd.valid()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
            base::throw_error(ErrorCode::Timeout,
                              fmt::format("rank {} timed out waiting for ranks {} to connect", rank, missing));
          }
          continue;
        }
        base::Fd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!c.valid()) continue;
        Hello h{};
        auto hello_deadline = base::Deadline::after(std::min<std::chrono::milliseconds>(
            deadline.remaining(), std::chrono::milliseconds(10000)));
        if (!token.empty()) {
          auto auth = base::auth::accept_handshake(c.get(), token, base::auth::Channel::Rank, hello_deadline);
          if (auth.state == base::auth::AcceptHandshake::State::NotAuthenticating) {
            // Most likely a rank without the token: read the rest of its hello and answer one that tells it so.
            std::string peer = base::peer_address(c.get()).to_string();
            base::log_warn("rank {}: dropped a connection from {} that did not authenticate (a rank without "
                           "CHORUS_AUTH_TOKEN?)",
                           rank, peer);
            std::memcpy(&h, auth.unread.data(), std::min(auth.unread.size(), sizeof(h)));
            if (auth.unread.size() < sizeof(h) &&
                base::read_full(c.get(), reinterpret_cast<char*>(&h) + auth.unread.size(),
                                sizeof(h) - auth.unread.size(),
                                base::Deadline::after(std::chrono::milliseconds(1000))) == base::IoStatus::Ok &&
                h.magic == kHelloMagic) {
              Hello refusal = make_hello(comm_tag, rank, size);
              refusal.magic = kAuthRequiredMagic;
              base::write_full(c.get(), &refusal, sizeof(refusal),
                               base::Deadline::after(std::chrono::milliseconds(1000)));
            }
            continue;
          }
          if (auth.state != base::auth::AcceptHandshake::State::Done) {
            base::log_warn("rank {}: dropped a connection from {} that failed authentication: {}", rank,
                           base::peer_address(c.get()).to_string(), auth.failure);
            continue;
          }
        }
        if (base::read_full(c.get(), &h, sizeof(h), hello_deadline) != base::IoStatus::Ok || h.magic != kHelloMagic) {
          bool wants_auth = std::memcmp(&h, base::auth::kMagic.data(), base::auth::kMagicBytes) == 0;
          base::log_warn("rank {}: dropped a connection from {} that did not say hello{}", rank,
                         base::peer_address(c.get()).to_string(),
                         wants_auth ? " (it wants to authenticate, but this rank has no CHORUS_AUTH_TOKEN)" : "");
          continue;
        }
        if (h.comm_tag != comm_tag || h.size != size || h.rank <= rank || h.rank >= size ||
            t->peers_[h.rank].fd.valid()) {
          base::log_warn("rank {}: dropped a connection from {} claiming rank {} of {} (tag {:016x}); it belongs to "
                         "another communicator or job",
                         rank, base::peer_address(c.get()).to_string(), h.rank, h.size, h.comm_tag);
          continue;
        }
        send_hello(c.get(), make_hello(comm_tag, rank, size), deadline, h.rank);
        t->peers_[h.rank].fd = std::move(c);
        --expected;
      }
    } catch (...) {
      accept_error = std::current_exception();
    }
  });

  std::exception_ptr connect_error;
  try {
    for (int p = 0; p < rank; ++p) {
      std::string peer_addr = store.get(key_prefix + "addr/" + std::to_string(p), deadline.remaining());
      base::HostPort hp = base::parse_host_port(peer_addr, "peer address");
      base::Fd c = base::connect_tcp(base::resolve(hp.host, hp.port), deadline, fmt::format("rank {}", p));
      if (!token.empty()) {
        base::auth::connect_handshake(c.get(), token, base::auth::Channel::Rank, deadline, ErrorCode::PeerLost,
                                      fmt::format("rank {} at {}", p, peer_addr), p);
      }
      send_hello(c.get(), make_hello(comm_tag, rank, size), deadline, p);
      Hello h{};
      base::IoStatus hello_status = base::read_full(c.get(), &h, sizeof(h), deadline);
      if (hello_status == base::IoStatus::Ok && h.magic == kAuthRequiredMagic) {
        base::throw_error(ErrorCode::PeerLost,
                          fmt::format("authentication with rank {} at {} failed: it requires authentication and "
                                      "this rank has no CHORUS_AUTH_TOKEN; check that CHORUS_AUTH_TOKEN is the same "
                                      "on every rank",
                                      p, peer_addr),
                          p);
      }
      if (hello_status != base::IoStatus::Ok || h.magic != kHelloMagic ||
          h.comm_tag != comm_tag || h.rank != p) {
        base::throw_error(ErrorCode::Mismatch,
                          fmt::format("rank {}: the process at {} is not rank {} of this communicator", rank,
                                      peer_addr, p),
                          p);
      }
      t->peers_[p].fd = std::move(c);
    }
  } catch (...) {
    connect_error = std::current_exception();
  }
  acceptor.join();
  if (connect_error) std::rethrow_exception(connect_error);
  if (accept_error) std::rethrow_exception(accept_error);

  int same_host = 0;
  t->socket_buffer_bytes_ = options.socket_buffer_bytes;
  t->same_host_lowat_ =
      options.same_host_notsent_lowat_bytes < 0 ? kSameHostNotsentLowat : options.same_host_notsent_lowat_bytes;
  if (options.socket_buffer_bytes <= 0) {
    t->same_host_rcvbuf_asked_ =
        options.same_host_receive_buffer_bytes < 0 ? kSameHostReceiveBuffer : options.same_host_receive_buffer_bytes;
  }
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    int fd = t->peers_[p].fd.get();
    base::set_nonblocking(fd, true);
    base::set_nodelay(fd);
    base::set_buffer_sizes(fd, options.socket_buffer_bytes);
    if (base::same_host(fd)) {
      ++t->same_host_;
      // Before any payload flows, so that no transfer runs in a window autotuning has not grown yet.
      if (t->same_host_rcvbuf_asked_ > 0) {
        t->same_host_rcvbuf_ = base::set_receive_buffer(fd, t->same_host_rcvbuf_asked_);
      }
      if (t->same_host_lowat_ > 0) {
        setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &t->same_host_lowat_, sizeof(t->same_host_lowat_));
      }
    }
    set_congestion(fd, options.congestion, rank, p, &same_host);
  }
  t->congestion_ = options.congestion;
  t->same_host_reno_ = same_host;
  if (same_host > 0) {
    base::log_debug("tcp: {} of {} connections reach ranks on this host and use {} congestion control (auto)",
                    same_host, size - 1, kSameHostCongestion);
  }
  t->setup_epoll();
  return t;
}

void TcpTransport::set_congestion(int fd, const std::string& choice, int rank, int peer, int* same_host) {
  if (choice == "system") return;
  if (choice == "auto") {
    // Best effort: a kernel without reno (none is known) keeps its default.
    if (base::same_host(fd) && base::set_congestion_control(fd, kSameHostCongestion)) ++*same_host;
    return;
  }
  if (!base::set_congestion_control(fd, choice)) {
    const int err = errno;
    const std::string allowed = base::read_first_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("rank {}: CHORUS_TCP_CONGESTION='{}': the kernel refuses it for the connection to "
                                  "rank {} ({}){}; 'auto' or 'system' always work",
                                  rank, choice, peer, std::strerror(err),
                                  allowed.empty() ? "" : fmt::format("; this process may choose: {}", allowed)));
  }
}

std::string TcpTransport::settings() const {
  std::string cc;
  if (congestion_ == "auto") {
    cc = same_host_reno_ == 0 ? std::string("the system's congestion control (no connection within this host)")
                              : fmt::format("{} on the {} connection{} within this host", kSameHostCongestion,
                                            same_host_reno_, same_host_reno_ == 1 ? "" : "s");
  } else {
    cc = congestion_ == "system" ? std::string("the system's congestion control") : congestion_;
  }
  const std::string ahead = read_ahead_bytes_ == 0 ? std::string("read-ahead off")
                                                   : fmt::format("read-ahead of {} bytes past frames of up to {}",
                                                                 read_ahead_bytes_, read_ahead_bytes_ / 4);
  const std::string spin =
      timed_spin_
          ? fmt::format(
                "each wait of a receive polls for {}-{} us (adapted to its waits and to contention for the "
                "CPUs, apart for receives of up to {} KiB and larger ones) before it sleeps "
                "(CHORUS_TCP_ADAPTIVE_SPIN=1)",
                std::chrono::duration_cast<std::chrono::microseconds>(kSpinMin).count(),
                std::chrono::duration_cast<std::chrono::microseconds>(kSpinMax).count(), kTimedSpinMaxBytes >> 10)
          : fmt::format("{} polls{} before a receive sleeps (CHORUS_TCP_SPIN)", spin_,
                        yield_ ? ", each yielding the core," : "");
  std::string buffers;
  if (socket_buffer_bytes_ > 0) {
    buffers = fmt::format("socket buffers of {} bytes (CHORUS_SOCKET_BUFFER_BYTES)", socket_buffer_bytes_);
  } else if (same_host_ == 0 || same_host_rcvbuf_asked_ == 0) {
    buffers = "socket buffers autotuned by the kernel";
  } else if (same_host_rcvbuf_ == 0) {
    buffers = fmt::format(
        "socket buffers autotuned by the kernel (net.core.rmem_max is under the {} bytes "
        "CHORUS_TCP_SAME_HOST_RCVBUF asks for same-host connections)",
        same_host_rcvbuf_asked_);
  } else {
    buffers = fmt::format(
        "a fixed receive buffer of {} bytes on same-host connections "
        "(CHORUS_TCP_SAME_HOST_RCVBUF), others autotuned",
        same_host_rcvbuf_asked_);
  }
  if (same_host_ > 0) {
    if (same_host_lowat_ > 0) {
      buffers += fmt::format("; same-host sends queue at most {} unsent bytes (CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT)",
                             same_host_lowat_);
    } else {
      buffers += "; same-host sends queue as the kernel allows (CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT=0)";
    }
  }
  return fmt::format("tcp: {} (CHORUS_TCP_CONGESTION={}); {}; {} (CHORUS_TCP_READ_AHEAD); {}", cc, congestion_, spin,
                     ahead, buffers);
}

std::string TcpTransport::congestion_control(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size()) || !peers_[peer].fd.valid()) return "";
  return base::congestion_control(peers_[peer].fd.get());
}

int TcpTransport::notsent_lowat(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size()) || !peers_[peer].fd.valid()) return 0;
  int bytes = 0;
  socklen_t len = sizeof(bytes);
  return getsockopt(peers_[peer].fd.get(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &bytes, &len) == 0 ? bytes : 0;
}

int TcpTransport::receive_buffer(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size()) || !peers_[peer].fd.valid()) return 0;
  int bytes = 0;
  socklen_t len = sizeof(bytes);
  return getsockopt(peers_[peer].fd.get(), SOL_SOCKET, SO_RCVBUF, &bytes, &len) == 0 ? bytes : 0;
}

void TcpTransport::setup_epoll() {
  epoll_ = base::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) base::throw_errno("epoll_create1", errno);
  wake_ = base::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) base::throw_errno("eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kWakeId;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) base::throw_errno("epoll_ctl", errno);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    ev.events = EPOLLRDHUP;
    ev.data.u32 = static_cast<uint32_t>(p);
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, peers_[p].fd.get(), &ev) != 0) base::throw_errno("epoll_ctl", errno);
  }
}

TcpTransport::~TcpTransport() { close(); }

void TcpTransport::check_usable() {
  if (aborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(abort_mu_);
    throw Error(ErrorCode::Aborted, abort_reason_);
  }
  if (failed_) throw Error(ErrorCode::Aborted, fmt::format("the communicator failed earlier: {}", failed_->message()));
}

void TcpTransport::set_interest(int peer, uint32_t bits, bool on) {
  Peer& p = peers_[peer];
  uint32_t want = on ? (p.interest | bits) : (p.interest & ~bits);
  if (want == p.interest || p.hung_up) return;
  epoll_event ev{};
  ev.events = want | EPOLLRDHUP;
  ev.data.u32 = static_cast<uint32_t>(peer);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, p.fd.get(), &ev) != 0) base::throw_errno("epoll_ctl", errno);
  p.interest = want;
}

// ---------------------------------------------------------------- sending

SendHandle TcpTransport::isend(int peer, const MessageTag& tag, const void* data, size_t len,
                               const base::Deadline& deadline, SenderWork /*work: one way to move bytes*/) {
  check_usable();
  Peer& p = peers_[peer];
  if (p.hung_up) throw_peer_error(peer, "cannot send");
  p.sent_since_receive = true;
  p.queue.push_back(SendReq{make_header(FrameKind::Data, tag, len, comm_tag_, rank_), static_cast<const char*>(data),
                            len, 0});
  uint64_t index = p.posted++;
  if (p.queue.size() == 1) progress_sends(peer);
  return SendHandle{peer, index};
}

void TcpTransport::progress_sends(int peer) {
  Peer& p = peers_[peer];
  while (!p.queue.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (auto it = p.queue.begin(); it != p.queue.end() && n + 2 <= kMaxIov; ++it) {
      size_t done = it->done;
      if (done < sizeof(FrameHeader)) {
        iov[n++] = {reinterpret_cast<char*>(&it->header) + done, sizeof(FrameHeader) - done};
        done = sizeof(FrameHeader);
      }
      size_t off = done - sizeof(FrameHeader);
      if (off < it->len) iov[n++] = {const_cast<char*>(it->data) + off, it->len - off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = ::sendmsg(p.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        set_interest(peer, EPOLLOUT, true);
        return;
      }
      if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
        p.reset = errno == ECONNRESET;
        handle_hangup(peer);
        throw_peer_error(peer, "cannot send");
      }
      base::throw_errno(fmt::format("send to rank {}", peer), errno);
    }
    size_t left = static_cast<size_t>(w);
    p.written += left;
    while (left > 0) {
      SendReq& r = p.queue.front();
      size_t rem = sizeof(FrameHeader) + r.len - r.done;
      if (left >= rem) {
        left -= rem;
        p.queue.pop_front();
        ++p.completed;
      } else {
        r.done += left;
        left = 0;
      }
    }
  }
  set_interest(peer, EPOLLOUT, false);
}

bool TcpTransport::progress() {
  bool pending = false;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || peers_[q].queue.empty() || peers_[q].hung_up) continue;
    progress_sends(q);
    pending |= !peers_[q].queue.empty();
  }
  return pending;
}

void TcpTransport::wait_send(SendHandle h, const base::Deadline& deadline) {
  Peer& p = peers_[h.peer];
  // Each wait for room in the socket (from a write that left bytes queued until the next one that moved some)
  // polls for send_spin_budget_'s time before it sleeps, where receives poll for theirs: a sender whose peer
  // takes its bytes steadily (a reduce's leaf, a broadcast's root) then refills the socket from its own CPU as
  // room frees instead of sleeping and waking late each time (docs/performance.md, "Same-host tcp sends queue
  // little").
  const bool timed = timed_spin_ && !on_background_thread();
  TimedWait wait(send_spin_budget_, cores_contended_);
  uint64_t written = p.written;
  progress_sends(h.peer);
  while (p.completed <= h.index) {
    check_usable();
    if (p.severed) throw_peer_error(h.peer, "cannot send");
    if (p.written != written) {
      written = p.written;
      wait.done();
    }
    const bool poll_more = timed && wait.poll();
    // Writes what fits when epoll reports room (progress_sends); blocks only when the poll is over.
    poll_once(deadline, -1, h.peer, "to accept our data", nullptr, /*nonblocking=*/poll_more);
    if (!poll_more) progress_sends(h.peer);
  }
  wait.done();
}

void TcpTransport::flush(const base::Deadline& deadline) {
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || peers_[q].queue.empty()) continue;
    wait_send(SendHandle{q, peers_[q].posted - 1}, deadline);
  }
}

void TcpTransport::send_raw(int peer, std::span<const std::byte> bytes, const base::Deadline& deadline) {
  Peer& p = peers_[peer];
  // In stream order: everything queued before goes first.
  if (!p.queue.empty()) wait_send(SendHandle{peer, p.posted - 1}, deadline);
  size_t off = 0;
  while (off < bytes.size()) {
    check_usable();
    if (p.hung_up || p.severed) throw_peer_error(peer, "cannot send");
    ssize_t w = ::send(p.fd.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      set_interest(peer, EPOLLOUT, true);
      poll_once(deadline, -1, peer, "to accept our data", nullptr);
      continue;
    }
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)) {
      p.reset = errno == ECONNRESET;
      handle_hangup(peer);
      throw_peer_error(peer, "cannot send");
    }
    base::throw_errno(fmt::format("send to rank {}", peer), errno);
  }
  set_interest(peer, EPOLLOUT, false);
}

void TcpTransport::sever(int peer) {
  Peer& p = peers_[peer];
  if (p.severed || !p.fd.valid()) return;
  // A zero linger turns close() into a reset: the peer's reads fail with ECONNRESET, as after a network
  // failure, and no goodbye or abort frame is sent.
  linger lg{1, 0};
  ::setsockopt(p.fd.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  if (!p.hung_up) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, p.fd.get(), nullptr);
  p.fd.reset();
  p.queue.clear();
  p.interest = 0;
  p.hung_up = true;
  p.reset = true;
  p.severed = true;
  if (!p.error) {
    p.error.emplace(ErrorCode::PeerLost,
                    fmt::format("rank {} reset its connection to rank {} (fault injection)", rank_, peer), rank_);
  }
}

// ---------------------------------------------------------------- receiving

namespace {

// Copies the first bytes of [src, src + avail) into iov: how many.
size_t copy_out(const char* src, size_t avail, const iovec* iov, int iovcnt) {
  size_t total = 0;
  for (int i = 0; i < iovcnt && total < avail; ++i) {
    size_t n = std::min(iov[i].iov_len, avail - total);
    std::memcpy(iov[i].iov_base, src + total, n);
    total += n;
    if (n < iov[i].iov_len) break;
  }
  return total;
}

}  // namespace

ssize_t TcpTransport::read_some(int peer, iovec* iov, int iovcnt, bool ahead) {
  Peer& p = peers_[peer];
  if (p.ahead_pos < p.ahead_end) {
    size_t n = copy_out(p.ahead.get() + p.ahead_pos, p.ahead_end - p.ahead_pos, iov, iovcnt);
    p.ahead_pos += n;
    return static_cast<ssize_t>(n);
  }
  if (p.stash_pos < p.stash.size()) {
    size_t n = copy_out(p.stash.data() + p.stash_pos, p.stash.size() - p.stash_pos, iov, iovcnt);
    p.stash_pos += n;
    return static_cast<ssize_t>(n);
  }
  if (p.hung_up) return 0;
  // Reading ahead: the caller's bytes first, then whatever follows them in the socket, up to the buffer's size.
  iovec with_ahead[3];
  size_t wanted = 0;
  if (ahead && read_ahead_bytes_ > 0 && iovcnt <= 2) {
    if (!p.ahead) p.ahead = std::make_unique<char[]>(read_ahead_bytes_);
    for (int i = 0; i < iovcnt; ++i) {
      with_ahead[i] = iov[i];
      wanted += iov[i].iov_len;
    }
    with_ahead[iovcnt] = {p.ahead.get(), read_ahead_bytes_};
    iov = with_ahead;
    ++iovcnt;
  } else {
    ahead = false;
  }
  while (true) {
    ssize_t n = ::readv(p.fd.get(), iov, iovcnt);
    if (n >= 0) {
      if (ahead && static_cast<size_t>(n) > wanted) {
        p.ahead_pos = 0;
        p.ahead_end = static_cast<size_t>(n) - wanted;
        return static_cast<ssize_t>(wanted);
      }
      return n;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return -1;
    if (errno == ECONNRESET || errno == ENOTCONN || errno == EPIPE) {
      p.reset = true;
      return 0;
    }
    base::throw_errno(fmt::format("receive from rank {}", peer), errno);
  }
}

void TcpTransport::recv(int peer, const MessageTag& tag, void* dst, size_t len, const base::Deadline& deadline) {
  receive(peer, tag, static_cast<char*>(dst), len, nullptr, nullptr, deadline);
}

void TcpTransport::recv_reduce(int peer, const MessageTag& tag, void* dst, const void* local, size_t len,
                               const Reduction& reduction, const base::Deadline& deadline) {
  receive(peer, tag, static_cast<char*>(dst), len, &reduction, static_cast<const char*>(local), deadline);
}

void TcpTransport::receive(int peer, const MessageTag& tag, char* dst, size_t len, const Reduction* reduction,
                           const char* local, const base::Deadline& deadline) {
  check_usable();
  Peer& p = peers_[peer];
  if (p.error) throw *p.error;

  FrameHeader h;
  size_t hgot = 0;
  // Payload goes straight to dst, or through the staging piece when it has to be reduced. The header and
  // the start of the payload are read together (one readv for a small message); the header is checked
  // before any payload byte is used.
  size_t done = 0;  // payload bytes finished (written or reduced)
  size_t piece = reduction ? std::min(len, kStagingBytes) : len;
  size_t pgot = 0;
  char* pdst = reduction ? staging_.get() : dst;
  // A small frame reads ahead (TcpOptions::read_ahead_bytes): where the peer's frames queue up, as when a root
  // runs ahead of a chain of broadcasts, the next ones then cost no syscall. A large one reads only its own
  // bytes, so that its payload is never copied twice.
  const bool read_ahead = len <= read_ahead_bytes_ / 4;
  int spins = 0;
  // Each wait of a receive polls for a SpinBudget's time: from its first empty poll until it
  // sleeps; once it has slept, the time it took teaches the budget (transport/spin_budget.h). Small receives
  // and large ones keep budgets of their own: a large receive waits once per gap between the peer's segments,
  // and in a chain of sleeping waits (below) for the peer's late start.
  const bool small = len <= kTimedSpinMaxBytes;
  const bool timed = timed_spin_ && !on_background_thread();
  TimedWait wait(small ? spin_budget_ : large_spin_budget_, cores_contended_);
  // Whether to read the socket now. After a read found it empty, a small one-way receive's wait reads it again
  // only once epoll says it is readable (or every kReadEveryPolls polls regardless): an empty readv takes the
  // socket's lock, which the peer's delivery of the frame we wait for also takes, and where the peer streams
  // frames to us (a broadcast's root, a reduce's leaf) a receive that polled by reading slowed it. One-way: we
  // sent the peer nothing since our last receive from it. In an exchange (we just sent to it too) the peer is
  // not the one held up, and the extra epoll_wait before the read only added to each call. A large receive's
  // wait reads at each of its first kLargeReadPolls polls as well, since between its segments that extra syscall
  // cost more than the contention (docs/performance.md, "One-way tcp receives poll epoll, not the socket"); past
  // them it waits for the peer, and reads only once epoll says so: polling for the budget's time by reading
  // left 2-rank all_reduces slow in 2 of 12 runs against 0 ("Large tcp receives poll for a time too").
  const bool gate_reads = small && !p.sent_since_receive;
  p.sent_since_receive = false;
  bool try_read = true;
  uint32_t unread_polls = 0;
  while (true) {
    iovec iov[2];
    int n = 0;
    if (hgot < sizeof(h)) iov[n++] = {reinterpret_cast<char*>(&h) + hgot, sizeof(h) - hgot};
    if (pgot < piece) iov[n++] = {pdst + pgot, piece - pgot};
    if (n > 0) {
      const bool buffered = p.ahead_pos < p.ahead_end || p.stash_pos < p.stash.size() || p.hung_up;
      const bool gated = gate_reads || (timed && !small && wait.polls() > kLargeReadPolls);
      ssize_t r = !gated || try_read || buffered || ++unread_polls % kReadEveryPolls == 0
                      ? read_some(peer, iov, n, read_ahead)
                      : -1;
      if (r < 0) {
        bool poll_more;
        if (timed) {
          poll_more = wait.poll();
        } else {
          poll_more = spins < spin_;
          if (poll_more) ++spins;
        }
        if (poll_more) {
          if (yield_) sched_yield();
          try_read = poll_once(deadline, peer, peer, "data", &tag, /*nonblocking=*/true);  // keeps our sends moving
        } else {
          try_read = poll_once(deadline, peer, peer, "data", &tag);
        }
        continue;
      }
      try_read = true;
      wait.done();
      if (r == 0) {
        handle_hangup(peer);
        if (hgot > 0 && (hgot < sizeof(h) || done + pgot < len) && !p.goodbye) {
          // The stream ended inside this frame: whatever follows in the stash cannot be parsed.
          std::string detail = hgot < sizeof(h)
                                   ? fmt::format("its last bytes were not a complete frame (the stream ended after "
                                                 "{} of the {} header bytes)",
                                                 hgot, sizeof(h))
                                   : fmt::format("the stream ended inside a frame ({} of {} payload bytes)",
                                                 done + pgot, len);
          if (p.reset) detail += "; connection reset";
          p.error.emplace(peer_closed_error(rank_, peer, false, detail));
        }
        throw_peer_error(peer, "waiting for data");
      }
      size_t got = static_cast<size_t>(r);
      size_t to_header = std::min(got, sizeof(h) - hgot);
      bool header_completed = to_header > 0 && hgot + to_header == sizeof(h);
      hgot += to_header;
      pgot += got - to_header;
      if (header_completed) {
        if (!header_intact(h) || h.kind != static_cast<uint8_t>(FrameKind::Data)) {
          on_unexpected_frame(peer, h, tag, len, pdst, pgot, deadline);
          check_data_frame(h, tag, len, comm_tag_, rank_, peer);
        } else {
          check_intact_data_frame(h, tag, len, comm_tag_, rank_, peer);
        }
      }
    }
    if (hgot == sizeof(h) && pgot == piece) {
      if (reduction && piece > 0) reduction->apply(dst + done, staging_.get(), local + done, piece);
      done += piece;
      if (done == len) return;
      piece = reduction ? std::min(len - done, kStagingBytes) : len - done;
      pgot = 0;
      pdst = reduction ? staging_.get() : dst + done;
    }
  }
}

void TcpTransport::on_unexpected_frame(int peer, const FrameHeader& h, const MessageTag& tag, size_t len,
                                       const char* spilled, size_t spilled_len, const base::Deadline& deadline) {
  Peer& p = peers_[peer];
  if (header_intact(h) && h.comm_tag == comm_tag_ && h.kind == static_cast<uint8_t>(FrameKind::Goodbye)) {
    p.goodbye = true;
    throw peer_closed_error(rank_, peer, true, fmt::format("this rank is in {}", describe(tag)));
  }
  if (header_intact(h) && h.comm_tag == comm_tag_ && h.kind == static_cast<uint8_t>(FrameKind::Abort) &&
      h.length <= 64 * 1024) {
    // Part of the abort message may already sit in the receive buffer; read the rest (bounded).
    std::string payload(spilled, std::min<size_t>(spilled_len, h.length));
    if (payload.size() < h.length) {
      std::string rest(h.length - payload.size(), '\0');
      auto dl = base::Deadline::after(std::chrono::milliseconds(500));
      base::Deadline bounded = dl.at() < deadline.at() ? dl : deadline;
      size_t got = 0;
      while (got < rest.size()) {
        iovec iov{rest.data() + got, rest.size() - got};
        ssize_t r = read_some(peer, &iov, 1);
        if (r > 0) {
          got += static_cast<size_t>(r);
        } else if (r == 0 || bounded.expired()) {
          break;
        } else {
          pollfd pf{p.fd.get(), POLLIN, 0};
          ::poll(&pf, 1, bounded.poll_timeout_ms(50));
        }
      }
      payload += rest.substr(0, got);
    }
    int code = 0, culprit = -1;
    std::string message;
    if (decode_abort(payload.data(), payload.size(), &code, &culprit, &message)) {
      p.error.emplace(static_cast<ErrorCode>(code),
                      fmt::format("rank {} aborted the communicator: {}", peer, message), culprit >= 0 ? culprit : peer);
      throw *p.error;
    }
  }
  // Corrupted or foreign: check_data_frame produces the precise error.
  check_data_frame(h, tag, len, comm_tag_, rank_, peer);
  throw Error(ErrorCode::Internal, fmt::format("unexpected frame kind {} from rank {}", h.kind, peer), peer);
}

// ---------------------------------------------------------------- waiting and failures

bool TcpTransport::poll_once(const base::Deadline& deadline, int reading_peer, int waiting_peer, const char* what,
                             const MessageTag* tag, bool nonblocking) {
  if (reading_peer >= 0) set_interest(reading_peer, EPOLLIN, true);
  // In a hybrid, the shared-memory side's queued sends move between our waits, which stay short meanwhile.
  const bool external_busy = external_progress_ && external_progress_();
  epoll_event events[64];
  int n = ::epoll_wait(epoll_.get(), events, 64,
                       nonblocking ? 0 : deadline.poll_timeout_ms(external_busy ? 1 : 1000));
  if (n < 0) {
    if (errno == EINTR) return true;
    base::throw_errno("epoll_wait", errno);
  }
  if (n == 0) {
    if (nonblocking) return false;
    if (!external_busy) stalled();
    if (deadline.expired()) {
      throw Error(ErrorCode::Timeout,
                  fmt::format("rank {} timed out waiting for rank {} ({}{}); rank {} may be stuck, dead without "
                              "closing its connections, or calling collectives in a different order",
                              rank_, waiting_peer, what, tag ? " in " + describe(*tag) : std::string(), waiting_peer),
                  waiting_peer);
    }
    return false;
  }
  bool readable = false;
  for (int i = 0; i < n; ++i) {
    uint32_t id = events[i].data.u32;
    uint32_t ev = events[i].events;
    if (id == kWakeId) {
      uint64_t v;
      while (::read(wake_.get(), &v, sizeof(v)) > 0) {
      }
      check_usable();
      continue;
    }
    int q = static_cast<int>(id);
    if (q < 0 || q >= size_ || peers_[q].hung_up) continue;
    // Data, or the stream's end: the caller's read finds out which.
    if (q == reading_peer && (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) readable = true;
    if (ev & EPOLLOUT) progress_sends(q);
    if (q != reading_peer && (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
      handle_hangup(q);
      if (peers_[q].error) throw *peers_[q].error;
      continue;
    }
    if ((ev & EPOLLIN) && q != reading_peer) set_interest(q, EPOLLIN, false);
  }
  return readable;
}

void TcpTransport::handle_hangup(int peer) {
  Peer& p = peers_[peer];
  if (p.hung_up) return;
  // The peer will send nothing more: read what is left of its stream so we learn whether it said goodbye,
  // aborted, or died. The amount is bounded by the socket buffers.
  std::string tail;
  char buf[64 * 1024];
  while (true) {
    ssize_t n = ::recv(p.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      tail.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      // EPOLLHUP/ERR without the end of the stream yet: the socket is broken (e.g. reset mid-way).
      if (!p.reset) {
        int err = 0;
        socklen_t elen = sizeof(err);
        getsockopt(p.fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
        if (err == 0) return;  // spurious; keep the connection
        p.reset = true;
      }
      break;
    }
    p.reset = true;
    break;
  }
  p.hung_up = true;
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, p.fd.get(), nullptr);
  p.interest = 0;
  // What the stream still holds, in its order: bytes read ahead and not yet taken, then the tail.
  p.stash.erase(0, p.stash_pos);
  p.stash_pos = 0;
  if (p.ahead_pos < p.ahead_end) p.stash.append(p.ahead.get() + p.ahead_pos, p.ahead_end - p.ahead_pos);
  p.ahead_pos = p.ahead_end = 0;
  p.stash += tail;

  // Walk the frames left in the stream. Nothing in a header is trusted before its checksum and tag are.
  size_t pos = 0;
  while (pos + sizeof(FrameHeader) <= p.stash.size()) {
    FrameHeader h;
    std::memcpy(&h, p.stash.data() + pos, sizeof(h));
    if (!header_intact(h) || h.comm_tag != comm_tag_) {
      // The peer is gone either way; what is left does not parse as frames (seen, rarely, when a process is
      // killed in the middle of a write). Report the loss, and say the tail was unreadable.
      p.error.emplace(peer_closed_error(rank_, peer, false, "its last bytes were not a complete frame"));
      return;
    }
    if (h.kind == static_cast<uint8_t>(FrameKind::Goodbye)) {
      p.goodbye = true;
      return;
    }
    if (h.kind == static_cast<uint8_t>(FrameKind::Abort)) {
      int code = 0, culprit = -1;
      std::string message;
      size_t avail = std::min<size_t>(h.length, p.stash.size() - pos - sizeof(h));
      if (decode_abort(p.stash.data() + pos + sizeof(h), avail, &code, &culprit, &message)) {
        p.error.emplace(static_cast<ErrorCode>(code),
                        fmt::format("rank {} aborted the communicator: {}", peer, message),
                        culprit >= 0 ? culprit : peer);
      } else {
        p.error.emplace(ErrorCode::Aborted, fmt::format("rank {} aborted the communicator", peer), peer);
      }
      return;
    }
    if (h.length > p.stash.size() - pos - sizeof(FrameHeader)) break;  // the stream ended inside this frame
    pos += sizeof(FrameHeader) + h.length;
  }
  std::string detail = pos < p.stash.size() ? "its last bytes were not a complete frame" : "";
  if (p.reset) detail += detail.empty() ? "connection reset" : "; connection reset";
  p.error.emplace(peer_closed_error(rank_, peer, false, detail));
}

void TcpTransport::check_peers() {
  check_usable();
  // Only hang-ups and errors are armed on idle sockets, so this usually returns no event. A syscall costs about
  // 1 us here, a third of a small broadcast's call: look at most once per coarse-clock tick (1-4 ms). A peer
  // that hung up since is still found by the next send (EPIPE, ECONNRESET) or wait (the epoll events).
  const auto now = base::coarse_now();
  if (now < next_socket_check_) {
    for (int q = 0; q < size_; ++q) {
      if (q != rank_ && peers_[q].error) throw *peers_[q].error;
    }
    return;
  }
  next_socket_check_ = now + std::chrono::microseconds(500);
  epoll_event events[16];
  int n = ::epoll_wait(epoll_.get(), events, 16, 0);
  for (int i = 0; i < n; ++i) {
    uint32_t id = events[i].data.u32;
    if (id == kWakeId) {
      check_usable();
      continue;
    }
    int q = static_cast<int>(id);
    if (q < 0 || q >= size_ || peers_[q].hung_up) continue;
    if (events[i].events & EPOLLOUT) progress_sends(q);
    if (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) handle_hangup(q);
    if ((events[i].events & EPOLLIN) && !(events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
      set_interest(q, EPOLLIN, false);  // data for a later receive; leave it in the socket
    }
  }
  for (int q = 0; q < size_; ++q) {
    if (q != rank_ && peers_[q].error) throw *peers_[q].error;
  }
}

void TcpTransport::throw_peer_error(int peer, const char* context) {
  Peer& p = peers_[peer];
  if (p.error) throw *p.error;
  throw peer_closed_error(rank_, peer, p.goodbye, context);
}

void TcpTransport::fail(const Error& error) noexcept {
  if (failed_ || closed_) return;
  failed_.emplace(error);
  std::string payload = encode_abort(static_cast<int>(error.code()), error.peer(), error.message());
  MessageTag none;
  FrameHeader h = make_header(FrameKind::Abort, none, payload.size(), comm_tag_, rank_);
  auto deadline = base::Deadline::after(std::chrono::milliseconds(200));
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    Peer& p = peers_[q];
    if (!p.fd.valid()) continue;
    if (!p.hung_up) {
      try {
        // A frame already half on the wire must be finished first, or the abort would land inside it; if
        // that cannot be done in time the peer will see the connection close instead.
        bool clean = true;
        if (!p.queue.empty() && p.queue.front().done > 0) {
          SendReq& r = p.queue.front();
          const char* hb = reinterpret_cast<const char*>(&r.header);
          if (r.done < sizeof(FrameHeader)) {
            clean = base::write_full(p.fd.get(), hb + r.done, sizeof(FrameHeader) - r.done, deadline) ==
                    base::IoStatus::Ok;
            r.done = sizeof(FrameHeader);
          }
          size_t off = r.done - sizeof(FrameHeader);
          clean = clean && base::write_full(p.fd.get(), r.data + off, r.len - off, deadline) == base::IoStatus::Ok;
        }
        if (clean && base::write_full(p.fd.get(), &h, sizeof(h), deadline) == base::IoStatus::Ok) {
          base::write_full(p.fd.get(), payload.data(), payload.size(), deadline);
        }
      } catch (const std::exception&) {
      }
    }
    p.queue.clear();
    ::shutdown(p.fd.get(), SHUT_WR);
  }
}

void TcpTransport::abort(const std::string& reason) noexcept {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    abort_reason_ = reason;
  }
  aborted_.store(true, std::memory_order_release);
  uint64_t one = 1;
  if (wake_.valid()) [[maybe_unused]] auto r = ::write(wake_.get(), &one, sizeof(one));
}

void TcpTransport::close() noexcept {
  if (closed_) return;
  closed_ = true;
  if (!failed_ && !aborted_.load()) {
    try {
      flush(base::Deadline::after(std::chrono::seconds(2)));
    } catch (const std::exception& e) {
      base::log_debug("tcp close: unflushed sends dropped: {}", e.what());
    }
    MessageTag none;
    FrameHeader bye = make_header(FrameKind::Goodbye, none, 0, comm_tag_, rank_);
    auto deadline = base::Deadline::after(std::chrono::milliseconds(200));
    for (int q = 0; q < size_; ++q) {
      Peer& p = peers_[q];
      if (q == rank_ || !p.fd.valid() || p.hung_up || !p.queue.empty()) continue;
      try {
        base::write_full(p.fd.get(), &bye, sizeof(bye), deadline);
      } catch (const std::exception&) {
      }
    }
  }
  for (int q = 0; q < size_; ++q) {
    Peer& p = peers_[q];
    if (q == rank_ || !p.fd.valid()) continue;
    ::shutdown(p.fd.get(), SHUT_WR);
    // Unread bytes at close() would turn our FIN into a reset, which can destroy data the peer has not read
    // yet; drain what is there.
    char buf[4096];
    while (::recv(p.fd.get(), buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
    p.fd.reset();
  }
}

}  // namespace chorus::transport
