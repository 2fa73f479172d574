// The floor under any 2-rank all_reduce over TCP on this host: two processes on one loopback connection (as
// Chorus's tcp transport makes it: TCP_NODELAY, reno, kernel-tuned buffers), each sending BYTES to the other
// and receiving BYTES from it at once, non-blocking, nothing else. An all_reduce of K bytes must move at least
// (N-1)/N x 2K = K bytes each way per rank at N = 2, so `exchange K` bounds it from below; `halves K` adds the
// two-phase shape (K/2 each way, a sum of K/2 floats, K/2 each way again) that every 2-rank algorithm of
// Chorus's runs.
//   g++ -O3 -march=native -std=c++20 -o /tmp/tcp-floor docs/data/s57/tcp-exchange-floor.cc
//   /tmp/tcp-floor BYTES ITERS     (prints median and quartiles of both shapes, microseconds per call)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static void die(const char* what) {
  perror(what);
  exit(1);
}

// Sends `n` bytes of `out` and receives `n` bytes into `in` on one non-blocking socket, both at once.
static void exchange(int fd, const char* out, char* in, size_t n) {
  size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    bool moved = false;
    if (sent < n) {
      ssize_t w = send(fd, out + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0)
        sent += w, moved = true;
      else if (w < 0 && errno != EAGAIN)
        die("send");
    }
    if (got < n) {
      ssize_t r = recv(fd, in + got, n - got, MSG_DONTWAIT);
      if (r > 0)
        got += r, moved = true;
      else if (r == 0) {
        fprintf(stderr, "peer closed\n");
        exit(1);
      } else if (errno != EAGAIN)
        die("recv");
    }
    (void)moved;  // poll without sleeping, as a spinning library would: the floor, not a policy
  }
}

static void run(int fd, int rank, size_t bytes, int iters) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "reno", 4);
  if (const char* rb = getenv("RCVBUF")) {  // a fixed receive buffer, as Chorus now gives same-host connections
    int bytes = atoi(rb);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
  std::vector<float> a(bytes / 4, 1.0f + rank), b(bytes / 4), tmp(bytes / 4);
  const size_t half = bytes / 2, hf = half / 4;
  auto once = [&](bool halves) {
    if (!halves) {
      exchange(fd, (char*)a.data(), (char*)b.data(), bytes);
      return;
    }
    // Rank 0 keeps the first half, rank 1 the second: send the other's half, sum ours, send it back.
    float* mine = a.data() + (rank == 0 ? 0 : hf);
    float* theirs = a.data() + (rank == 0 ? hf : 0);
    exchange(fd, (char*)theirs, (char*)tmp.data(), half);
    float* out_mine = b.data() + (rank == 0 ? 0 : hf);
    for (size_t i = 0; i < hf; ++i) out_mine[i] = mine[i] + tmp[i];
    exchange(fd, (char*)out_mine, (char*)(b.data() + (rank == 0 ? hf : 0)), half);
  };
  if (const char* w = getenv("WARM_BYTES")) {  // exchanges of this size first, as chorus-perf's warm-up at -e does
    const size_t wb = strtoull(w, nullptr, 0);
    std::vector<char> wo(wb), wi(wb);
    for (int i = 0; i < 5; ++i) exchange(fd, wo.data(), wi.data(), wb);
  }
  for (int shape = 0; shape < 2; ++shape) {
    std::vector<double> t;
    for (int i = 0; i < 20; ++i) once(shape);
    for (int i = 0; i < iters; ++i) {
      char c = 0, d;
      exchange(fd, &c, &d, 1);  // start together
      auto t0 = std::chrono::steady_clock::now();
      once(shape);
      t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    if (shape == 1 && b[0] != 3.0f) {
      fprintf(stderr, "wrong sum %f\n", b[0]);
      exit(1);
    }
    if (rank == 0 && getenv("BLOCKS")) {  // means of consecutive blocks of 20 calls, as chorus-perf -n 20 times
      std::vector<double> m;
      for (size_t i = 0; i + 20 <= t.size(); i += 20) {
        double s = 0;
        for (size_t j = i; j < i + 20; ++j) s += t[j];
        m.push_back(s / 20);
      }
      std::sort(m.begin(), m.end());
      printf("%-8s %9zu B  blocks of 20: min %.1f p10 %.1f median %.1f p90 %.1f max %.1f us (%zu blocks)\n",
             shape ? "halves" : "exchange", bytes, m[0], m[m.size() / 10], m[m.size() / 2], m[m.size() * 9 / 10],
             m.back(), m.size());
    }
    std::sort(t.begin(), t.end());
    tcp_info ti{};
    socklen_t tl = sizeof(ti);
    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl);
    if (rank == 0)
      printf("%-8s %9zu B  median %8.1f us  (quartiles %.1f-%.1f)  cwnd %u\n", shape ? "halves" : "exchange", bytes,
             t[t.size() / 2], t[t.size() / 4], t[3 * t.size() / 4], ti.tcpi_snd_cwnd);
  }
}

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (1 << 20);
  int iters = argc > 2 ? atoi(argv[2]) : 500;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(ls, (sockaddr*)&addr, sizeof(addr)) || listen(ls, 1)) die("listen");
  socklen_t len = sizeof(addr);
  getsockname(ls, (sockaddr*)&addr, &len);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (sockaddr*)&addr, sizeof(addr))) die("connect");
    run(fd, 1, bytes, iters);
    return 0;
  }
  int fd = accept(ls, nullptr, nullptr);
  if (fd < 0) die("accept");
  run(fd, 0, bytes, iters);
  waitpid(pid, nullptr, 0);
}
