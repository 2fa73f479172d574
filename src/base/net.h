// Socket and address helpers shared by the TCP store and the TCP transport.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/time.h"

namespace chorus::base {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// Parses "host:port", "1.2.3.4:port" or "[v6addr]:port". Throws Error(InvalidArgument) naming `what`.
HostPort parse_host_port(std::string_view text, std::string_view what);
// Formats host and port, bracketing IPv6 literals.
std::string format_host_port(std::string_view host, uint16_t port);

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* sa() { return reinterpret_cast<sockaddr*>(&storage); }
  // Numeric host only ("10.0.0.1", "fe80::1").
  std::string host() const;
  // "host:port" with IPv6 bracketed.
  std::string to_string() const;
  bool is_loopback() const;
};

// Resolves host (a name or a numeric address) for TCP. Throws Error(InvalidArgument) when it cannot.
std::vector<SockAddr> resolve(const std::string& host, uint16_t port);

// The address of a named interface (IPv4 preferred unless prefer_v6).
std::optional<SockAddr> interface_address(const std::string& ifname, bool prefer_v6 = false);
// The local source address the kernel would use to reach dest (a UDP connect, nothing is sent).
std::optional<SockAddr> route_source_address(const SockAddr& dest);
// Loopback of the given family.
SockAddr loopback_address(int family);

// A listening TCP socket bound to addr (port 0 picks one). SOCK_CLOEXEC, SO_REUSEADDR.
Fd listen_tcp(const SockAddr& addr, int backlog);
SockAddr local_address(int fd);
SockAddr peer_address(int fd);

// Connects to one of addrs, retrying refused/unreachable attempts with a backoff until the deadline.
// Returns a blocking socket with TCP_NODELAY set. Throws Error(Timeout) naming `what`.
Fd connect_tcp(const std::vector<SockAddr>& addrs, Deadline deadline, std::string_view what);

void set_nonblocking(int fd, bool on);
void set_nodelay(int fd);
// Sets SO_SNDBUF/SO_RCVBUF (best effort; 0 leaves the kernel's autotuning on).
void set_buffer_sizes(int fd, int bytes);
// Fixes the socket's receive buffer at `bytes` (SO_RCVBUF; the kernel books twice that, half for its own
// overhead), which turns the kernel's receive-buffer autotuning off for it. Beyond net.core.rmem_max only with
// CAP_NET_ADMIN (SO_RCVBUFFORCE); where neither allows `bytes`, the socket is left as it is, since a buffer
// clamped to a small rmem_max would be smaller than autotuning makes it. Returns the buffer the kernel reports
// afterwards (SO_RCVBUF), or 0 where it was left alone.
int set_receive_buffer(int fd, int bytes);
// Whether a connected socket's two ends are addresses of this host: the peer's address is a loopback address,
// or the same address as ours.
bool same_host(int fd);
// TCP_CONGESTION: sets the socket's congestion control (false, errno set, when the kernel refuses the name),
// and reads it back ("" when it cannot).
bool set_congestion_control(int fd, const std::string& name);
std::string congestion_control(int fd);

enum class IoStatus { Ok, Eof, Timeout };
// Blocking-style full read/write with a deadline, for handshakes and the store protocol. Works on blocking
// and non-blocking sockets. Throws Error(SystemError) on errors other than EOF (ECONNRESET is reported as
// Eof: in both cases the other side is gone).
IoStatus read_full(int fd, void* buf, size_t len, Deadline deadline);
IoStatus write_full(int fd, const void* buf, size_t len, Deadline deadline);

}  // namespace chorus::base
