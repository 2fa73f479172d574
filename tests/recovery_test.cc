// Communicator::abort(), shrink(), replace_lost() and join_replacement().
//
// Abort and shrink run with ranks as threads over every transport; the training loops run each rank as a
// process (tests/programs/test_worker.cc, train-recover), kill one with SIGKILL in the middle, and recover.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>

#include "chorus/chorus.h"
#include "subprocess.h"
#include "test_util.h"

namespace chorus::testing {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Creates `size` communicators, one per thread, on one MemoryStore; returns them in rank order.
std::vector<std::unique_ptr<Communicator>> make_world(int size, const CommOptions& options,
                                                       std::shared_ptr<Store> store = nullptr) {
  if (!store) store = std::make_shared<MemoryStore>();
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        comms[static_cast<size_t>(r)] = Communicator::create(store, r, size, options);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& c : comms) {
    if (!c) throw std::runtime_error("a rank could not create its communicator");
  }
  return comms;
}

// Ranks as threads over the parameter's transport, with a 30 s bound on every call.
class OverTransport : public ::testing::TestWithParam<TransportParam> {
 protected:
  CommOptions options() const {
    CommOptions o;
    o.transport = GetParam().transport;
    o.timeout = std::chrono::seconds(30);
    return o;
  }
};
using AbortTest = OverTransport;

// Rank 0 waits inside an all_reduce that rank 1 never joins; a third thread aborts rank 0's communicator.
// The blocked call, later calls and rank 1's next call all throw Aborted, well within a second.
TEST_P(AbortTest, FromAnotherThreadEndsABlockedCallAndReachesThePeers) {
  auto comms = make_world(2, options());
  std::vector<float> buf(1024, 1.0f);
  auto start = Clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    start = Clock::now();
    comms[0]->abort("operator pressed stop");
  });
  std::string what = expect_error(ErrorCode::Aborted, [&] { comms[0]->all_reduce(buf, ReduceOp::Sum); });
  double blocked_ms = ms_since(start);
  aborter.join();
  EXPECT_NE(what.find("operator pressed stop"), std::string::npos) << what;
  EXPECT_LT(blocked_ms, 1000.0);
  std::printf("blocked call on the aborting rank returned %.1f ms after abort()\n", blocked_ms);

  // Later calls on the aborted communicator fail at once, naming the reason.
  what = expect_error(ErrorCode::Aborted, [&] { comms[0]->barrier(); });
  EXPECT_NE(what.find("operator pressed stop"), std::string::npos) << what;

  // The peer learns it at its next call, naming rank 0.
  auto t = Clock::now();
  try {
    comms[1]->all_reduce(buf, ReduceOp::Sum);
    ADD_FAILURE() << "rank 1's call succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
    EXPECT_EQ(e.peer(), 0) << e.what();
    EXPECT_NE(std::string(e.what()).find("operator pressed stop"), std::string::npos) << e.what();
  }
  EXPECT_LT(ms_since(t), 1000.0);
}

// Rank 1 waits in a broadcast from rank 0; rank 0 (idle) aborts. Rank 1's call ends within a second.
TEST_P(AbortTest, OnAnIdleRankEndsThePeersBlockedCall) {
  auto comms = make_world(3, options());
  std::vector<std::future<std::pair<ErrorCode, int>>> waiting;
  std::vector<Clock::time_point> ends(3);
  for (int r : {1, 2}) {
    waiting.push_back(std::async(std::launch::async, [&, r] {
      std::vector<int32_t> buf(4096);
      try {
        comms[static_cast<size_t>(r)]->broadcast(buf, 0);
      } catch (const Error& e) {
        ends[static_cast<size_t>(r)] = Clock::now();
        return std::make_pair(e.code(), e.peer());
      }
      return std::make_pair(ErrorCode::Internal, -2);
    }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  auto start = Clock::now();
  comms[0]->abort("shutting down");
  for (size_t i = 0; i < waiting.size(); ++i) {
    auto [code, peer] = waiting[i].get();
    EXPECT_EQ(code, ErrorCode::Aborted) << "rank " << i + 1;
    EXPECT_EQ(peer, 0) << "rank " << i + 1;
    double ms = std::chrono::duration<double, std::milli>(ends[i + 1] - start).count();
    EXPECT_LT(ms, 1000.0) << "rank " << i + 1;
    std::printf("rank %zu's blocked broadcast threw %.1f ms after rank 0's abort()\n", i + 1, ms);
  }
}

// Asynchronous operations queued behind a blocked one complete with Aborted.
TEST_P(AbortTest, QueuedAsynchronousOperationsCompleteWithAborted) {
  auto comms = make_world(2, options());
  std::vector<float> a(256, 1.0f), b(256, 1.0f), c(256, 1.0f);
  std::vector<Work> works;
  works.push_back(comms[0]->all_reduce_async(a.data(), a.data(), a.size(), DataType::Float32, ReduceOp::Sum));
  works.push_back(comms[0]->all_reduce_async(b.data(), b.data(), b.size(), DataType::Float32, ReduceOp::Sum));
  works.push_back(comms[0]->all_reduce_async(c.data(), c.data(), c.size(), DataType::Float32, ReduceOp::Sum));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = Clock::now();
  comms[0]->abort("test");
  for (auto& w : works) expect_error(ErrorCode::Aborted, [&] { w.wait(); });
  EXPECT_LT(ms_since(start), 1000.0);
}

TEST_P(AbortTest, IsIdempotentAndHarmlessOnAFailedCommunicator) {
  auto comms = make_world(2, options());
  comms[1]->abort("first");
  comms[1]->abort("second");
  std::string what = expect_error(ErrorCode::Aborted, [&] { comms[1]->barrier(); });
  EXPECT_NE(what.find("first"), std::string::npos) << what;
  EXPECT_EQ(what.find("second"), std::string::npos) << what;
  // Rank 0 fails from rank 1's abort, then aborts itself: nothing throws, the error stays rank 1's.
  expect_error(ErrorCode::Aborted, [&] { comms[0]->barrier(); });
  comms[0]->abort("late");
  what = expect_error(ErrorCode::Aborted, [&] { comms[0]->barrier(); });
  EXPECT_NE(what.find("first"), std::string::npos) << what;
}

INSTANTIATE_TEST_SUITE_P(Transports, AbortTest,
                         ::testing::Values(TransportParam{TransportKind::InProc}, TransportParam{TransportKind::Tcp},
                                           TransportParam{TransportKind::Shm}),
                         transport_name);

// ---------------------------------------------------------------- shrink with ranks as threads

using ShrinkTest = OverTransport;

// Checks an all_reduce of `ids` on `comm`: every rank contributes (its id + 1).
void expect_sum_of(Communicator& comm, int64_t id, int64_t expected) {
  std::vector<int64_t> v(1000, id + 1);
  comm.all_reduce(v, ReduceOp::Sum);
  EXPECT_EQ(v[0], expected);
  EXPECT_EQ(v[999], expected);
}

TEST_P(ShrinkTest, ExcludingARankGivesTheOthersACommunicatorInTheSameOrder) {
  auto comms = make_world(5, options());
  std::vector<std::unique_ptr<Communicator>> children(5);
  std::vector<std::thread> threads;
  for (int r : {0, 1, 3, 4}) {
    threads.emplace_back([&, r] { children[static_cast<size_t>(r)] = comms[static_cast<size_t>(r)]->shrink({2}); });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  const std::map<int, int> new_rank{{0, 0}, {1, 1}, {3, 2}, {4, 3}};
  for (auto [old, now] : new_rank) {
    ASSERT_TRUE(children[static_cast<size_t>(old)]);
    EXPECT_EQ(children[static_cast<size_t>(old)]->size(), 4);
    EXPECT_EQ(children[static_cast<size_t>(old)]->rank(), now);
    threads.emplace_back([&, old] { expect_sum_of(*children[static_cast<size_t>(old)], old, 1 + 2 + 4 + 5); });
  }
  for (auto& t : threads) t.join();
  // The parent is untouched: it was not failed, and ranks 0..4 can still use it.
  threads.clear();
  for (int r = 0; r < 5; ++r) threads.emplace_back([&, r] { expect_sum_of(*comms[static_cast<size_t>(r)], r, 15); });
  for (auto& t : threads) t.join();
}

// A rank that neither calls shrink nor is known dead is presumed dead after the grace period; if it calls
// shrink later, it is told it was left out.
TEST_P(ShrinkTest, ARankThatNeverCallsIsLeftOutAfterTheGracePeriod) {
  ::setenv("CHORUS_SHRINK_GRACE_MS", "300", 1);
  auto comms = make_world(3, options());
  ::unsetenv("CHORUS_SHRINK_GRACE_MS");
  std::vector<std::unique_ptr<Communicator>> children(3);
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int r : {0, 2}) threads.emplace_back([&, r] { children[static_cast<size_t>(r)] = comms[static_cast<size_t>(r)]->shrink(); });
  for (auto& t : threads) t.join();
  double ms = ms_since(start);
  EXPECT_GE(ms, 250.0);
  EXPECT_LT(ms, 5000.0);
  ASSERT_TRUE(children[0] && children[2]);
  EXPECT_EQ(children[0]->size(), 2);
  EXPECT_EQ(children[2]->rank(), 1);
  threads.clear();
  for (int r : {0, 2}) threads.emplace_back([&, r] { expect_sum_of(*children[static_cast<size_t>(r)], r, 1 + 3); });
  for (auto& t : threads) t.join();
  std::string what = expect_error(ErrorCode::Aborted, [&] { comms[1]->shrink(); });
  EXPECT_NE(what.find("left out"), std::string::npos) << what;
}

TEST_P(ShrinkTest, ExcludedRankOutOfRangeIsInvalidArgument) {
  auto comms = make_world(1, options());
  expect_error(ErrorCode::InvalidArgument, [&] { comms[0]->shrink({3}); });
}

INSTANTIATE_TEST_SUITE_P(Transports, ShrinkTest,
                         ::testing::Values(TransportParam{TransportKind::InProc}, TransportParam{TransportKind::Tcp},
                                           TransportParam{TransportKind::Shm}),
                         transport_name);

// ---------------------------------------------------------------- training loops with a real death

struct LoopParam {
  const char* mode;  // "shrink" or "replace"
  const char* transport;
  int world_size;
  int victim;
};

class TrainingLoop : public ::testing::TestWithParam<LoopParam> {};

TEST_P(TrainingLoop, SurvivesAKilledRankWithCorrectResultsAfterwards) {
  const LoopParam p = GetParam();
  const int steps = 40, kill_step = 17;
  TcpStoreServer server("127.0.0.1", 0);
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());
  auto env = [&](int rank) {
    return std::vector<std::string>{"CHORUS_RANK=" + std::to_string(rank),
                                    "CHORUS_WORLD_SIZE=" + std::to_string(p.world_size),
                                    "CHORUS_STORE_ADDR=" + addr,
                                    "CHORUS_STORE_HOSTED=1",
                                    std::string("CHORUS_TRANSPORT=") + p.transport,
                                    "CHORUS_TIMEOUT_MS=60000",
                                    "CHORUS_SHRINK_GRACE_MS=20000"};
  };
  std::vector<Child> children;
  for (int r = 0; r < p.world_size; ++r) {
    children.push_back(spawn({worker_path(), "train-recover", p.mode, std::to_string(p.victim),
                              std::to_string(kill_step), std::to_string(steps), "100000"},
                             env(r)));
  }
  const bool replace = std::string(p.mode) == "replace";
  if (replace) {
    children.push_back(spawn({worker_path(), "train-recover", "replacement", "-1", "-1", std::to_string(steps),
                              "100000"},
                             {"CHORUS_STORE_ADDR=" + addr, std::string("CHORUS_TRANSPORT=") + p.transport,
                              "CHORUS_TIMEOUT_MS=60000"}));
  }
  wait_all(children, std::chrono::seconds(120));

  const Child& victim = children[static_cast<size_t>(p.victim)];
  EXPECT_TRUE(WIFSIGNALED(victim.status) && WTERMSIG(victim.status) == SIGKILL) << victim.output;
  const int final_size = replace ? p.world_size : p.world_size - 1;
  for (size_t i = 0; i < children.size(); ++i) {
    if (static_cast<int>(i) == p.victim) continue;
    const Child& c = children[i];
    SCOPED_TRACE("process " + std::to_string(i) + ": " + c.output);
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0);
    EXPECT_NE(c.output.find("size " + std::to_string(final_size) + " steps"), std::string::npos);
    if (static_cast<int>(i) < p.world_size) {
      // A survivor: it saw the death (PeerLost naming the victim, or Aborted from a peer that saw it).
      EXPECT_NE(c.output.find("CAUGHT"), std::string::npos);
      EXPECT_NE(c.output.find("rank " + std::to_string(p.victim)), std::string::npos);
      size_t at = c.output.find("RECOVERED ");
      ASSERT_NE(at, std::string::npos);
      std::istringstream rec(c.output.substr(at + 10));
      int size = 0, rank = -1;
      long long ms = -1;
      rec >> size >> rank >> ms;
      EXPECT_EQ(size, final_size);
      std::printf("%s: rank %zu recovered as rank %d of %d in %lld ms\n", p.mode, i, rank, size, ms);
    } else {
      EXPECT_NE(c.output.find("JOINED rank " + std::to_string(p.victim)), std::string::npos);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, TrainingLoop,
                         ::testing::Values(LoopParam{"shrink", "tcp", 4, 2}, LoopParam{"shrink", "shm", 4, 2},
                                           LoopParam{"shrink", "tcp", 3, 0}, LoopParam{"replace", "tcp", 4, 1},
                                           LoopParam{"replace", "shm", 3, 2}),
                         [](const ::testing::TestParamInfo<LoopParam>& i) {
                           return std::string(i.param.mode) + "_" + i.param.transport + "_" +
                                  std::to_string(i.param.world_size) + "ranks_victim" +
                                  std::to_string(i.param.victim);
                         });

}  // namespace
}  // namespace chorus::testing
