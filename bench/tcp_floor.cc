// A 2-rank float32 sum all_reduce over loopback TCP with no library, no framing and no protocol, written to be
// a floor for Chorus's tcp transport (docs/performance.md, "2-rank tcp all_reduce: medians over alternating
// runs, and a protocol-free exchange": on the forty-fourth session's host it was not one; Chorus's all_reduce
// took 0.4-0.9 of its time at 1 MiB in alternating runs). Two processes (this one and a forked child) joined by one TCP
// connection over 127.0.0.1, set up as Chorus sets up a same-host connection (TCP_NODELAY, reno congestion control, the
// kernel's buffer autotuning), repeat what any 2-rank all_reduce over that connection must do on the same buffers each
// call: each rank sends the half of its input that the peer reduces (K/2 bytes), receives the peer's contribution to
// its own half, reduces, sends its reduced half and receives the peer's. That is 2(N-1)/N x K = K bytes each way per
// call, the least any all_reduce moves (Patarasuk and Yuan).
//
// Both directions of the connection are driven from one thread with non-blocking send and recv, and poll when
// neither moved (-m spin: retry at once instead): the outgoing stream is the peer's half of the input, then the
// reduced own half piece by piece as soon as each piece has arrived and been reduced; the incoming stream is
// read into a staging buffer (the peer's contribution) and then straight into the receive buffer (the peer's
// reduced half). Variants:
//   move        the bytes alone: the same streams, with the reduction left out.
//   whole       the reduction in one pass once the whole contribution has arrived (no overlap).
//   P pieces    the reduction piece by piece, P = 64K, 256K: each piece is reduced and sent on as it lands.
//   64K staging the pieces' way, the contribution read into one 64 KiB buffer (in cache) piece after piece,
//               as Chorus's tcp transport receives what it reduces.
//   send first  as a blocking library takes each step: send all that goes, then receive (reading only while
//               a send cannot go on), reduce, then the same for the reduced halves.
//   send, 64K staging  both: the contribution read piece by piece into one 64 KiB buffer and reduced from there
//               while the send goes on, as Chorus's ring takes its steps.
//
//   build/bin/tcp_floor [-b MIN] [-e MAX] [-t SECONDS] [-s SOCKET_BUFFER_BYTES] [-m poll|spin] [-r READ_LIMIT]
// Prints, per size (bytes per rank), the median over 5 rounds of each variant's time per call in
// microseconds. Compare with `CHORUS_TRANSPORT=tcp chorus-run -n 2 -- chorus-perf allreduce --rotate 0 -R 0`
// and Open MPI's tcp, alternating (docs/data/s44/tcp-floor-ab.sh).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/net.h"
#include "base/units.h"
#include "chorus/types.h"
#include "kernels/reduce.h"
#include "transport/tcp/tcp_transport.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// As the tcp transport sets up a same-host connection (src/transport/tcp/tcp_transport.cc).
void set_options(int fd, int buffer_bytes) {
  chorus::base::set_nodelay(fd);
  chorus::base::set_congestion_control(fd, chorus::transport::TcpTransport::kSameHostCongestion);
  chorus::base::set_buffer_sizes(fd, buffer_bytes);
}

// Sends one byte and waits for the peer's: a barrier over the connection (every stream is drained by then).
void exchange_token(int fd) {
  char c = 0;
  if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) die("send");
  while (::recv(fd, &c, 1, MSG_WAITALL) != 1) {
    if (errno != EINTR && errno != EAGAIN) die("recv");
  }
}

enum Variant { kMove, kWhole, kPieces64K, kPieces256K, kSendFirst, kStaged64K, kSendFirstStaged, kVariants };
const char* kNames[kVariants] = {"move",       "whole",       "64K pieces",       "256K pieces",
                                 "send first", "64K staging", "send, 64K staging"};

struct Rank {
  int r;
  int fd;
  char* send;
  char* recv;
  char* staging;
  chorus::kernels::ReduceFn sum;
  bool wait;          // poll when neither direction moved, instead of spinning
  size_t read_limit;  // the most one recv asks for (0: all that is left of the segment)

  size_t cap(size_t len) const { return read_limit > 0 ? std::min(len, read_limit) : len; }

  // Sends all of [src, src + len) before reading anything, then reads all of [dst, dst + len): a step as a
  // blocking library takes it (send posted first, then the receive).
  // With `reduce_into`, what arrives is read into the 64 KiB staging buffer piece by piece and each piece
  // reduced into reduce_into (with reduce_with) as soon as it is complete.
  void send_then_recv(const char* src, size_t out_len, char* dst, size_t in_len, char* reduce_into = nullptr,
                      const char* reduce_with = nullptr) {
    if (reduce_into) {
      const size_t piece = 64 << 10;
      size_t out = 0;
      for (size_t off = 0; off < in_len; off += piece) {
        const size_t m = std::min(piece, in_len - off);
        size_t in = 0;
        while (in < m) {
          if (out < out_len) {
            ssize_t n = ::send(fd, src + out, out_len - out, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) out += static_cast<size_t>(n);
          }
          ssize_t k = ::recv(fd, staging + in, cap(m - in), MSG_DONTWAIT);
          if (k > 0) {
            in += static_cast<size_t>(k);
          } else if (k == 0) {
            die("peer hung up");
          } else if (wait) {
            pollfd p{fd, static_cast<short>(POLLIN | (out < out_len ? POLLOUT : 0)), 0};
            ::poll(&p, 1, 100);
          }
        }
        sum(reduce_into + off, reduce_with + off, staging, m / 4);
      }
      while (out < out_len) {
        ssize_t n = ::send(fd, src + out, out_len - out, wait ? MSG_NOSIGNAL : MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) out += static_cast<size_t>(n);
      }
      return;
    }
    size_t out = 0, in = 0;
    while (out < out_len) {
      ssize_t n = ::send(fd, src + out, out_len - out, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        out += static_cast<size_t>(n);
      } else if (errno == EAGAIN) {  // the buffers are full both ways: read to let the peer's send go on
        ssize_t m = ::recv(fd, dst + in, cap(in_len - in), MSG_DONTWAIT);
        if (m > 0) in += static_cast<size_t>(m);
      } else if (errno != EINTR) {
        die("send");
      }
    }
    while (in < in_len) {
      ssize_t m = ::recv(fd, dst + in, cap(in_len - in), wait ? 0 : MSG_DONTWAIT);
      if (m > 0)
        in += static_cast<size_t>(m);
      else if (m == 0)
        die("peer hung up");
      else if (errno != EAGAIN && errno != EINTR)
        die("recv");
    }
  }

  // One all_reduce of `bytes` per rank.
  void run(Variant v, size_t bytes) {
    const size_t half = bytes / 2;
    const size_t my_len = r == 0 ? half : bytes - half, their_len = bytes - my_len;
    const size_t mine = r == 0 ? 0 : half, theirs = r == 0 ? half : 0;
    if (v == kSendFirstStaged) {
      send_then_recv(send + theirs, their_len, nullptr, my_len, recv + mine, send + mine);
      send_then_recv(recv + mine, my_len, recv + theirs, their_len);
      return;
    }
    if (v == kSendFirst) {
      send_then_recv(send + theirs, their_len, staging, my_len);
      sum(recv + mine, send + mine, staging, my_len / 4);
      send_then_recv(recv + mine, my_len, recv + theirs, their_len);
      return;
    }
    const bool staged = v == kStaged64K;  // the contribution lands in one 64 KiB buffer, piece after piece
    const size_t piece = v == kPieces64K || staged ? (64 << 10) : v == kPieces256K ? (256 << 10) : my_len;
    // Outgoing stream: [their_len: send + theirs][my_len: recv + mine, once reduced]
    // Incoming stream: [my_len: into staging][their_len: into recv + theirs]
    const size_t out_total = their_len + my_len, in_total = my_len + their_len;
    size_t out_done = 0, in_done = 0, reduced = 0;
    bool send_blocked = false;  // the last send found the buffer full: wait for POLLOUT before trying again
    while (out_done < out_total || in_done < in_total) {
      bool progressed = false;
      // Reduce what has arrived, in whole pieces (or the tail).
      while (reduced < my_len && std::min(in_done, my_len) >= std::min(reduced + piece, my_len)) {
        const size_t m = std::min(piece, my_len - reduced);
        if (v != kMove) sum(recv + mine + reduced, send + mine + reduced, staging + (staged ? 0 : reduced), m / 4);
        reduced += m;
      }
      const size_t out_ready = their_len + reduced;
      if (out_done < out_ready && !(send_blocked && wait)) {
        const char* src = out_done < their_len ? send + theirs + out_done : recv + mine + (out_done - their_len);
        const size_t len = out_done < their_len ? their_len - out_done : out_ready - out_done;
        ssize_t n = ::send(fd, src, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
          out_done += static_cast<size_t>(n);
          progressed = true;
        } else if (n < 0 && errno == EAGAIN) {
          send_blocked = true;
        } else if (n < 0 && errno != EINTR) {
          die("send");
        }
      }
      if (in_done < in_total) {
        char* dst =
            in_done < my_len ? staging + (staged ? in_done - reduced : in_done) : recv + theirs + (in_done - my_len);
        const size_t len =
            in_done < my_len ? (staged ? std::min(reduced + piece, my_len) : my_len) - in_done : in_total - in_done;
        ssize_t n = ::recv(fd, dst, cap(len), MSG_DONTWAIT);
        if (n > 0) {
          in_done += static_cast<size_t>(n);
          progressed = true;
        } else if (n == 0) {
          std::fprintf(stderr, "rank %d: the peer hung up\n", r);
          std::exit(1);
        } else if (errno != EAGAIN && errno != EINTR) {
          die("recv");
        }
      }
      if (!progressed && wait) {
        pollfd p{fd,
                 static_cast<short>((in_done < in_total ? POLLIN : 0) | (out_done < their_len + reduced ? POLLOUT : 0)),
                 0};
        if (::poll(&p, 1, 100) > 0 && (p.revents & POLLOUT)) send_blocked = false;
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  size_t min_bytes = 256 << 10, max_bytes = 16 << 20;
  double seconds = 0.5;
  int buffer_bytes = 0;
  bool wait = true;
  size_t read_limit = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    std::optional<size_t> size = chorus::base::parse_size(argv[i + 1]);
    if (a == "-b" && size)
      min_bytes = *size;
    else if (a == "-e" && size)
      max_bytes = *size;
    else if (a == "-r" && size)
      read_limit = *size;
    else if (a == "-s" && size)
      buffer_bytes = static_cast<int>(*size);
    else if (a == "-t")
      seconds = std::atof(argv[i + 1]);
    else if (a == "-m" && (std::string(argv[i + 1]) == "poll" || std::string(argv[i + 1]) == "spin"))
      wait = std::string(argv[i + 1]) == "poll";
    else {
      std::fprintf(stderr,
                   "usage: %s [-b MIN] [-e MAX] [-t SECONDS] [-s SOCKET_BUFFER_BYTES] [-m poll|spin] [-r READ_LIMIT]\n",
                   argv[0]);
      return 2;
    }
  }
  min_bytes = std::max<size_t>(min_bytes & ~size_t{127}, 128);
  max_bytes = std::max(max_bytes, min_bytes);

  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die("listen");
  pid_t child = fork();
  if (child < 0) die("fork");
  const int r = child == 0 ? 1 : 0;
  int fd = -1;
  if (r == 1) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    set_options(fd, buffer_bytes);  // buffer sizes before connect, so the window scale fits them
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("connect");
  } else {
    set_options(listener, buffer_bytes);
    fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) die("accept");
    set_options(fd, buffer_bytes);
  }
  ::close(listener);

  std::vector<float> send(max_bytes / 4 + 1), recv(max_bytes / 4 + 1), staging(max_bytes / 4 + 1);
  Rank rank{r,
            fd,
            reinterpret_cast<char*>(send.data()),
            reinterpret_cast<char*>(recv.data()),
            reinterpret_cast<char*>(staging.data()),
            chorus::kernels::reduce_fn(chorus::DataType::Float32, chorus::ReduceOp::Sum),
            wait,
            read_limit};
  if (r == 0) {
    std::printf(
        "# tcp_floor: 2 processes, one loopback TCP connection (reno, TCP_NODELAY, buffers %s), float32 sum, "
        "same buffers every call; kernels %s\n",
        buffer_bytes > 0 ? std::to_string(buffer_bytes).c_str() : "autotuned",
        chorus::kernels::isa_name(chorus::kernels::active_isa()));
    std::printf("# time per call in us, median of 5 rounds of about %.2f s / 5 each\n", seconds);
    std::printf("%12s", "bytes");
    for (const char* name : kNames) std::printf(" %12s", name);
    std::printf("\n");
  }
  bool ok = true;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    double median[kVariants];
    for (int v = 0; v < kVariants; ++v) {
      const size_t n = bytes / 4;
      std::fill(send.begin(), send.begin() + static_cast<long>(n), static_cast<float>(r + 1));
      std::fill(recv.begin(), recv.begin() + static_cast<long>(n), 0.0f);
      exchange_token(fd);
      for (int i = 0; i < 5; ++i) rank.run(static_cast<Variant>(v), bytes);  // warm-up
      // Rank 0 picks the iteration count from a timed probe and tells rank 1, so both run the same number.
      uint64_t iters = 0;
      if (r == 0) {
        exchange_token(fd);
        auto t0 = Clock::now();
        for (int i = 0; i < 5; ++i) rank.run(static_cast<Variant>(v), bytes);
        double per = std::chrono::duration<double>(Clock::now() - t0).count() / 5;
        iters = std::max<uint64_t>(3, static_cast<uint64_t>(seconds / 5 / per));
        if (::send(fd, &iters, sizeof(iters), MSG_NOSIGNAL) != sizeof(iters)) die("send");
      } else {
        exchange_token(fd);
        for (int i = 0; i < 5; ++i) rank.run(static_cast<Variant>(v), bytes);
        if (::recv(fd, &iters, sizeof(iters), MSG_WAITALL) != sizeof(iters)) die("recv");
      }
      std::vector<double> rounds;
      for (int round = 0; round < 5; ++round) {
        exchange_token(fd);
        auto t0 = Clock::now();
        for (uint64_t i = 0; i < iters; ++i) rank.run(static_cast<Variant>(v), bytes);
        rounds.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                         static_cast<double>(iters));
      }
      std::sort(rounds.begin(), rounds.end());
      median[v] = rounds[2];
      if (v != kMove) {
        // Every element of the result is 1 + 2 = 3.
        for (size_t i = 0; i < n; ++i) {
          if (recv[i] != 3.0f) {
            std::fprintf(stderr, "rank %d: %s gave %g at element %zu of %zu bytes\n", r, kNames[v],
                         static_cast<double>(recv[i]), i, bytes);
            ok = false;
            break;
          }
        }
      }
    }
    if (r == 0) {
      std::printf("%12zu", bytes);
      for (double m : median) std::printf(" %12.1f", m);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  ::close(fd);
  if (r == 1) return ok ? 0 : 1;
  int status = 0;
  waitpid(child, &status, 0);
  return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
