// Error paths: invalid arguments leave the communicator usable; mismatched calls, timeouts and departed
// peers raise the right error on every rank, promptly, and break the communicator for good.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>

#include "test_util.h"

namespace chorus::testing {
namespace {

using Clock = std::chrono::steady_clock;

class Errors : public ::testing::TestWithParam<TransportParam> {
 protected:
  CommOptions options(std::chrono::milliseconds timeout = std::chrono::seconds(30)) const {
    CommOptions o;
    o.transport = GetParam().transport;
    o.timeout = timeout;
    return o;
  }
};

// After an invalid call the communicator must still work: a real all_reduce gives the right sum.
void expect_usable(Communicator& comm) {
  std::vector<int32_t> v(100, comm.rank() + 1);
  comm.all_reduce(v, ReduceOp::Sum);
  int n = comm.size();
  EXPECT_EQ(v[0], n * (n + 1) / 2);
  EXPECT_EQ(v[99], n * (n + 1) / 2);
}

TEST_P(Errors, InvalidArgumentsAreRejectedBeforeSendingAndLeaveTheCommunicatorUsable) {
  run_world(3, options(), [](Communicator& comm) {
    const int n = comm.size();
    std::vector<float> buf(64, 1.0f), out(64 * n, 0.0f);
    auto F = DataType::Float32;
    auto S = ReduceOp::Sum;
    // Null buffers with count > 0.
    std::string msg = expect_error(ErrorCode::InvalidArgument, [&] { comm.all_reduce(nullptr, buf.data(), 8, F, S); });
    EXPECT_NE(msg.find("all_reduce"), std::string::npos) << msg;
    EXPECT_NE(msg.find("send"), std::string::npos) << msg;
    expect_error(ErrorCode::InvalidArgument, [&] { comm.all_reduce(buf.data(), nullptr, 8, F, S); });
    expect_error(ErrorCode::InvalidArgument, [&] { comm.all_gather(buf.data(), nullptr, 8, F); });
    expect_error(ErrorCode::InvalidArgument, [&] { comm.broadcast(buf.data(), nullptr, 8, F, 0); });
    // Null with count 0 is fine.
    comm.all_reduce(nullptr, nullptr, 0, F, S);
    // Root and peer out of range, peer == self.
    msg = expect_error(ErrorCode::InvalidArgument, [&] { comm.broadcast(buf.data(), buf.data(), 8, F, n); });
    EXPECT_NE(msg.find("root"), std::string::npos) << msg;
    expect_error(ErrorCode::InvalidArgument, [&] { comm.reduce(buf.data(), buf.data(), 8, F, S, -1); });
    expect_error(ErrorCode::InvalidArgument, [&] { comm.gather(buf.data(), out.data(), 8, F, 7); });
    expect_error(ErrorCode::InvalidArgument, [&] { comm.scatter(out.data(), buf.data(), 8, F, -3); });
    expect_error(ErrorCode::InvalidArgument, [&] { comm.send(buf.data(), 8, F, n); });
    expect_error(ErrorCode::InvalidArgument, [&] { comm.recv(buf.data(), 8, F, -1); });
    expect_error(ErrorCode::InvalidArgument, [&] { comm.send(buf.data(), 8, F, comm.rank()); });
    // count x element size, and count x world size, overflow.
    size_t huge = std::numeric_limits<size_t>::max() / 2;
    msg = expect_error(ErrorCode::InvalidArgument, [&] { comm.all_reduce(buf.data(), buf.data(), huge, F, S); });
    EXPECT_NE(msg.find("overflow"), std::string::npos) << msg;
    expect_error(ErrorCode::InvalidArgument,
                 [&] { comm.all_gather(buf.data(), out.data(), huge / 4, DataType::UInt8); });
    // Enum values out of range (an unsupported dtype/op pair).
    expect_error(ErrorCode::InvalidArgument,
                 [&] { comm.all_reduce(buf.data(), buf.data(), 8, static_cast<DataType>(42), S); });
    expect_error(ErrorCode::InvalidArgument,
                 [&] { comm.all_reduce(buf.data(), buf.data(), 8, F, static_cast<ReduceOp>(9)); });
    // Partial overlap (exact equality is in place and allowed).
    msg = expect_error(ErrorCode::InvalidArgument, [&] { comm.all_reduce(buf.data(), buf.data() + 1, 8, F, S); });
    EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
    // all_gather in place must put this rank's block at recv + rank * count.
    int wrong_block = (comm.rank() + 1) % n;
    expect_error(ErrorCode::InvalidArgument,
                 [&] { comm.all_gather(out.data() + wrong_block * 8, out.data(), 8, F); });
    expect_error(ErrorCode::InvalidArgument, [&] { comm.all_to_all(out.data(), out.data() + 1, 8, F); });
    // A typed call with mismatched sizes.
    std::vector<float> small(3);
    expect_error(ErrorCode::InvalidArgument, [&] { comm.all_gather(small, buf); });
    EXPECT_FALSE(comm.failed());
    expect_usable(comm);
  });
}

TEST_P(Errors, DifferentCollectivesRaiseMismatchOnEveryRank) {
  std::atomic<int> mismatches{0};
  // Whatever algorithms the calls run, even ones whose first frames never meet, the ranks learn of it in
  // about a second (CHORUS_MISMATCH_CHECK_MS), long before the 30 s timeout.
  run_world(3, options(), [&](Communicator& comm) {
    std::vector<float> buf(1000, 1.0f);
    auto t0 = Clock::now();
    try {
      if (comm.rank() == 1) {
        comm.broadcast(buf.data(), buf.data(), buf.size(), DataType::Float32, 0);
      } else {
        comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
      }
      // A rank whose part of the call completes learns at its next call.
      comm.barrier();
      ADD_FAILURE() << "rank " << comm.rank() << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Mismatch) << "rank " << comm.rank() << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("mismatch"), std::string::npos) << e.what();
      ++mismatches;
    }
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
    EXPECT_TRUE(comm.failed());
    // Every later call reports that the communicator is broken, with the original cause.
    std::string msg = expect_error(ErrorCode::Aborted, [&] { comm.barrier(); });
    EXPECT_NE(msg.find("failed earlier"), std::string::npos) << msg;
  });
  EXPECT_EQ(mismatches.load(), 3);
}

TEST_P(Errors, SameCollectiveWithDifferentArgumentsRaisesMismatch) {
  struct Case {
    const char* name;
    std::function<void(Communicator&, std::vector<float>&)> call;
  };
  std::vector<Case> cases = {
      {"count", [](Communicator& c, std::vector<float>& b) {
         c.all_reduce(b.data(), b.data(), c.rank() == 0 ? 100 : 200, DataType::Float32, ReduceOp::Sum);
       }},
      {"dtype", [](Communicator& c, std::vector<float>& b) {
         c.all_reduce(b.data(), b.data(), 100, c.rank() == 0 ? DataType::Float32 : DataType::Int32, ReduceOp::Sum);
       }},
      {"op", [](Communicator& c, std::vector<float>& b) {
         c.all_reduce(b.data(), b.data(), 100, DataType::Float32, c.rank() == 0 ? ReduceOp::Sum : ReduceOp::Max);
       }},
      {"root", [](Communicator& c, std::vector<float>& b) {
         c.broadcast(b.data(), b.data(), 100, DataType::Float32, c.rank() == 0 ? 0 : 1);
         c.barrier();
       }},
  };
  for (auto& tc : cases) {
    SCOPED_TRACE(tc.name);
    std::atomic<int> mismatches{0};
    run_world(2, options(), [&](Communicator& comm) {
      std::vector<float> buf(400, 1.0f);
      try {
        tc.call(comm, buf);
        comm.barrier();
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
        ++mismatches;
      }
    });
    EXPECT_EQ(mismatches.load(), 2) << tc.name;
  }
}

TEST_P(Errors, AMissingRankIsATimeoutThatNamesIt) {
  auto timeout = std::chrono::milliseconds(400);
  run_world(2, options(timeout), [&](Communicator& comm) {
    std::vector<float> buf(10, 1.0f);
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      // By now rank 0 has timed out and told us; this call fails at once.
      auto t0 = Clock::now();
      expect_error(ErrorCode::Timeout, [&] { comm.all_reduce(buf, ReduceOp::Sum); });
      EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(300));
      return;
    }
    auto t0 = Clock::now();
    std::string msg = expect_error(ErrorCode::Timeout, [&] { comm.all_reduce(buf, ReduceOp::Sum); });
    auto took = Clock::now() - t0;
    EXPECT_GE(took, timeout);
    EXPECT_LT(took, timeout + std::chrono::seconds(2));
    EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  });
}

TEST_P(Errors, APeerThatClosesItsCommunicatorIsReportedAsLost) {
  run_world(3, options(), [&](Communicator& comm) {
    if (comm.rank() == 2) return;  // leaves: its communicator is destroyed at once
    std::vector<float> buf(1000, 1.0f);
    auto t0 = Clock::now();
    try {
      comm.all_reduce(buf, ReduceOp::Sum);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
      EXPECT_EQ(e.peer(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  });
}

TEST_P(Errors, ASecondThreadInTheSameCommunicatorIsRefused) {
  run_world(2, options(), [&](Communicator& comm) {
    std::vector<int32_t> v(16, 1);
    if (comm.rank() == 0) {
      // Thread A blocks in recv; thread B's call must be refused, not interleaved.
      std::atomic<bool> in_recv{false};
      std::thread a([&] {
        in_recv = true;
        comm.recv(v, 1);
      });
      while (!in_recv) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::string msg = expect_error(ErrorCode::InvalidArgument, [&] { comm.barrier(); });
      EXPECT_NE(msg.find("barrier: another thread"), std::string::npos) << msg;
      // Refused too, each naming itself: thread A still holds the communicator. Synchronous, asynchronous,
      // synchronize and recovery calls take the same check.
      expect_error(ErrorCode::InvalidArgument, [&] { comm.send(std::vector<int32_t>{1}, 1); });
      std::vector<int32_t> w(4, 1);
      msg = expect_error(ErrorCode::InvalidArgument, [&] { comm.all_reduce_async(w.data(), w.data(), w.size(), DataType::Int32, ReduceOp::Sum); });
      EXPECT_NE(msg.find("all_reduce: another thread"), std::string::npos) << msg;
      msg = expect_error(ErrorCode::InvalidArgument, [&] { comm.synchronize(); });
      EXPECT_NE(msg.find("synchronize: another thread"), std::string::npos) << msg;
      msg = expect_error(ErrorCode::InvalidArgument, [&] { comm.shrink({1}); });
      EXPECT_NE(msg.find("shrink: another thread"), std::string::npos) << msg;
      EXPECT_EQ(w, std::vector<int32_t>(4, 1)) << "a refused call touched its buffer";
      a.join();
      EXPECT_FALSE(comm.failed());
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      comm.send(v, 0);
    }
    expect_usable(comm);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, Errors,
                         ::testing::Values(TransportParam{TransportKind::InProc}, TransportParam{TransportKind::Tcp},
                                           TransportParam{TransportKind::Shm}),
                         transport_name);

}  // namespace
}  // namespace chorus::testing
