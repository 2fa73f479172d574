#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "base/auth.h"
#include "base/error.h"
#include "base/logging.h"
#include "base/net.h"
#include "base/time.h"
#include "chorus/store.h"
#include "store/store_common.h"
#include "store/tcp_store_protocol.h"

namespace chorus {

namespace store::wire {

Reader::State parse_request(std::string_view in, Request& request, size_t& consumed, std::string& error) {
  Reader r(in);
  request = Request{};
  uint8_t command = r.u8();
  auto read_keys = [&] {
    uint32_t count = r.length(kMaxKeysPerRequest, "key count");
    request.keys.reserve(count);
    for (uint32_t i = 0; i < count && r.state() == Reader::State::Ok; ++i) request.keys.push_back(r.key());
  };
  switch (static_cast<Command>(command)) {
    case Command::Set:
      request.keys = {r.key()};
      request.value = r.value();
      break;
    case Command::Get:
      request.timeout_ms = r.u64();
      request.keys = {r.key()};
      break;
    case Command::Add:
      request.keys = {r.key()};
      request.delta = static_cast<int64_t>(r.u64());
      break;
    case Command::Check:
      read_keys();
      break;
    case Command::Wait:
      request.timeout_ms = r.u64();
      read_keys();
      break;
    case Command::Erase:
      request.keys = {r.key()};
      break;
    default:
      if (r.state() == Reader::State::Ok) r.fail(fmt::format("unknown command 0x{:02x}", command));
  }
  request.command = static_cast<Command>(command);
  if (r.state() == Reader::State::Bad) error = r.error();
  if (r.state() == Reader::State::Ok) consumed = r.position();
  return r.state();
}

}  // namespace store::wire

namespace {

using base::Clock;
using store::wire::Command;
using store::wire::Status;

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr int kListenBacklog = 4096;
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kReadPerEvent = 1 << 20;     // fairness between clients
constexpr size_t kKeepBufferBytes = 1 << 20;  // larger buffers are released once empty
// A parked request's deadline is capped so that now + timeout never overflows.
constexpr auto kMaxServerWait = std::chrono::hours(24 * 365);
// How much longer than the server-side timeout a client waits before it gives the connection up.
constexpr auto kClientSafetyMargin = std::chrono::seconds(2);
// How long a new connection has to authenticate (both sides' limit), so that idle unauthenticated sockets
// cannot hold on to connection slots.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

void append_response(std::string& out, Status status, std::string_view payload) {
  store::wire::put_u8(out, static_cast<uint8_t>(status));
  store::wire::put_string(out, payload);
}

// One client connection, owned by the server thread.
struct Conn {
  uint64_t id = 0;
  base::Fd fd;
  std::string peer;
  std::string in;   // received bytes not yet parsed
  std::string out;  // response bytes not yet sent, from out_sent on
  size_t out_sent = 0;
  uint32_t events = 0;   // the current epoll interest
  // Set while the client has not authenticated yet (the server has a token): no request is served before.
  // Its deadline is `deadline` below, registered in the server's deadline set.
  std::optional<base::auth::AcceptHandshake> auth;
  bool closing = false;  // close once `out` is sent (after a BadRequest)
  bool failed = false;   // a send failed; close at the next opportunity
  // A parked Get or Wait: registered in the server's waiter list of keys[next_missing].
  bool parked = false;
  Command parked_command = Command::Get;
  std::vector<std::string> keys;
  size_t next_missing = 0;
  Clock::time_point deadline;

  bool has_output() const { return out_sent < out.size(); }
  // Only an idle connection reads more: one request at a time keeps every buffer bounded by one request.
  bool idle() const { return !parked && !closing && !failed && !has_output(); }
};

}  // namespace

struct TcpStoreServer::Impl {
  base::Fd listen_fd;
  base::Fd epoll_fd;
  base::Fd wake_fd;
  uint16_t port = 0;
  std::string address;
  std::string auth_token;  // empty: clients are not authenticated
  std::atomic<bool> stop{false};
  std::atomic<size_t> clients{0};  // conns.size(), for other threads (TcpStoreServer::clients())
  std::thread thread;

  // Everything below is touched only by the server thread.
  std::unordered_map<std::string, std::string> data;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters;  // key -> parked connections
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines;      // of parked connections
  std::vector<uint64_t> ready;  // connections woken by another's request: process their input, maybe close
  uint64_t next_id = 2;
  bool accept_paused = false;  // out of file descriptors: stop accepting for a moment
  Clock::time_point accept_resume;

  void run();
  int next_timeout_ms() const;
  void accept_all();
  void set_listen_interest(bool on);
  void on_event(uint64_t id, uint32_t events);
  bool read_some(Conn& c);
  bool flush(Conn& c);
  void process_input(Conn& c);
  bool authenticate(Conn& c);
  void handle(Conn& c, const store::wire::Request& req);
  void reply(Conn& c, Status status, std::string_view payload);
  void bad_request(Conn& c, const std::string& why);
  void park(Conn& c, Command command, std::vector<std::string> keys, size_t missing, uint64_t timeout_ms);
  void unpark(Conn& c);
  void notify(const std::string& key);
  void expire_deadlines();
  void finish(uint64_t id);
  void close_conn(uint64_t id);
  Conn* find(uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() ? nullptr : it->second.get();
  }
};

std::string auth_token_from_environment() { return base::auth::token_from_environment(); }

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port)
    : TcpStoreServer(host, port, TcpStoreServerOptions{}) {}

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port, const TcpStoreServerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->auth_token = options.auth_token;
  // Bind the first address of host that works; if none does, report the first failure (e.g. port in use).
  std::exception_ptr first_error;
  for (const base::SockAddr& addr : base::resolve(host, port)) {
    try {
      impl_->listen_fd = base::listen_tcp(addr, kListenBacklog);
      break;
    } catch (const Error&) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (!impl_->listen_fd.valid()) {
    if (first_error) std::rethrow_exception(first_error);
    base::throw_error(ErrorCode::InvalidArgument, fmt::format("TcpStoreServer: host '{}' has no address", host));
  }
  base::set_nonblocking(impl_->listen_fd.get(), true);
  base::SockAddr local = base::local_address(impl_->listen_fd.get());
  impl_->port = local.port();
  impl_->address = local.to_string();

  impl_->epoll_fd = base::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!impl_->epoll_fd.valid()) base::throw_errno("TcpStoreServer: epoll_create1", errno);
  impl_->wake_fd = base::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl_->wake_fd.valid()) base::throw_errno("TcpStoreServer: eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (::epoll_ctl(impl_->epoll_fd.get(), EPOLL_CTL_ADD, impl_->wake_fd.get(), &ev) != 0) {
    base::throw_errno("TcpStoreServer: epoll_ctl", errno);
  }
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  if (::epoll_ctl(impl_->epoll_fd.get(), EPOLL_CTL_ADD, impl_->listen_fd.get(), &ev) != 0) {
    base::throw_errno("TcpStoreServer: epoll_ctl", errno);
  }
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  base::log_debug("TcpStoreServer listening on {}{}", impl_->address,
                  impl_->auth_token.empty() ? "" : "; clients must authenticate");
  if (impl_->auth_token.empty()) base::auth::note_unauthenticated();
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stop.store(true);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake_fd.get(), &one, sizeof(one));
  impl_->thread.join();
  // Impl's destructor closes every client connection, the listening socket and the epoll set.
}

uint16_t TcpStoreServer::port() const { return impl_->port; }

size_t TcpStoreServer::clients() const { return impl_->clients.load(); }

void TcpStoreServer::Impl::run() {
  std::vector<epoll_event> events(256);
  try {
    while (!stop.load()) {
      int n = ::epoll_wait(epoll_fd.get(), events.data(), static_cast<int>(events.size()), next_timeout_ms());
      if (n < 0 && errno != EINTR) base::throw_errno("TcpStoreServer: epoll_wait", errno);
      for (int i = 0; i < n; ++i) {
        uint64_t id = events[i].data.u64;
        if (id == kWakeId) {
          uint64_t value;
          [[maybe_unused]] ssize_t r = ::read(wake_fd.get(), &value, sizeof(value));
        } else if (id == kListenId) {
          accept_all();
        } else {
          on_event(id, events[i].events);
        }
      }
      if (accept_paused && Clock::now() >= accept_resume) set_listen_interest(true);
      expire_deadlines();
      // Processing one woken connection may wake others; the list drains because each wake needs a set.
      while (!ready.empty()) {
        uint64_t id = ready.back();
        ready.pop_back();
        finish(id);
      }
    }
  } catch (const std::exception& e) {
    base::log_error("TcpStoreServer {} stopped serving: {}", address, e.what());
  }
  conns.clear();  // clients waiting on us see the connection close instead of hanging
  clients.store(0);
}

int TcpStoreServer::Impl::next_timeout_ms() const {
  std::optional<Clock::time_point> next;
  if (!deadlines.empty()) next = deadlines.begin()->first;
  if (accept_paused && (!next || accept_resume < *next)) next = accept_resume;
  if (!ready.empty()) return 0;
  if (!next) return -1;
  return base::Deadline(*next).poll_timeout_ms(60 * 1000);
}

void TcpStoreServer::Impl::set_listen_interest(bool on) {
  epoll_event ev{};
  ev.events = on ? static_cast<uint32_t>(EPOLLIN) : 0u;
  ev.data.u64 = kListenId;
  ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_MOD, listen_fd.get(), &ev);
  accept_paused = !on;
  if (!on) accept_resume = Clock::now() + std::chrono::milliseconds(100);
}

void TcpStoreServer::Impl::accept_all() {
  while (true) {
    int fd = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the listener would stay readable and spin the loop, so pause it.
      base::log_warn("TcpStoreServer {}: accept failed ({}); pausing new connections", address, std::strerror(errno));
      set_listen_interest(false);
      return;
    }
    base::Fd sock(fd);
    std::string peer = base::peer_address(fd).to_string();
    if (conns.size() >= store::wire::kMaxConnections) {
      base::log_warn("TcpStoreServer {}: refusing {}: already {} clients", address, peer, conns.size());
      std::string msg;
      append_response(msg, Status::Unavailable,
                      fmt::format("the store at {} already serves {} clients", address, conns.size()));
      [[maybe_unused]] ssize_t n = ::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      continue;
    }
    base::set_nodelay(fd);
    auto conn = std::make_unique<Conn>();
    conn->id = next_id++;
    conn->fd = std::move(sock);
    conn->peer = std::move(peer);
    conn->events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = conn->events;
    ev.data.u64 = conn->id;
    if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      base::log_warn("TcpStoreServer {}: epoll_ctl for {}: {}", address, conn->peer, std::strerror(errno));
      continue;
    }
    if (!auth_token.empty()) {
      conn->auth.emplace(auth_token, base::auth::Channel::Store);
      conn->deadline = Clock::now() + kHandshakeTimeout;
      deadlines.emplace(conn->deadline, conn->id);
    }
    conns.emplace(conn->id, std::move(conn));
    clients.store(conns.size());
  }
}

void TcpStoreServer::Impl::on_event(uint64_t id, uint32_t events) {
  Conn* c = find(id);
  if (!c) return;
  try {
    if (events & EPOLLERR) return close_conn(id);
    if ((events & EPOLLOUT) && !flush(*c)) return close_conn(id);
    if (events & EPOLLIN) {
      if (!read_some(*c)) return close_conn(id);
    } else if (events & (EPOLLHUP | EPOLLRDHUP)) {
      // Not reading (a parked request or a response in flight) and the client hung up: it is gone.
      return close_conn(id);
    }
    finish(id);
  } catch (const std::exception& e) {
    // One client's trouble (e.g. no memory for its value) must not stop the server.
    Conn* gone = find(id);
    base::log_warn("TcpStoreServer {}: dropping client {}: {}", address, gone ? gone->peer : "?", e.what());
    close_conn(id);
  }
}

// Reads what the socket has (up to kReadPerEvent); false when the client closed or the socket failed.
bool TcpStoreServer::Impl::read_some(Conn& c) {
  size_t total = 0;
  while (total < kReadPerEvent) {
    size_t old = c.in.size();
    c.in.resize(old + kReadChunk);
    ssize_t n = ::recv(c.fd.get(), c.in.data() + old, kReadChunk, 0);
    c.in.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) {
      total += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    base::log_debug("TcpStoreServer {}: recv from {}: {}", address, c.peer, std::strerror(errno));
    return false;
  }
  return true;
}

// Sends pending output; false when the socket failed.
bool TcpStoreServer::Impl::flush(Conn& c) {
  while (c.has_output()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    } else {
      return false;
    }
  }
  c.out_sent = 0;
  if (c.out.capacity() > kKeepBufferBytes) std::string().swap(c.out);
  c.out.clear();
  return true;
}

void TcpStoreServer::Impl::process_input(Conn& c) {
  if (c.auth && !authenticate(c)) return;
  while (c.idle() && !c.in.empty()) {
    store::wire::Request req;
    size_t consumed = 0;
    std::string error;
    auto state = store::wire::parse_request(c.in, req, consumed, error);
    if (state == store::wire::Reader::State::NeedMore) break;
    if (state == store::wire::Reader::State::Bad) return bad_request(c, error);
    handle(c, req);  // copies what it keeps: req points into c.in
    c.in.erase(0, consumed);
  }
  if (c.in.empty() && c.in.capacity() > kKeepBufferBytes) std::string().swap(c.in);
}

// Advances the handshake of a connection that has not authenticated yet; true once it has, and then c.in holds
// its first requests. A client that fails is closed (at once, or after a reply saying why) and logged by
// address; nothing about the token is.
bool TcpStoreServer::Impl::authenticate(Conn& c) {
  if (c.closing || c.failed) return false;
  auto state = c.auth->advance(c.in, c.out);
  if (c.has_output() && !flush(c)) c.failed = true;
  switch (state) {
    case base::auth::AcceptHandshake::State::NeedMore:
      return false;
    case base::auth::AcceptHandshake::State::Done:
      c.auth.reset();
      deadlines.erase({c.deadline, c.id});
      base::log_debug("TcpStoreServer {}: client {} authenticated", address, c.peer);
      return !c.failed;
    case base::auth::AcceptHandshake::State::NotAuthenticating:
      base::log_warn(
          "TcpStoreServer {}: client {} sent a request without authenticating (no CHORUS_AUTH_TOKEN?); "
          "closing the connection",
          address, c.peer);
      append_response(c.out, Status::Unauthenticated,
                      "this store requires authentication: set CHORUS_AUTH_TOKEN to the job's token");
      if (!flush(c)) c.failed = true;
      c.closing = true;
      c.in.clear();
      return false;
    case base::auth::AcceptHandshake::State::Failed:
      base::log_warn("TcpStoreServer {}: client {} failed authentication: {}; closing the connection", address, c.peer,
                     c.auth->failure());
      c.failed = true;
      c.in.clear();
      return false;
  }
  return false;
}

void TcpStoreServer::Impl::handle(Conn& c, const store::wire::Request& req) {
  std::string payload;
  switch (req.command) {
    case Command::Set: {
      std::string key(req.keys[0]);
      data[key] = std::string(req.value);
      reply(c, Status::Ok, {});
      return notify(key);
    }
    case Command::Get: {
      auto it = data.find(std::string(req.keys[0]));
      if (it != data.end()) return reply(c, Status::Ok, it->second);
      return park(c, Command::Get, {std::string(req.keys[0])}, 0, req.timeout_ms);
    }
    case Command::Add: {
      std::string key(req.keys[0]);
      auto it = data.find(key);
      std::string error;
      auto value = store::checked_add(it == data.end() ? nullptr : &it->second, req.delta, key, error);
      if (!value) return reply(c, Status::InvalidArgument, error);
      data[key] = std::to_string(*value);
      store::wire::put_u64(payload, static_cast<uint64_t>(*value));
      reply(c, Status::Ok, payload);
      return notify(key);
    }
    case Command::Check: {
      bool all = std::all_of(req.keys.begin(), req.keys.end(),
                             [&](std::string_view k) { return data.count(std::string(k)) > 0; });
      store::wire::put_u8(payload, all ? 1 : 0);
      return reply(c, Status::Ok, payload);
    }
    case Command::Wait: {
      for (size_t i = 0; i < req.keys.size(); ++i) {
        if (!data.count(std::string(req.keys[i]))) {
          return park(c, Command::Wait, std::vector<std::string>(req.keys.begin(), req.keys.end()), i, req.timeout_ms);
        }
      }
      return reply(c, Status::Ok, {});
    }
    case Command::Erase: {
      store::wire::put_u8(payload, data.erase(std::string(req.keys[0])) > 0 ? 1 : 0);
      return reply(c, Status::Ok, payload);
    }
  }
}

void TcpStoreServer::Impl::reply(Conn& c, Status status, std::string_view payload) {
  append_response(c.out, status, payload);
  if (!flush(c)) c.failed = true;
}

void TcpStoreServer::Impl::bad_request(Conn& c, const std::string& why) {
  base::log_warn("TcpStoreServer {}: bad request from {}: {}; closing the connection", address, c.peer, why);
  reply(c, Status::BadRequest, why);
  c.closing = true;
  c.in.clear();
}

void TcpStoreServer::Impl::park(Conn& c, Command command, std::vector<std::string> keys, size_t missing,
                                uint64_t timeout_ms) {
  c.parked = true;
  c.parked_command = command;
  c.keys = std::move(keys);
  c.next_missing = missing;
  auto wait = std::chrono::milliseconds(
      std::min<uint64_t>(timeout_ms, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxServerWait).count()));
  c.deadline = Clock::now() + wait;
  waiters[c.keys[missing]].push_back(c.id);
  deadlines.emplace(c.deadline, c.id);
}

// Forgets a parked request: its registration under its next missing key and its deadline.
void TcpStoreServer::Impl::unpark(Conn& c) {
  auto it = waiters.find(c.keys[c.next_missing]);
  if (it != waiters.end()) {
    std::erase(it->second, c.id);
    if (it->second.empty()) waiters.erase(it);
  }
  deadlines.erase({c.deadline, c.id});
  c.parked = false;
  c.keys.clear();
}

void TcpStoreServer::Impl::notify(const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  waiters.erase(it);
  for (uint64_t id : ids) {
    Conn* c = find(id);
    if (!c || !c->parked) continue;
    // A Wait moves on to its next missing key; it is registered under one key at a time.
    size_t i = c->next_missing;
    while (i < c->keys.size() && data.count(c->keys[i])) ++i;
    if (i < c->keys.size()) {
      c->next_missing = i;
      waiters[c->keys[i]].push_back(id);
      continue;
    }
    Command command = c->parked_command;
    deadlines.erase({c->deadline, id});
    c->parked = false;
    if (command == Command::Get) {
      reply(*c, Status::Ok, data[c->keys[0]]);
    } else {
      reply(*c, Status::Ok, {});
    }
    c->keys.clear();
    ready.push_back(id);
  }
}

void TcpStoreServer::Impl::expire_deadlines() {
  auto now = Clock::now();
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    uint64_t id = deadlines.begin()->second;
    deadlines.erase(deadlines.begin());
    Conn* c = find(id);
    if (c && c->auth) {
      base::log_warn("TcpStoreServer {}: client {} did not authenticate within {} s; closing the connection", address,
                     c->peer, std::chrono::duration_cast<std::chrono::seconds>(kHandshakeTimeout).count());
      close_conn(id);
      continue;
    }
    if (!c || !c->parked) continue;
    std::string payload;
    for (size_t i = 0; c->parked_command == Command::Wait && i < c->keys.size(); ++i) {
      if (!data.count(c->keys[i])) store::wire::put_u32(payload, static_cast<uint32_t>(i));
    }
    unpark(*c);
    reply(*c, Status::Timeout, payload);
    ready.push_back(id);
  }
}

// After a connection's state changed: close it if it is done or broken, otherwise serve any request it has
// buffered and update what epoll watches for.
void TcpStoreServer::Impl::finish(uint64_t id) {
  Conn* c = find(id);
  if (!c) return;
  process_input(*c);
  if (c->failed || (c->closing && !c->has_output())) return close_conn(id);
  uint32_t want = EPOLLRDHUP;
  if (c->idle()) want |= EPOLLIN;
  if (c->has_output()) want |= EPOLLOUT;
  if (want != c->events) {
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_MOD, c->fd.get(), &ev) != 0) return close_conn(id);
    c->events = want;
  }
}

void TcpStoreServer::Impl::close_conn(uint64_t id) {
  Conn* c = find(id);
  if (!c) return;
  if (c->parked) unpark(*c);
  if (c->auth) deadlines.erase({c->deadline, id});
  ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
  conns.erase(id);
  clients.store(conns.size());
  if (accept_paused) set_listen_interest(true);  // a descriptor was freed
}

// ---- client ----

struct TcpStore::Impl {
  std::string address;  // host:port, for messages
  // Declared before `fd` so that it outlives it: the client hangs up before its own server stops.
  std::unique_ptr<TcpStoreServer> server;
  std::mutex mu;
  base::Fd fd;         // guarded by mu
  std::string broken;  // guarded by mu; why the connection can no longer be used, empty while it can

  struct Response {
    Status status;
    std::string payload;
  };

  // Sends one request and reads its response, all before `deadline`. Any failure leaves the connection
  // broken: a response may still be on its way, so the stream can't be trusted any more.
  Response call(const char* op, const std::string& request, base::Deadline deadline, std::chrono::milliseconds limit);
  // Throws for the statuses every command treats alike.
  void check_status(const char* op, const Response& r);
  void check_key(const char* op, const std::string& key) const;
  std::string name(const char* op) const { return fmt::format("TcpStore {} {}", address, op); }
};

TcpStore::Impl::Response TcpStore::Impl::call(const char* op, const std::string& request, base::Deadline deadline,
                                              std::chrono::milliseconds limit) {
  std::lock_guard<std::mutex> lock(mu);
  if (!broken.empty()) {
    base::throw_error(
        ErrorCode::Unavailable,
        fmt::format("{}: the connection to the store is unusable after an earlier failure: {}", name(op), broken));
  }
  auto fail = [&](ErrorCode code, const std::string& why) {
    broken = why;
    fd.reset();
    base::throw_error(code, fmt::format("{}: {}", name(op), why));
  };
  auto check_io = [&](base::IoStatus s) {
    if (s == base::IoStatus::Eof) {
      fail(ErrorCode::Unavailable,
           fmt::format("the store at {} closed the connection (the server stopped or failed)", address));
    }
    if (s == base::IoStatus::Timeout) {
      fail(ErrorCode::Timeout, fmt::format("the store at {} did not answer within {} ms; the connection is given up",
                                           address, limit.count()));
    }
  };
  try {
    check_io(base::write_full(fd.get(), request.data(), request.size(), deadline));
    char header[store::wire::kResponseHeaderBytes];
    check_io(base::read_full(fd.get(), header, sizeof(header), deadline));
    store::wire::Reader r({header, sizeof(header)});
    Response response;
    response.status = static_cast<Status>(r.u8());
    uint32_t length = r.u32();
    if (length > store::wire::kMaxPayloadBytes || response.status > Status::Unauthenticated) {
      fail(ErrorCode::Unavailable,
           fmt::format("malformed response from {} (status {}, length {}); is it a Chorus store?", address,
                       static_cast<int>(response.status), length));
    }
    response.payload.resize(length);
    check_io(base::read_full(fd.get(), response.payload.data(), length, deadline));
    return response;
  } catch (const Error& e) {
    if (broken.empty()) {
      broken = e.what();
      fd.reset();
    }
    throw;
  }
}

void TcpStore::Impl::check_status(const char* op, const Response& r) {
  switch (r.status) {
    case Status::Ok:
    case Status::Timeout:
      return;
    case Status::InvalidArgument:
      base::throw_error(ErrorCode::InvalidArgument, fmt::format("{}: {}", name(op), r.payload));
    case Status::BadRequest:
    case Status::Unavailable: {
      // The server closes the connection after these.
      std::lock_guard<std::mutex> lock(mu);
      broken = fmt::format("the store at {} rejected a request: {}", address, r.payload);
      fd.reset();
      base::throw_error(r.status == Status::BadRequest ? ErrorCode::InvalidArgument : ErrorCode::Unavailable,
                        fmt::format("{}: {}", name(op), broken));
    }
    case Status::Unauthenticated: {
      std::lock_guard<std::mutex> lock(mu);
      broken = fmt::format(
          "authentication failed: the store at {} requires authentication and this process has no "
          "CHORUS_AUTH_TOKEN (the store says: {}); check that CHORUS_AUTH_TOKEN is the same on every rank",
          address, r.payload);
      fd.reset();
      base::throw_error(ErrorCode::Unavailable, fmt::format("{}: {}", name(op), broken));
    }
  }
}

void TcpStore::Impl::check_key(const char* op, const std::string& key) const {
  if (key.size() > store::wire::kMaxKeyBytes) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("{}: key {} is {} bytes, over the TCP store's limit of {}", name(op),
                                  store::quote_key(key.substr(0, 64)), key.size(), store::wire::kMaxKeyBytes));
  }
}

namespace {
std::string command(Command c) { return std::string(1, static_cast<char>(c)); }
uint64_t to_wire_ms(std::chrono::milliseconds t) { return static_cast<uint64_t>(std::max<int64_t>(t.count(), 0)); }
// The client's own deadline for a request the server may park for `timeout`.
std::chrono::milliseconds safety_net(std::chrono::milliseconds timeout) {
  auto margin = std::chrono::duration_cast<std::chrono::milliseconds>(kClientSafetyMargin);
  if (timeout > std::chrono::milliseconds::max() - margin) return std::chrono::milliseconds::max();
  return std::max(timeout, std::chrono::milliseconds(0)) + margin;
}
}  // namespace

TcpStore::TcpStore(const std::string& host, uint16_t port, const TcpStoreOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (options.is_server) {
    TcpStoreServerOptions server_options;
    server_options.auth_token = options.auth_token;
    impl_->server = std::make_unique<TcpStoreServer>(host, port, server_options);
    port = impl_->server->port();
  }
  impl_->address = base::format_host_port(host, port);
  impl_->fd = base::connect_tcp(base::resolve(host, port), base::Deadline::after(options.connect_timeout),
                                "the TcpStore server");
  if (options.auth_token.empty()) {
    base::auth::note_unauthenticated();
  } else {
    base::auth::connect_handshake(impl_->fd.get(), options.auth_token, base::auth::Channel::Store,
                                  base::Deadline::after(kHandshakeTimeout), ErrorCode::Unavailable,
                                  fmt::format("the store at {}", impl_->address));
  }
}

TcpStore::~TcpStore() = default;

std::string TcpStore::address() const { return impl_->address; }

void TcpStore::set(const std::string& key, const std::string& value) {
  impl_->check_key("set", key);
  if (value.size() > store::wire::kMaxValueBytes) {
    base::throw_error(
        ErrorCode::InvalidArgument,
        fmt::format("{}: the value of key {} is {} bytes; the TCP store allows at most {}", impl_->name("set"),
                    store::quote_key(key), value.size(), store::wire::kMaxValueBytes));
  }
  std::string req = command(Command::Set);
  store::wire::put_string(req, key);
  store::wire::put_string(req, value);
  impl_->check_status("set", impl_->call("set", req, base::Deadline::after(timeout()), timeout()));
}

std::string TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  impl_->check_key("get", key);
  std::string req = command(Command::Get);
  store::wire::put_u64(req, to_wire_ms(timeout));
  store::wire::put_string(req, key);
  auto limit = safety_net(timeout);
  auto r = impl_->call("get", req, base::Deadline::after(limit), limit);
  impl_->check_status("get", r);
  if (r.status == Status::Timeout) store::throw_timeout(impl_->name("get"), {key}, timeout);
  return std::move(r.payload);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  impl_->check_key("add", key);
  std::string req = command(Command::Add);
  store::wire::put_string(req, key);
  store::wire::put_u64(req, static_cast<uint64_t>(delta));
  auto r = impl_->call("add", req, base::Deadline::after(timeout()), timeout());
  impl_->check_status("add", r);
  store::wire::Reader reader(r.payload);
  auto value = static_cast<int64_t>(reader.u64());
  if (reader.state() != store::wire::Reader::State::Ok) {
    base::throw_error(ErrorCode::Internal, fmt::format("{}: malformed reply", impl_->name("add")));
  }
  return value;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  // The server takes at most kMaxKeysPerRequest keys per request; larger sets go in batches.
  for (size_t begin = 0; begin < keys.size(); begin += store::wire::kMaxKeysPerRequest) {
    size_t end = std::min(keys.size(), begin + store::wire::kMaxKeysPerRequest);
    std::string req = command(Command::Check);
    store::wire::put_u32(req, static_cast<uint32_t>(end - begin));
    for (size_t i = begin; i < end; ++i) {
      impl_->check_key("check", keys[i]);
      store::wire::put_string(req, keys[i]);
    }
    auto r = impl_->call("check", req, base::Deadline::after(timeout()), timeout());
    impl_->check_status("check", r);
    if (r.payload != std::string(1, '\1')) return false;
  }
  return true;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto deadline = base::Deadline::after(std::max(timeout, std::chrono::milliseconds(0)));
  for (size_t begin = 0; begin < keys.size(); begin += store::wire::kMaxKeysPerRequest) {
    size_t end = std::min(keys.size(), begin + store::wire::kMaxKeysPerRequest);
    auto remaining = deadline.remaining();
    std::string req = command(Command::Wait);
    store::wire::put_u64(req, to_wire_ms(remaining));
    store::wire::put_u32(req, static_cast<uint32_t>(end - begin));
    for (size_t i = begin; i < end; ++i) {
      impl_->check_key("wait", keys[i]);
      store::wire::put_string(req, keys[i]);
    }
    auto limit = safety_net(remaining);
    auto r = impl_->call("wait", req, base::Deadline::after(limit), limit);
    impl_->check_status("wait", r);
    if (r.status == Status::Timeout) {
      std::vector<std::string> missing;
      store::wire::Reader reader(r.payload);
      for (size_t n = r.payload.size() / 4; n > 0; --n) {
        uint32_t i = reader.u32();
        if (i < end - begin) missing.push_back(keys[begin + i]);
      }
      store::throw_timeout(impl_->name("wait"), missing, timeout);
    }
  }
}

bool TcpStore::erase(const std::string& key) {
  impl_->check_key("erase", key);
  std::string req = command(Command::Erase);
  store::wire::put_string(req, key);
  auto r = impl_->call("erase", req, base::Deadline::after(timeout()), timeout());
  impl_->check_status("erase", r);
  return r.payload == std::string(1, '\1');
}

}  // namespace chorus
