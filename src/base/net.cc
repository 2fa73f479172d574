#include "base/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "base/error.h"
#include "base/files.h"

namespace chorus::base {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

HostPort parse_host_port(std::string_view text, std::string_view what) {
  auto bad = [&](const char* why) -> HostPort {
    throw_error(ErrorCode::InvalidArgument,
                fmt::format("{} '{}' is not a valid address ({}); expected host:port or [ipv6]:port", what, text, why));
  };
  HostPort hp;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos) return bad("missing ']'");
    hp.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("missing ':port'");
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("missing ':port'");
    if (text.find(':') != colon) return bad("IPv6 addresses must be bracketed");
    hp.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  if (hp.host.empty()) return bad("empty host");
  if (port_text.empty() || port_text.size() > 5) return bad("bad port");
  unsigned long port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9') return bad("bad port");
    port = port * 10 + static_cast<unsigned long>(c - '0');
  }
  if (port == 0 || port > 65535) return bad("port out of range");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

std::string format_host_port(std::string_view host, uint16_t port) {
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::set_port(uint16_t p) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(p);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(p);
}

std::string SockAddr::host() const {
  char buf[INET6_ADDRSTRLEN + 1] = {0};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, buf, sizeof(buf));
  } else if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, buf, sizeof(buf));
  } else {
    return "?";
  }
  return buf;
}

std::string SockAddr::to_string() const { return format_host_port(host(), port()); }

bool SockAddr::is_loopback() const {
  if (family() == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
  }
  return false;
}

std::vector<SockAddr> resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc == EAI_NONAME || rc == EAI_ADDRFAMILY || (rc == 0 && !res)) {
    hints.ai_flags = 0;  // AI_ADDRCONFIG hides loopback-only setups (network namespaces); retry without
    rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  }
  if (rc != 0) {
    throw_error(ErrorCode::InvalidArgument, fmt::format("cannot resolve host '{}': {}", host, gai_strerror(rc)));
  }
  std::vector<SockAddr> out;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    SockAddr a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.len = ai->ai_addrlen;
    out.push_back(a);
  }
  freeaddrinfo(res);
  return out;
}

std::optional<SockAddr> interface_address(const std::string& ifname, bool prefer_v6) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<SockAddr> v4, v6;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || ifname != i->ifa_name) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    SockAddr a;
    a.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&a.storage, i->ifa_addr, a.len);
    if (fam == AF_INET && !v4) v4 = a;
    if (fam == AF_INET6 && !v6) {
      // A link-local IPv6 address needs a scope id to be usable by peers; skip it unless nothing else.
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
      if (!IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) v6 = a;
    }
  }
  freeifaddrs(list);
  if (prefer_v6) return v6 ? v6 : v4;
  return v4 ? v4 : v6;
}

std::optional<SockAddr> route_source_address(const SockAddr& dest) {
  Fd s(::socket(dest.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return std::nullopt;
  SockAddr d = dest;
  if (d.port() == 0) d.set_port(9);
  if (::connect(s.get(), d.sa(), d.len) != 0) return std::nullopt;
  SockAddr local = local_address(s.get());
  local.set_port(0);
  return local;
}

SockAddr loopback_address(int family) {
  SockAddr a;
  if (family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    s6->sin6_family = AF_INET6;
    s6->sin6_addr = in6addr_loopback;
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&a.storage);
    s4->sin_family = AF_INET;
    s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.len = sizeof(sockaddr_in);
  }
  return a;
}

Fd listen_tcp(const SockAddr& addr, int backlog) {
  Fd s(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) throw_errno("socket", errno);
  int one = 1;
  setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (addr.family() == AF_INET6) {
    int zero = 0;  // "::" accepts IPv4-mapped connections too
    setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (::bind(s.get(), addr.sa(), addr.len) != 0) throw_errno(fmt::format("bind {}", addr.to_string()), errno);
  if (::listen(s.get(), backlog) != 0) throw_errno(fmt::format("listen {}", addr.to_string()), errno);
  return s;
}

SockAddr local_address(int fd) {
  SockAddr a;
  a.len = sizeof(a.storage);
  getsockname(fd, a.sa(), &a.len);
  return a;
}

SockAddr peer_address(int fd) {
  SockAddr a;
  a.len = sizeof(a.storage);
  getpeername(fd, a.sa(), &a.len);
  return a;
}

void set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) throw_errno("fcntl(F_GETFL)", errno);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) != 0) throw_errno("fcntl(F_SETFL)", errno);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_buffer_sizes(int fd, int bytes) {
  if (bytes <= 0) return;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

int set_receive_buffer(int fd, int bytes) {
  if (bytes <= 0) return 0;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    const std::string max = read_first_line("/proc/sys/net/core/rmem_max");
    char* end = nullptr;
    const long long limit = max.empty() ? -1 : std::strtoll(max.c_str(), &end, 10);
    if (limit < bytes || setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0) return 0;
  }
  int got = 0;
  socklen_t len = sizeof(got);
  return getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 ? got : 0;
}

bool same_host(int fd) {
  const SockAddr local = local_address(fd), peer = peer_address(fd);
  if (peer.storage.ss_family == AF_INET) {
    const auto* p = reinterpret_cast<const sockaddr_in*>(&peer.storage);
    const auto* l = reinterpret_cast<const sockaddr_in*>(&local.storage);
    return (ntohl(p->sin_addr.s_addr) >> 24) == 127 ||
           (local.storage.ss_family == AF_INET && p->sin_addr.s_addr == l->sin_addr.s_addr);
  }
  if (peer.storage.ss_family == AF_INET6) {
    const auto* p = reinterpret_cast<const sockaddr_in6*>(&peer.storage);
    const auto* l = reinterpret_cast<const sockaddr_in6*>(&local.storage);
    const bool mapped_loopback = IN6_IS_ADDR_V4MAPPED(&p->sin6_addr) && p->sin6_addr.s6_addr[12] == 127;
    return IN6_IS_ADDR_LOOPBACK(&p->sin6_addr) || mapped_loopback ||
           (local.storage.ss_family == AF_INET6 && std::memcmp(&p->sin6_addr, &l->sin6_addr, sizeof(in6_addr)) == 0);
  }
  return false;
}

bool set_congestion_control(int fd, const std::string& name) {
  return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) == 0;
}

std::string congestion_control(int fd) {
  char name[64] = {};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, len));
}

Fd connect_tcp(const std::vector<SockAddr>& addrs, Deadline deadline, std::string_view what) {
  int last_err = 0;
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    for (const SockAddr& a : addrs) {
      Fd s(::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!s.valid()) throw_errno("socket", errno);
      int rc = ::connect(s.get(), a.sa(), a.len);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{s.get(), POLLOUT, 0};
        int pr = ::poll(&p, 1, std::max(1, deadline.poll_timeout_ms(1000)));
        if (pr > 0) {
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        } else {
          rc = -1;
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        set_nonblocking(s.get(), false);
        set_nodelay(s.get());
        return s;
      }
      last_err = errno;
    }
    if (deadline.expired()) {
      throw_error(ErrorCode::Timeout, fmt::format("could not connect to {} ({}): {}", what,
                                                  addrs.empty() ? std::string("no address") : addrs[0].to_string(),
                                                  std::strerror(last_err)));
    }
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

namespace {
IoStatus wait_fd(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int to = deadline.poll_timeout_ms(1000);
    int rc = ::poll(&p, 1, to);
    if (rc > 0) return IoStatus::Ok;
    if (rc < 0 && errno != EINTR) throw_errno("poll", errno);
    if (rc == 0 && deadline.expired()) return IoStatus::Timeout;
  }
}
}  // namespace

IoStatus read_full(int fd, void* buf, size_t len, Deadline deadline) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return IoStatus::Eof;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN) return IoStatus::Eof;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw_errno("recv", errno);
    if (wait_fd(fd, POLLIN, deadline) == IoStatus::Timeout) return IoStatus::Timeout;
  }
  return IoStatus::Ok;
}

IoStatus write_full(int fd, const void* buf, size_t len, Deadline deadline) {
  auto* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN)) return IoStatus::Eof;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) throw_errno("send", errno);
    if (wait_fd(fd, POLLOUT, deadline) == IoStatus::Timeout) return IoStatus::Timeout;
  }
  return IoStatus::Ok;
}

}  // namespace chorus::base
