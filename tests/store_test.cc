#include "chorus/store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/net.h"
#include "base/time.h"
#include "chorus/error.h"
#include "store/tcp_store_protocol.h"

namespace chorus {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace wire = store::wire;

// Runs fn, expecting Error with `code`; returns its message.
template <class Fn>
std::string expect_error(ErrorCode code, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(to_string(e.code()), std::string(to_string(code))) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected Error(" << to_string(code) << ")";
  return {};
}

std::string make_temp_dir() {
  std::string tmpl = (fs::temp_directory_path() / "chorus-store-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  return tmpl;
}

// ---- every store kind ----

enum class Kind { Memory, File, TcpV4, TcpV6, PrefixOverMemory };

struct StoreParam {
  std::string name;
  Kind kind;
  friend void PrintTo(const StoreParam& p, std::ostream* os) { *os << p.name; }
};

// Holds the shared state of one store (memory, directory or server) and opens handles to it: each thread
// in a test plays a rank with its own handle, as ranks do.
class StoreTest : public ::testing::TestWithParam<StoreParam> {
 protected:
  void SetUp() override {
    switch (GetParam().kind) {
      case Kind::Memory:
      case Kind::PrefixOverMemory:
        memory_ = std::make_shared<MemoryStore>();
        break;
      case Kind::File:
        dir_ = make_temp_dir();
        break;
      case Kind::TcpV4:
        host_ = "127.0.0.1";
        server_ = std::make_unique<TcpStoreServer>(host_, 0);
        break;
      case Kind::TcpV6:
        host_ = "::1";
        server_ = std::make_unique<TcpStoreServer>(host_, 0);
        break;
    }
    store_ = open();
  }

  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::shared_ptr<Store> open() {
    switch (GetParam().kind) {
      case Kind::Memory:
        return memory_;
      case Kind::PrefixOverMemory:
        return std::make_shared<PrefixStore>("job", memory_);
      case Kind::File:
        return std::make_shared<FileStore>(dir_);
      case Kind::TcpV4:
      case Kind::TcpV6:
        return std::make_shared<TcpStore>(host_, server_->port());
    }
    return nullptr;
  }

  std::shared_ptr<MemoryStore> memory_;
  std::string dir_;
  std::string host_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGet) {
  store_->set("a", "1");
  store_->set("b", "hello");
  EXPECT_EQ(store_->get("a", 1s), "1");
  EXPECT_EQ(store_->get("b", 1s), "hello");
  EXPECT_EQ(open()->get("b", 1s), "hello");  // visible through another handle
}

TEST_P(StoreTest, BinaryValuesAndOddKeys) {
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes += static_cast<char>(i);
  std::string with_nul("a\0b\0\0c", 6);
  store_->set("bin", all_bytes);
  store_->set("nul", with_nul);
  store_->set("empty", "");
  EXPECT_EQ(store_->get("bin", 1s), all_bytes);
  EXPECT_EQ(store_->get("nul", 1s), with_nul);
  EXPECT_EQ(store_->get("empty", 1s), "");

  // Keys that would be unsafe or ambiguous as file names stay distinct.
  std::vector<std::string> keys = {"",
                                   ".",
                                   "..",
                                   "a/b",
                                   "a/../b",
                                   "%41",
                                   "A",
                                   std::string("k\0x", 3),
                                   std::string(300, 'x'),
                                   std::string(1000, '/')};
  for (size_t i = 0; i < keys.size(); ++i) store_->set(keys[i], "v" + std::to_string(i));
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(store_->get(keys[i], 1s), "v" + std::to_string(i)) << i;
  EXPECT_TRUE(store_->check(keys));
}

TEST_P(StoreTest, OverwriteReplacesValue) {
  store_->set("k", "a long first value");
  store_->set("k", "short");
  EXPECT_EQ(store_->get("k", 1s), "short");
}

TEST_P(StoreTest, GetBlocksUntilAnotherThreadSets) {
  auto other = open();
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    other->set("late", "here");
  });
  EXPECT_FALSE(store_->check({"late"}));
  EXPECT_EQ(store_->get("late", std::chrono::milliseconds::max()), "here");  // "forever" must not overflow
  setter.join();
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  auto start = base::Clock::now();
  std::string msg = expect_error(ErrorCode::Timeout, [&] { store_->get("never-set", 100ms); });
  EXPECT_LT(base::seconds_since(start), 3.0);
  EXPECT_NE(msg.find("never-set"), std::string::npos) << msg;
  EXPECT_NE(msg.find("100 ms"), std::string::npos) << msg;
}

TEST_P(StoreTest, DefaultTimeoutApplies) {
  store_->set_timeout(100ms);
  expect_error(ErrorCode::Timeout, [&] { store_->get("never-set"); });
  expect_error(ErrorCode::Timeout, [&] { store_->wait({"never-set"}); });
}

TEST_P(StoreTest, WaitTimesOutNamingOnlyMissingKeys) {
  store_->set("present", "1");
  auto start = base::Clock::now();
  std::string msg = expect_error(ErrorCode::Timeout, [&] { store_->wait({"present", "absent"}, 100ms); });
  EXPECT_LT(base::seconds_since(start), 3.0);
  EXPECT_NE(msg.find("absent'"), std::string::npos) << msg;  // a PrefixStore names the full key
  EXPECT_EQ(msg.find("present'"), std::string::npos) << msg;
}

TEST_P(StoreTest, WaitReturnsOnceEveryKeyIsSet) {
  auto other = open();
  std::thread setter([&] {
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(10ms);
      other->set("w" + std::to_string(i), "x");
    }
  });
  store_->wait({"w0", "w1", "w2"}, 10s);
  EXPECT_TRUE(store_->check({"w0", "w1", "w2"}));
  setter.join();
  store_->wait({}, 0ms);  // nothing to wait for
}

TEST_P(StoreTest, ConcurrentAddsAreExact) {
  constexpr int kThreads = 8, kAdds = 100;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t, handle = open()] {
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(handle->add("counter", 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->get("counter", 1s), std::to_string(kThreads * kAdds));
  // Every add returned a distinct value: no two saw the same old value.
  std::vector<int64_t> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < kThreads * kAdds; ++i) ASSERT_EQ(all[i], i + 1);
}

TEST_P(StoreTest, SharedHandleIsThreadSafe) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        store_->set(key, key);
        EXPECT_EQ(store_->get(key, 1s), key);
        store_->add("shared", 2);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->add("shared", 0), 160);
}

TEST_P(StoreTest, AddStoresDecimalText) {
  EXPECT_EQ(store_->add("n", 5), 5);
  EXPECT_EQ(store_->add("n", -7), -2);
  EXPECT_EQ(store_->get("n", 1s), "-2");
  store_->set("m", "41");
  EXPECT_EQ(store_->add("m", 1), 42);
  EXPECT_EQ(store_->get("m", 1s), "42");
}

TEST_P(StoreTest, AddOnNonIntegerThrowsInvalidArgument) {
  store_->set("text", "abc");
  std::string msg = expect_error(ErrorCode::InvalidArgument, [&] { store_->add("text", 1); });
  EXPECT_NE(msg.find("text"), std::string::npos) << msg;
  EXPECT_EQ(store_->get("text", 1s), "abc");
  store_->set("partly", "12x");
  expect_error(ErrorCode::InvalidArgument, [&] { store_->add("partly", 1); });
  store_->set("max", std::to_string(std::numeric_limits<int64_t>::max()));
  expect_error(ErrorCode::InvalidArgument, [&] { store_->add("max", 1); });
  EXPECT_EQ(store_->add("ok", 1), 1);  // the store is still usable
}

TEST_P(StoreTest, CheckNeverBlocks) {
  EXPECT_TRUE(store_->check({}));
  EXPECT_FALSE(store_->check({"c"}));
  store_->set("c", "1");
  EXPECT_TRUE(store_->check({"c"}));
  EXPECT_FALSE(store_->check({"c", "d"}));
}

TEST_P(StoreTest, EraseReportsWhetherKeyExisted) {
  EXPECT_FALSE(store_->erase("e"));
  store_->set("e", "1");
  EXPECT_TRUE(store_->erase("e"));
  EXPECT_FALSE(store_->check({"e"}));
  EXPECT_FALSE(store_->erase("e"));
  expect_error(ErrorCode::Timeout, [&] { store_->get("e", 50ms); });
  EXPECT_EQ(store_->add("e", 3), 3);  // an erased counter starts again from 0
}

TEST_P(StoreTest, PrefixStoresAreIsolated) {
  PrefixStore a("a", store_), b("b", store_);
  a.set("k", "from a");
  EXPECT_FALSE(b.check({"k"}));
  b.set("k", "from b");
  EXPECT_EQ(a.get("k", 1s), "from a");
  EXPECT_EQ(b.get("k", 1s), "from b");
  EXPECT_EQ(store_->get("a/k", 1s), "from a");
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_EQ(b.add("n", 1), 1);
  EXPECT_TRUE(a.erase("k"));
  EXPECT_TRUE(b.check({"k"}));
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", store_));
  nested.set("x", "1");
  EXPECT_EQ(store_->get("outer/inner/x", 1s), "1");
  PrefixStore slashed("dir/", store_);  // a trailing '/' is not doubled
  slashed.set("y", "2");
  EXPECT_EQ(store_->get("dir/y", 1s), "2");
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest,
                         ::testing::Values(StoreParam{"Memory", Kind::Memory}, StoreParam{"File", Kind::File},
                                           StoreParam{"TcpV4", Kind::TcpV4}, StoreParam{"TcpV6", Kind::TcpV6},
                                           StoreParam{"PrefixOverMemory", Kind::PrefixOverMemory}),
                         ::testing::PrintToStringParamName());

// ---- PrefixStore ----

TEST(PrefixStoreTest, NullBaseIsRejected) {
  expect_error(ErrorCode::InvalidArgument, [] { PrefixStore("p", nullptr); });
}

TEST(PrefixStoreTest, InheritsTheBaseTimeout) {
  auto base = std::make_shared<MemoryStore>();
  base->set_timeout(123ms);
  PrefixStore p("p", base);
  EXPECT_EQ(p.timeout(), 123ms);
  EXPECT_EQ(p.base(), base);
}

// ---- FileStore ----

TEST(FileStoreTest, KeysBecomeSafeFileNames) {
  std::string dir = make_temp_dir();
  {
    FileStore store(dir + "/nested/store");
    store.set("a/b", "1");
    store.set("..", "2");
    store.set(std::string("\0\xff", 2), "3");
    store.set(std::string(1000, '.'), "4");
    store.add("counter", 1);
    EXPECT_EQ(store.get(std::string(1000, '.'), 1s), "4");
    for (const auto& entry : fs::recursive_directory_iterator(dir + "/nested/store")) {
      std::string name = entry.path().filename().string();
      EXPECT_LE(name.size(), 255u) << name;
      if (name == ".lock") continue;
      EXPECT_TRUE(name[0] == 'k' || name[0] == 'd') << name;  // no temp file left behind
      for (char c : name) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '%' || c == '_' || c == '-');
    }
  }
  fs::remove_all(dir);
}

// ---- TcpStore ----

// A raw connection to a server, for sending what a real client never would.
struct RawClient {
  explicit RawClient(uint16_t port)
      : fd(base::connect_tcp(base::resolve("127.0.0.1", port), base::Deadline::after(5s), "test server")) {}

  void send(const std::string& bytes) {
    ASSERT_EQ(base::write_full(fd.get(), bytes.data(), bytes.size(), base::Deadline::after(5s)), base::IoStatus::Ok);
  }
  // Reads one response; returns its status and payload.
  std::pair<wire::Status, std::string> response() {
    char header[wire::kResponseHeaderBytes];
    EXPECT_EQ(base::read_full(fd.get(), header, sizeof(header), base::Deadline::after(5s)), base::IoStatus::Ok);
    wire::Reader r({header, sizeof(header)});
    auto status = static_cast<wire::Status>(r.u8());
    std::string payload(r.u32(), '\0');
    EXPECT_EQ(base::read_full(fd.get(), payload.data(), payload.size(), base::Deadline::after(5s)), base::IoStatus::Ok);
    return {status, payload};
  }
  bool closed_by_server() {
    char c;
    return base::read_full(fd.get(), &c, 1, base::Deadline::after(5s)) == base::IoStatus::Eof;
  }

  base::Fd fd;
};

std::string request_header(wire::Command c) { return std::string(1, static_cast<char>(c)); }

TEST(TcpStoreTest, ManyClientsConcurrently) {
  TcpStoreServer server("127.0.0.1", 0);
  constexpr int kClients = 64;
  std::vector<std::string> keys;
  for (int i = 0; i < kClients; ++i) keys.push_back("rank/" + std::to_string(i));
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      TcpStore client("127.0.0.1", server.port());
      client.add("arrived", 1);
      client.set(keys[i], std::to_string(i));
      client.wait(keys, 20s);  // parked on the server until the last client arrives
      EXPECT_EQ(client.get(keys[(i + 1) % kClients], 1s), std::to_string((i + 1) % kClients));
      ++done;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), kClients);
  EXPECT_EQ(TcpStore("127.0.0.1", server.port()).add("arrived", 0), kClients);
}

TEST(TcpStoreTest, ServerDestroyedWhileClientWaitsThrowsUnavailable) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  TcpStore client("127.0.0.1", server->port());
  std::string msg;
  auto start = base::Clock::now();
  std::thread waiter([&] { msg = expect_error(ErrorCode::Unavailable, [&] { client.get("never", 30s); }); });
  std::this_thread::sleep_for(100ms);
  server.reset();
  waiter.join();
  EXPECT_LT(base::seconds_since(start), 5.0);
  EXPECT_NE(msg.find("closed the connection"), std::string::npos) << msg;
  EXPECT_NE(msg.find(client.address()), std::string::npos) << msg;
  expect_error(ErrorCode::Unavailable, [&] { client.set("k", "v"); });  // stays broken, never hangs
}

TEST(TcpStoreTest, OversizedKeyIsRejectedAndServerKeepsServing) {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore good("127.0.0.1", server.port());
  good.set("before", "1");

  RawClient raw(server.port());
  std::string req = request_header(wire::Command::Set);
  wire::put_u32(req, wire::kMaxKeyBytes + 1);  // announced, never sent: rejected from the header alone
  raw.send(req);
  auto [status, message] = raw.response();
  EXPECT_EQ(status, wire::Status::BadRequest);
  EXPECT_NE(message.find("key length"), std::string::npos) << message;
  EXPECT_TRUE(raw.closed_by_server());

  // The client checks the limit itself before sending anything, and stays usable.
  expect_error(ErrorCode::InvalidArgument, [&] { good.set(std::string(wire::kMaxKeyBytes + 1, 'k'), "v"); });
  good.set(std::string(wire::kMaxKeyBytes, 'k'), "max");
  EXPECT_EQ(good.get(std::string(wire::kMaxKeyBytes, 'k'), 1s), "max");
  EXPECT_EQ(good.get("before", 1s), "1");
}

TEST(TcpStoreTest, PartialAndPipelinedRequestsAreServed) {
  TcpStoreServer server("127.0.0.1", 0);
  RawClient raw(server.port());
  std::string set = request_header(wire::Command::Set);
  wire::put_string(set, "k");
  wire::put_string(set, "v");
  std::string get = request_header(wire::Command::Get);
  wire::put_u64(get, 1000);
  wire::put_string(get, "k");
  raw.send(set.substr(0, 3));  // a request in pieces
  std::this_thread::sleep_for(10ms);
  raw.send(set.substr(3) + get);  // the rest, then a second request in the same write
  EXPECT_EQ(raw.response(), std::make_pair(wire::Status::Ok, std::string()));
  EXPECT_EQ(raw.response(), std::make_pair(wire::Status::Ok, std::string("v")));
}

TEST(TcpStoreTest, LargestValueRoundTrips) {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore a("127.0.0.1", server.port()), b("127.0.0.1", server.port());
  std::string big(wire::kMaxValueBytes, 'x');
  big[12345] = '\0';
  a.set("big", big);
  EXPECT_TRUE(b.get("big", 10s) == big);  // not EXPECT_EQ: a failure would print 64 MiB
  big += 'y';
  expect_error(ErrorCode::InvalidArgument, [&] { a.set("big", big); });  // checked before sending
  EXPECT_EQ(a.get("big", 10s).size(), wire::kMaxValueBytes);
}

TEST(TcpStoreTest, ConnectionsOverTheLimitAreRefused) {
  // Each connection costs two descriptors here (client and server side).
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  rlim_t need = 2 * wire::kMaxConnections + 100;
  if (lim.rlim_cur < need) {
    lim.rlim_cur = std::min(need, lim.rlim_max);
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < need) GTEST_SKIP() << "needs " << need << " file descriptors";
  TcpStoreServer server("127.0.0.1", 0);
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (size_t i = 0; i < wire::kMaxConnections; ++i) {
    clients.push_back(std::make_unique<TcpStore>("127.0.0.1", server.port()));
  }
  clients.back()->set("k", "v");  // every one of them is served
  TcpStore extra("127.0.0.1", server.port());
  std::string msg = expect_error(ErrorCode::Unavailable, [&] { extra.get("k", 1s); });
  EXPECT_NE(msg.find("clients"), std::string::npos) << msg;
  clients.pop_back();
  std::this_thread::sleep_for(50ms);  // let the server notice the hang-up
  EXPECT_EQ(TcpStore("127.0.0.1", server.port()).get("k", 1s), "v");
}

TEST(TcpStoreTest, OverLimitLengthsAreRejected) {
  TcpStoreServer server("127.0.0.1", 0);
  auto expect_rejected = [&](const std::string& req, const char* what) {
    RawClient raw(server.port());
    raw.send(req);
    auto [status, message] = raw.response();
    EXPECT_EQ(status, wire::Status::BadRequest) << what;
    EXPECT_NE(message.find(what), std::string::npos) << message;
    EXPECT_TRUE(raw.closed_by_server()) << what;
  };
  std::string huge_value = request_header(wire::Command::Set);
  wire::put_string(huge_value, "k");
  wire::put_u32(huge_value, 0xffffffffu);
  expect_rejected(huge_value, "value length");
  std::string many_keys = request_header(wire::Command::Wait);
  wire::put_u64(many_keys, 1000);
  wire::put_u32(many_keys, wire::kMaxKeysPerRequest + 1);
  expect_rejected(many_keys, "key count");
  expect_rejected(std::string(1, '\x7f'), "unknown command");
  EXPECT_EQ(TcpStore("127.0.0.1", server.port()).add("alive", 1), 1);
}

TEST(TcpStoreTest, GarbageDoesNotCrashServer) {
  TcpStoreServer server("127.0.0.1", 0);
  std::mt19937 rng(12345);
  for (int i = 0; i < 200; ++i) {
    RawClient raw(server.port());
    std::string junk(rng() % 300, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (!junk.empty() && i % 2 == 0) junk[0] = static_cast<char>(1 + rng() % 6);  // a valid command byte
    raw.send(junk);
    // Half hang up at once (possibly while parked), half let the server answer or close first.
  }
  TcpStore client("127.0.0.1", server.port());
  client.set("still", "alive");
  EXPECT_EQ(client.get("still", 1s), "alive");
}

TEST(TcpStoreTest, ClientHangingUpWhileParkedIsForgotten) {
  TcpStoreServer server("127.0.0.1", 0);
  {
    RawClient raw(server.port());
    std::string req = request_header(wire::Command::Wait);
    wire::put_u64(req, 60000);
    wire::put_u32(req, 2);
    wire::put_string(req, "x");
    wire::put_string(req, "y");
    raw.send(req);
    std::this_thread::sleep_for(20ms);
  }
  std::this_thread::sleep_for(20ms);
  TcpStore client("127.0.0.1", server.port());
  client.set("x", "1");
  client.set("y", "2");
  EXPECT_TRUE(client.check({"x", "y"}));
}

TEST(TcpStoreTest, MoreKeysThanOneRequestHolds) {
  TcpStoreServer server("::1", 0);
  TcpStore client("::1", server.port());
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < wire::kMaxKeysPerRequest + 500; ++i) {
    keys.push_back("key" + std::to_string(i));
    client.set(keys.back(), "");
  }
  EXPECT_TRUE(client.check(keys));
  client.wait(keys, 1s);
  client.erase(keys.back());
  EXPECT_FALSE(client.check(keys));
  std::string msg = expect_error(ErrorCode::Timeout, [&] { client.wait(keys, 100ms); });
  EXPECT_NE(msg.find(keys.back()), std::string::npos) << msg;
}

TEST(TcpStoreTest, BindToUsedPortThrowsSystemError) {
  TcpStoreServer server("127.0.0.1", 0);
  std::string msg = expect_error(ErrorCode::SystemError, [&] { TcpStoreServer("127.0.0.1", server.port()); });
  EXPECT_NE(msg.find(std::to_string(server.port())), std::string::npos) << msg;
}

TEST(TcpStoreTest, IsServerHostsTheStoreOnAWildcardAddress) {
  for (const char* host : {"0.0.0.0", "::"}) {
    TcpStoreOptions options;
    options.is_server = true;
    TcpStore master(host, 0, options);
    auto port = base::parse_host_port(master.address(), "address").port;
    TcpStore other(std::string(host) == "::" ? "::1" : "127.0.0.1", port);
    other.set("from", "other");
    EXPECT_EQ(master.get("from", 1s), "other");
  }
}

TEST(TcpStoreTest, AddressBracketsIpv6) {
  TcpStoreServer server("::1", 0);
  TcpStore client("::1", server.port());
  EXPECT_EQ(client.address(), "[::1]:" + std::to_string(server.port()));
  EXPECT_EQ(TcpStore("127.0.0.1", TcpStoreServer("127.0.0.1", 0).port(), {false, 100ms}).address().find('['),
            std::string::npos);
}

TEST(TcpStoreTest, ConnectGivesUpAfterConnectTimeout) {
  uint16_t port = TcpStoreServer("127.0.0.1", 0).port();  // free again once the server is gone
  TcpStoreOptions options;
  options.connect_timeout = 100ms;
  auto start = base::Clock::now();
  try {
    TcpStore client("127.0.0.1", port, options);
    ADD_FAILURE() << "connected to a closed port";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
  }
  EXPECT_LT(base::seconds_since(start), 3.0);
}

TEST(TcpStoreProtocolTest, ParserHandlesTruncatedAndRandomInput) {
  std::string req = request_header(wire::Command::Wait);
  wire::put_u64(req, 5);
  wire::put_u32(req, 2);
  wire::put_string(req, "alpha");
  wire::put_string(req, std::string("b\0c", 3));
  wire::Request parsed;
  size_t consumed = 0;
  std::string error;
  for (size_t n = 0; n < req.size(); ++n) {
    ASSERT_EQ(wire::parse_request(std::string_view(req).substr(0, n), parsed, consumed, error),
              wire::Reader::State::NeedMore)
        << n;
  }
  std::string two = req + "trailing";  // parsed views point into this buffer
  ASSERT_EQ(wire::parse_request(two, parsed, consumed, error), wire::Reader::State::Ok);
  EXPECT_EQ(consumed, req.size());
  EXPECT_EQ(parsed.command, wire::Command::Wait);
  EXPECT_EQ(parsed.timeout_ms, 5u);
  ASSERT_EQ(parsed.keys.size(), 2u);
  EXPECT_EQ(parsed.keys[1], std::string_view("b\0c", 3));

  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string junk(rng() % 40, '\0');
    for (char& c : junk) c = static_cast<char>(rng() % 4 == 0 ? 0 : rng());
    if (!junk.empty()) junk[0] = static_cast<char>(rng() % 8);
    auto state = wire::parse_request(junk, parsed, consumed, error);
    if (state == wire::Reader::State::Ok) {
      ASSERT_LE(consumed, junk.size());
    }
  }
}

}  // namespace
}  // namespace chorus
