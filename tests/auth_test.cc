// Authenticated TCP connections (CHORUS_AUTH_TOKEN): the handshake itself, the TCP store, rank-to-rank
// connections of the tcp transport, and chorus-run's generated token. Every test captures the library's log at
// DEBUG and checks that no token appears in it or in any error message.
#include "base/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "base/net.h"
#include "chorus/chorus.h"
#include "test_util.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using chorus::testing::expect_error;
using ::testing::HasSubstr;
using ::testing::Not;
namespace auth = base::auth;

constexpr const char* kToken = "s3cret-token-0123456789abcdef";
constexpr const char* kOtherToken = "another-token-fedcba9876543210";

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Logs at DEBUG into a file for the test's duration, with no CHORUS_AUTH_TOKEN in the environment; at the end
// checks that neither token was ever logged.
class Auth : public ::testing::Test {
 protected:
  void SetUp() override {
    log_path_ = (std::filesystem::temp_directory_path() /
                 ("chorus_auth_test_" + std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".log"))
                    .string();
    std::filesystem::remove(log_path_);
    ::unsetenv("CHORUS_AUTH_TOKEN");
    ::setenv("CHORUS_DEBUG", "DEBUG", 1);
    ::setenv("CHORUS_DEBUG_FILE", log_path_.c_str(), 1);
    base::init_logging_from_env();
  }
  void TearDown() override {
    ::unsetenv("CHORUS_DEBUG");
    ::unsetenv("CHORUS_DEBUG_FILE");
    ::unsetenv("CHORUS_AUTH_TOKEN");
    base::init_logging_from_env();
    std::string log = read_file(log_path_);
    EXPECT_THAT(log, Not(HasSubstr(kToken)));
    EXPECT_THAT(log, Not(HasSubstr(kOtherToken)));
    std::filesystem::remove(log_path_);
  }
  std::string log() const { return read_file(log_path_); }

  // Expects Error(code) from call, quickly, with a message that helps and leaks no token; returns what().
  template <class F>
  std::string expect_auth_error(ErrorCode code, F&& call) {
    auto start = std::chrono::steady_clock::now();
    std::string what = expect_error(code, call);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << what;
    EXPECT_THAT(what, HasSubstr("authentic"));
    EXPECT_THAT(what, HasSubstr("CHORUS_AUTH_TOKEN"));
    EXPECT_THAT(what, Not(HasSubstr(kToken)));
    EXPECT_THAT(what, Not(HasSubstr(kOtherToken)));
    return what;
  }

  std::string log_path_;
};

TcpStoreOptions with_token(std::string token) {
  TcpStoreOptions o;
  o.connect_timeout = 5s;
  o.auth_token = std::move(token);
  return o;
}

TcpStoreServerOptions server_token(std::string token) {
  TcpStoreServerOptions o;
  o.auth_token = std::move(token);
  return o;
}

// A raw connection for playing the attacker.
struct Raw {
  base::Fd fd;
  explicit Raw(uint16_t port, const std::string& host = "127.0.0.1") {
    fd = base::connect_tcp(base::resolve(host, port), base::Deadline::after(5s), "test server");
  }
  void send(std::string_view bytes) {
    ASSERT_EQ(base::write_full(fd.get(), bytes.data(), bytes.size(), base::Deadline::after(5s)), base::IoStatus::Ok);
  }
  std::optional<std::string> read(size_t n) {
    std::string b(n, '\0');
    if (base::read_full(fd.get(), b.data(), n, base::Deadline::after(5s)) != base::IoStatus::Ok) return std::nullopt;
    return b;
  }
  // True when the other side closes the connection within `within` (whatever it sent before is skipped).
  bool closed_by_peer(std::chrono::milliseconds within = 5s) {
    char c;
    auto deadline = base::Deadline::after(within);
    while (true) {
      base::IoStatus s = base::read_full(fd.get(), &c, 1, deadline);
      if (s == base::IoStatus::Eof) return true;
      if (s == base::IoStatus::Timeout) return false;
    }
  }
  // Starts a handshake as a connector and reads the acceptor's challenge; returns it (magic, nonce, answer).
  std::string challenge() {
    std::string hello(auth::kMagic);
    hello.append(auth::kNonceBytes, '\x42');
    send(hello);
    auto reply = read(auth::kMagicBytes + auth::kNonceBytes + auth::kMacBytes);
    EXPECT_TRUE(reply.has_value());
    return reply.value_or("");
  }
};

// ---- the handshake on its own ----

// Runs the connecting side with `connector_token` on one end of a socket pair and the accepting side with
// `acceptor_token` on the other; returns the acceptor's result and the connector's error (empty if none).
std::pair<auth::AcceptResult, std::string> handshake(const std::string& connector_token,
                                                     const std::string& acceptor_token, auth::Channel connect_channel,
                                                     auth::Channel accept_channel) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  base::Fd a(sv[0]), b(sv[1]);
  std::string connector_error;
  std::thread connector([&] {
    try {
      auth::connect_handshake(a.get(), connector_token, connect_channel, base::Deadline::after(5s), ErrorCode::PeerLost,
                              "the test peer");
    } catch (const Error& e) {
      connector_error = e.what();
      a.reset();  // as a real connector closes its socket
    }
  });
  auth::AcceptResult r = auth::accept_handshake(b.get(), acceptor_token, accept_channel, base::Deadline::after(5s));
  connector.join();
  return {r, connector_error};
}

TEST_F(Auth, HandshakeSucceedsWithTheSameToken) {
  auto [r, error] = handshake(kToken, kToken, auth::Channel::Store, auth::Channel::Store);
  EXPECT_EQ(r.state, auth::AcceptHandshake::State::Done) << r.failure;
  EXPECT_EQ(error, "");
}

TEST_F(Auth, HandshakeFailsOnBothSidesWithAnotherToken) {
  auto [r, error] = handshake(kToken, kOtherToken, auth::Channel::Rank, auth::Channel::Rank);
  EXPECT_EQ(r.state, auth::AcceptHandshake::State::Failed);
  EXPECT_THAT(error, HasSubstr("authentication with the test peer failed"));
  EXPECT_THAT(error, HasSubstr("check that CHORUS_AUTH_TOKEN is the same on every rank"));
  EXPECT_THAT(error, Not(HasSubstr(kToken)));
  EXPECT_THAT(error, Not(HasSubstr(kOtherToken)));
}

TEST_F(Auth, AnswersOfOneChannelAreRejectedOnTheOther) {
  auto [r, error] = handshake(kToken, kToken, auth::Channel::Store, auth::Channel::Rank);
  EXPECT_EQ(r.state, auth::AcceptHandshake::State::Failed);
  EXPECT_THAT(error, HasSubstr("wrong"));
}

TEST_F(Auth, ReflectedAnswerIsRejected) {
  // An attacker who sends the acceptor's own nonce back can copy nothing useful: the acceptor's answer carries
  // the acceptor's label, and the connector's answer must carry the connector's.
  auth::AcceptHandshake hs(kToken, auth::Channel::Store);
  std::string in(auth::kMagic), out;
  in.append(auth::kNonceBytes, 'n');
  ASSERT_EQ(hs.advance(in, out), auth::AcceptHandshake::State::NeedMore);
  ASSERT_EQ(out.size(), auth::kMagicBytes + auth::kNonceBytes + auth::kMacBytes);
  std::string reflected = out.substr(auth::kMagicBytes + auth::kNonceBytes);  // the acceptor's own answer
  EXPECT_EQ(hs.advance(reflected, out), auth::AcceptHandshake::State::Failed);
}

TEST_F(Auth, APlainRequestIsRecognisedByItsFirstByte) {
  auth::AcceptHandshake hs(kToken, auth::Channel::Store);
  std::string in("\x02rest of a get", 14), out;
  EXPECT_EQ(hs.advance(in, out), auth::AcceptHandshake::State::NotAuthenticating);
  EXPECT_EQ(in.size(), 14u) << "nothing consumed";
  EXPECT_EQ(out, "");
  EXPECT_EQ(hs.wanted(0), 1u);
}

// ---- the TCP store ----

TEST_F(Auth, StoreWithMatchingTokensWorks) {
  TcpStoreServer server("127.0.0.1", 0, server_token(kToken));
  TcpStore a("127.0.0.1", server.port(), with_token(kToken));
  TcpStore b("127.0.0.1", server.port(), with_token(kToken));
  a.set("k", "v");
  EXPECT_EQ(b.get("k", 1s), "v");
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_THAT(log(), HasSubstr("authenticated"));
}

TEST_F(Auth, StoreHostedByTheClientUsesItsToken) {
  TcpStoreOptions o = with_token(kToken);
  o.is_server = true;
  TcpStore host("127.0.0.1", 0, o);
  uint16_t port = static_cast<uint16_t>(std::stoi(host.address().substr(host.address().rfind(':') + 1)));
  TcpStore other("127.0.0.1", port, with_token(kToken));
  host.set("k", "v");
  EXPECT_EQ(other.get("k", 1s), "v");
  expect_auth_error(ErrorCode::Unavailable, [&] { TcpStore("127.0.0.1", port, with_token(kOtherToken)); });
}

TEST_F(Auth, StoreClientWithAnotherTokenFailsAndTheServerKeepsServing) {
  TcpStoreServer server("127.0.0.1", 0, server_token(kToken));
  TcpStore good("127.0.0.1", server.port(), with_token(kToken));
  good.set("before", "1");
  std::string what =
      expect_auth_error(ErrorCode::Unavailable, [&] { TcpStore("127.0.0.1", server.port(), with_token(kOtherToken)); });
  EXPECT_THAT(what, HasSubstr("the store at 127.0.0.1:" + std::to_string(server.port())));
  EXPECT_THAT(what, HasSubstr("different CHORUS_AUTH_TOKEN"));
  EXPECT_EQ(good.get("before", 1s), "1");
  TcpStore later("127.0.0.1", server.port(), with_token(kToken));
  EXPECT_EQ(later.get("before", 1s), "1");
}

TEST_F(Auth, StoreClientWithoutTokenFailsAtItsFirstRequest) {
  TcpStoreServer server("127.0.0.1", 0, server_token(kToken));
  TcpStore none("127.0.0.1", server.port(), with_token(""));
  std::string what = expect_auth_error(ErrorCode::Unavailable, [&] { none.set("k", "v"); });
  EXPECT_THAT(what, HasSubstr("requires authentication"));
  TcpStore good("127.0.0.1", server.port(), with_token(kToken));
  EXPECT_FALSE(good.check({"k"})) << "the unauthenticated set was not applied";
  good.set("k", "good");
  EXPECT_EQ(good.get("k", 1s), "good");
  EXPECT_THAT(log(), HasSubstr("without authenticating"));
}

TEST_F(Auth, StoreClientWithATokenFailsAgainstAServerWithout) {
  TcpStoreServer server("127.0.0.1", 0, server_token(""));
  std::string what =
      expect_auth_error(ErrorCode::Unavailable, [&] { TcpStore("127.0.0.1", server.port(), with_token(kToken)); });
  EXPECT_THAT(what, HasSubstr("without authenticating"));
  TcpStore plain("127.0.0.1", server.port(), with_token(""));
  plain.set("k", "v");
  EXPECT_EQ(plain.get("k", 1s), "v");
}

TEST_F(Auth, TheDefaultTokenComesFromTheEnvironment) {
  ::setenv("CHORUS_AUTH_TOKEN", kToken, 1);
  EXPECT_EQ(TcpStoreOptions{}.auth_token, kToken);
  EXPECT_EQ(TcpStoreServerOptions{}.auth_token, kToken);
  TcpStoreServer server("127.0.0.1", 0);  // the old constructor authenticates too
  ::unsetenv("CHORUS_AUTH_TOKEN");
  EXPECT_EQ(TcpStoreOptions{}.auth_token, "");
  expect_auth_error(ErrorCode::Unavailable, [&] { TcpStore("127.0.0.1", server.port()).set("k", "v"); });
  TcpStore good("127.0.0.1", server.port(), with_token(kToken));
  good.set("k", "v");
}

TEST_F(Auth, StoreAttackersAreDisconnectedAndLegitimateClientsServed) {
  TcpStoreServer server("127.0.0.1", 0, server_token(kToken));
  TcpStore good("127.0.0.1", server.port(), with_token(kToken));
  good.set("k", "v");
  // A silent connection holds nothing up: the server does not block on it.
  Raw silent(server.port());

  Raw garbage(server.port());
  garbage.send("GET / HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(garbage.closed_by_peer());

  Raw bad_magic(server.port());
  bad_magic.send(std::string("\0CHAUTHX", 8) + std::string(32, 'n'));
  EXPECT_TRUE(bad_magic.closed_by_peer());

  Raw wrong_mac(server.port());
  std::string challenge = wrong_mac.challenge();
  EXPECT_EQ(challenge.substr(0, auth::kMagicBytes), auth::kMagic);
  wrong_mac.send(std::string(auth::kMacBytes, '\x13'));
  EXPECT_TRUE(wrong_mac.closed_by_peer());

  // A set smuggled behind a wrong answer is never applied.
  Raw smuggler(server.port());
  smuggler.challenge();
  std::string set_request("\x01\0\0\0\x08smuggled\0\0\0\x01x", 18);
  smuggler.send(std::string(auth::kMacBytes, '\x13') + set_request);
  EXPECT_TRUE(smuggler.closed_by_peer());

  EXPECT_EQ(good.get("k", 1s), "v");
  EXPECT_FALSE(good.check({"smuggled"}));
  TcpStore later("127.0.0.1", server.port(), with_token(kToken));
  EXPECT_EQ(later.get("k", 1s), "v");
  std::string l = log();
  EXPECT_THAT(l, HasSubstr("failed authentication"));
  EXPECT_THAT(l, HasSubstr("127.0.0.1:")) << "the peer's address is logged";
}

TEST_F(Auth, StoreClosesConnectionsThatDoNotAuthenticateInTime) {
  TcpStoreServer server("127.0.0.1", 0, server_token(kToken));
  Raw silent(server.port());
  Raw halfway(server.port());
  halfway.challenge();  // and then no answer
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(silent.closed_by_peer(20s));
  EXPECT_TRUE(halfway.closed_by_peer(5s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
  EXPECT_THAT(log(), HasSubstr("did not authenticate within 10 s"));
}

// ---- rank-to-rank connections ----

// Ranks as threads over a TcpStore with the tcp transport; CHORUS_AUTH_TOKEN is in the environment, where the
// communicators' configuration reads it.
TEST_F(Auth, CommunicatorsAuthenticateEveryConnection) {
  ::setenv("CHORUS_AUTH_TOKEN", kToken, 1);
  TcpStoreServer server("127.0.0.1", 0, server_token(kToken));
  const int n = 3;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), with_token(kToken));
        CommOptions o;
        o.transport = TransportKind::Tcp;
        o.timeout = 20s;
        auto comm = Communicator::create(store, r, n, o);
        std::vector<double> v(1000, r + 1.0);
        comm->all_reduce(v, ReduceOp::Sum);
        EXPECT_EQ(v[999], n * (n + 1) / 2.0);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(log(), Not(HasSubstr("not authenticated")));
}

TEST_F(Auth, RogueConnectionsToARankAreDroppedAndTheCommunicatorStillForms) {
  ::setenv("CHORUS_AUTH_TOKEN", kToken, 1);
  TcpStoreServer server("127.0.0.1", 0, server_token(kToken));
  CommOptions o;
  o.transport = TransportKind::Tcp;
  o.timeout = 30s;
  std::vector<double> results(2, 0);
  auto rank = [&](int r) {
    try {
      auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), with_token(kToken));
      auto comm = Communicator::create(store, r, 2, o);
      std::vector<double> v(100, r + 1.0);
      comm->all_reduce(v, ReduceOp::Sum);
      results[r] = v[99];
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  };
  std::thread rank0(rank, 0);
  std::optional<std::thread> rank1;
  struct Join {
    std::thread& a;
    std::optional<std::thread>& b;
    ~Join() {  // also when an assertion or exception leaves the test early
      if (a.joinable()) a.join();
      if (b && b->joinable()) b->join();
    }
  } join{rank0, rank1};
  // Rank 0 listens once every rank has published its identity: publish rank 1's (the same process's) for it,
  // then read where rank 0 listens. Rank 1 itself has not come yet.
  TcpStore spy("127.0.0.1", server.port(), with_token(kToken));
  spy.set("chorus/c1/proc/1", spy.get("chorus/c1/proc/0", 10s));
  base::HostPort hp = base::parse_host_port(spy.get("chorus/c1/tcp/addr/0", 10s), "rank 0");

  Raw wrong_mac(hp.port, hp.host);
  EXPECT_EQ(wrong_mac.challenge().substr(0, auth::kMagicBytes), auth::kMagic);
  wrong_mac.send(std::string(auth::kMacBytes, '\x13'));
  EXPECT_TRUE(wrong_mac.closed_by_peer());

  Raw garbage(hp.port, hp.host);
  garbage.send(std::string(64, 'G'));
  EXPECT_TRUE(garbage.closed_by_peer());

  rank1.emplace(rank, 1);
  rank0.join();
  rank1->join();
  EXPECT_EQ(results[0], 3.0);
  EXPECT_EQ(results[1], 3.0);
  std::string l = log();
  EXPECT_THAT(l, HasSubstr("failed authentication"));
  EXPECT_THAT(l, HasSubstr("did not authenticate"));
}

// The transport on its own, so that two ranks of one process can have different tokens.
struct TransportOutcome {
  std::string error0, error1;
  std::optional<ErrorCode> code0, code1;
};

TransportOutcome connect_pair(const std::string& token0, const std::string& token1, std::chrono::milliseconds timeout) {
  auto store = std::make_shared<MemoryStore>();
  TransportOutcome out;
  auto run = [&](int rank, const std::string& token, std::string& error, std::optional<ErrorCode>& code) {
    transport::TcpOptions opts;
    opts.auth_token = token;
    try {
      auto t = transport::TcpTransport::connect(*store, "t/", rank, 2, 0x1234, opts, std::nullopt, true,
                                                base::Deadline::after(timeout));
    } catch (const Error& e) {
      error = e.what();
      code = e.code();
    }
  };
  std::thread r0([&] { run(0, token0, out.error0, out.code0); });
  std::thread r1([&] { run(1, token1, out.error1, out.code1); });
  r0.join();
  r1.join();
  return out;
}

TEST_F(Auth, RanksWithTheSameTokenConnect) {
  TransportOutcome o = connect_pair(kToken, kToken, 10s);
  EXPECT_EQ(o.error0, "");
  EXPECT_EQ(o.error1, "");
}

TEST_F(Auth, RankWithAnotherTokenFailsClearly) {
  TransportOutcome o = connect_pair(kToken, kOtherToken, 3s);
  ASSERT_TRUE(o.code1.has_value());
  EXPECT_EQ(*o.code1, ErrorCode::PeerLost);
  EXPECT_THAT(o.error1, HasSubstr("authentication with rank 0 at 127.0.0.1:"));
  EXPECT_THAT(o.error1, HasSubstr("different CHORUS_AUTH_TOKEN"));
  EXPECT_THAT(o.error0, HasSubstr("timed out waiting for ranks 1")) << "rank 0 waits on for the real rank 1";
  for (const std::string& e : {o.error0, o.error1}) {
    EXPECT_THAT(e, Not(HasSubstr(kToken)));
    EXPECT_THAT(e, Not(HasSubstr(kOtherToken)));
  }
}

TEST_F(Auth, RankWithoutATokenIsToldThatItNeedsOne) {
  TransportOutcome o = connect_pair(kToken, "", 3s);
  EXPECT_THAT(o.error1, HasSubstr("requires authentication and this rank has no CHORUS_AUTH_TOKEN"));
  EXPECT_THAT(log(), HasSubstr("did not authenticate"));
}

TEST_F(Auth, RankWithATokenFailsAgainstARankWithout) {
  TransportOutcome o = connect_pair("", kToken, 3s);
  EXPECT_THAT(o.error1, HasSubstr("authentication with rank 0"));
  EXPECT_THAT(o.error1, HasSubstr("CHORUS_AUTH_TOKEN"));
  EXPECT_THAT(log(), HasSubstr("wants to authenticate, but this rank has no CHORUS_AUTH_TOKEN"));
}

TEST_F(Auth, TheTransportListensOnTheChosenAddressOnly) {
  auto store = std::make_shared<MemoryStore>();
  transport::TcpOptions opts;
  opts.ifname = "lo";
  auto t =
      transport::TcpTransport::connect(*store, "t/", 0, 1, 1, opts, std::nullopt, false, base::Deadline::after(5s));
  EXPECT_THAT(t->listen_address(), ::testing::StartsWith("127.0.0.1:"));
  auto loop =
      transport::TcpTransport::connect(*store, "u/", 0, 1, 1, {}, std::nullopt, true, base::Deadline::after(5s));
  EXPECT_THAT(loop->listen_address(), ::testing::StartsWith("127.0.0.1:"));
}

// ---- chorus-run ----

TEST_F(Auth, ChorusRunGeneratesATokenForTheJob) {
  // The ranks log at DEBUG into files of their own; the test reads them afterwards.
  std::string dir = log_path_ + ".ranks";
  std::filesystem::create_directories(dir);
  std::string cmd = std::string(CHORUS_BIN_DIR) + "/chorus-run -n 2 --timeout 60 -x CHORUS_TRANSPORT=tcp " +
                    "-x CHORUS_DEBUG=DEBUG -x CHORUS_DEBUG_FILE=" + dir + "/rank.%p.log -- sh -c 'echo \"TOKEN " +
                    "$CHORUS_AUTH_TOKEN\"; exec " + CHORUS_BIN_DIR +
                    "/chorus-perf allreduce -b 1K -e 1K -n 1 -w 0' 2>&1";
  ::unsetenv("CHORUS_DEBUG_FILE");  // chorus-run itself logs to its stderr
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  int status = ::pclose(p);
  ::setenv("CHORUS_DEBUG_FILE", log_path_.c_str(), 1);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;

  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(\[0\] TOKEN ([0-9a-f]{64}))"))) << out;
  std::string token = m[1];
  EXPECT_THAT(out, HasSubstr("[1] TOKEN " + token)) << "both ranks got the same token";
  std::string rank_logs;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) rank_logs += read_file(entry.path().string());
  EXPECT_THAT(rank_logs, HasSubstr("transport tcp")) << rank_logs;
  EXPECT_THAT(rank_logs, Not(HasSubstr("not authenticated")));
  EXPECT_THAT(rank_logs, Not(HasSubstr(token)));
  std::string without_token_lines = std::regex_replace(out, std::regex(R"(\[[01]\] TOKEN [0-9a-f]{64}\n)"), "");
  EXPECT_THAT(without_token_lines, Not(HasSubstr(token))) << "chorus-run never prints it";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus
