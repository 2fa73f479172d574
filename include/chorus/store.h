// Rendezvous key-value stores. Ranks use a store once, while a communicator is created, to exchange
// addresses and identities; a store is never on the data path.
//
// Values are arbitrary bytes held in std::string. All stores are safe to use from several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chorus/export.h"

namespace chorus {

class CHORUS_API Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(5)};

  virtual ~Store();

  // Sets key to value, replacing any previous value, and wakes every waiter on key.
  virtual void set(const std::string& key, const std::string& value) = 0;

  // Returns the value of key, waiting until it exists. Throws Error(Timeout) naming the key after
  // `timeout`.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  std::string get(const std::string& key) { return get(key, timeout()); }

  // Atomically adds delta to the integer stored at key (a missing key counts as 0) and returns the new
  // value. The value is stored as decimal text, so get() of it returns e.g. "3".
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // True when every key exists now. Never waits.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Waits until every key exists. Throws Error(Timeout) naming the missing keys after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  // Removes key; returns whether it existed.
  virtual bool erase(const std::string& key) = 0;

  // The timeout used by get(key) and wait(keys).
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

// A store in this process's memory. Several ranks that run as threads of one process share one
// MemoryStore (through a shared_ptr).
class CHORUS_API MemoryStore : public Store {
 public:
  MemoryStore();
  ~MemoryStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  using Store::get;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool erase(const std::string& key) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A store in a directory of a file system that every rank can see (a shared file system for several
// hosts). One file per key, written atomically with rename; add() is serialised with flock. Waiting polls
// the directory with a backoff up to 10 ms.
class CHORUS_API FileStore : public Store {
 public:
  // Creates the directory if needed.
  explicit FileStore(const std::string& directory);
  ~FileStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  using Store::get;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool erase(const std::string& key) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The value of the CHORUS_AUTH_TOKEN environment variable, or empty when it is unset: the default secret of
// TcpStoreServerOptions and TcpStoreOptions. Thread-safe as long as nobody changes the environment meanwhile.
CHORUS_API std::string auth_token_from_environment();

struct TcpStoreServerOptions {
  // The job's secret. When not empty, every client must first prove that it knows it (a mutual HMAC-SHA256
  // challenge-response, see docs/reliability.md) before any request of its is served; a client that fails is
  // disconnected and logged (its address, never the token) and the server goes on serving the others. Empty:
  // connections are not authenticated. Clients need the same token in TcpStoreOptions::auth_token.
  std::string auth_token = auth_token_from_environment();
};

// The server side of TcpStore: a thread serving the store protocol on host:port. port 0 picks a free port
// (see port()). Stops and closes every connection when destroyed.
//
// Limits, enforced per request and per connection: keys of at most 4 KiB, values of at most 64 MiB, at most
// 1024 keys in one check or wait, at most 4096 clients at a time (more are refused with a message). A request
// over a limit is answered with an error and its connection is closed.
class CHORUS_API TcpStoreServer {
 public:
  // host: a local address to bind ("0.0.0.0", "::", "127.0.0.1", or a host name); the server listens on that
  // address only. Authenticates clients when CHORUS_AUTH_TOKEN is set (TcpStoreServerOptions's default).
  // Throws Error(SystemError) if the address cannot be bound, e.g. because the port is in use.
  explicit TcpStoreServer(const std::string& host = "0.0.0.0", uint16_t port = 0);
  // The same, with options (the authentication token).
  TcpStoreServer(const std::string& host, uint16_t port, const TcpStoreServerOptions& options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const;
  // How many clients are connected now (authenticated or not yet). A client that has gone is counted until the
  // server thread notices its connection close, which it does as soon as the kernel reports it.
  size_t clients() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  // Also host the server on this address's port, in this process (the "master" of torch's TCPStore).
  bool is_server = false;
  // How long to keep retrying the first connection while the server is not up yet.
  std::chrono::milliseconds connect_timeout{std::chrono::minutes(5)};
  // The job's secret, proven to the server (and the server's knowledge of it checked) when connecting; it
  // must equal the server's TcpStoreServerOptions::auth_token. Empty: no authentication, for a server without
  // a token. With is_server, the hosted server uses it too.
  std::string auth_token = auth_token_from_environment();
};

// A client of a TcpStoreServer, reached at host:port (IPv4, IPv6 or a host name).
class CHORUS_API TcpStore : public Store {
 public:
  // Connects (retrying until options.connect_timeout while the server is not up) and authenticates when
  // options.auth_token is set. Throws Error(Timeout) if the server cannot be reached, and Error(Unavailable)
  // when authentication fails (the server has another token, or none); the message says which and asks to
  // check that CHORUS_AUTH_TOKEN is the same on every rank. A client without a token talking to a server with
  // one fails the same way at its first request.
  TcpStore(const std::string& host, uint16_t port, const TcpStoreOptions& options = {});
  ~TcpStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  using Store::get;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool erase(const std::string& key) override;

  // The address this client connects to, "host:port" (IPv6 as "[addr]:port").
  std::string address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Prepends a prefix to every key of an underlying store, so that independent users (communicators,
// sub-communicators) of one store never see each other's keys.
class CHORUS_API PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  ~PrefixStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  using Store::get;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool erase(const std::string& key) override;

  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace chorus
