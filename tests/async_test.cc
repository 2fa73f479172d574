// Asynchronous operations, work handles and groups, on every transport, against serial references.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <random>
#include <thread>

#include "test_util.h"

namespace chorus::testing {
namespace {

using Clock = std::chrono::steady_clock;

class Async : public ::testing::TestWithParam<TransportParam> {
 protected:
  CommOptions options(std::chrono::milliseconds timeout = std::chrono::seconds(60)) const {
    CommOptions o;
    o.transport = GetParam().transport;
    o.timeout = timeout;
    return o;
  }
};

// Rank r's value at element i, and the sum over ranks (exact in float for these magnitudes).
float value(int rank, size_t i, int call) { return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 97) + call); }
float sum_of(int size, size_t i, int call) {
  float s = 0;
  for (int r = 0; r < size; ++r) s += value(r, i, call);
  return s;
}

TEST_P(Async, ManyAllReducesInFlightCompleteInOrderWithCorrectResults) {
  for (int n : {1, 2, 3, 4}) {
    run_world(n, options(), [&](Communicator& comm) {
      constexpr int kCalls = 24;
      std::vector<std::vector<float>> bufs(kCalls);
      std::vector<Work> works;
      for (int c = 0; c < kCalls; ++c) {
        size_t count = (c % 6 == 0) ? 0 : static_cast<size_t>(1) << (c % 17);  // 0 .. 64 Ki elements
        bufs[c].resize(count);
        for (size_t i = 0; i < count; ++i) bufs[c][i] = value(comm.rank(), i, c);
        works.push_back(comm.all_reduce_async(bufs[c].data(), bufs[c].data(), count, DataType::Float32, ReduceOp::Sum));
        EXPECT_TRUE(works.back().valid());
      }
      // Wait in reverse: completion does not depend on the order of waits.
      for (int c = kCalls - 1; c >= 0; --c) works[c].wait();
      for (int c = 0; c < kCalls; ++c) {
        expect_elements(DataType::Float32, bufs[c].data(), bufs[c].size(),
                        [&](size_t i) { return sum_of(comm.size(), i, c); }, "call " + std::to_string(c));
        EXPECT_TRUE(works[c].test());
        EXPECT_TRUE(works[c].wait(std::chrono::milliseconds(0)));
      }
    });
  }
}

TEST_P(Async, EveryCollectiveHasAnAsyncFormThatMatchesTheSynchronousOne) {
  run_world(3, options(), [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    constexpr size_t kCount = 1000;
    auto fill = [&](std::vector<int32_t>& v, int salt) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(r * 100000 + i * 7 + salt);
    };
    std::vector<int32_t> in(kCount * n), a(kCount * n), b(kCount * n);
    fill(in, 1);
    auto both = [&](const char* what, auto&& sync, auto&& async) {
      std::fill(a.begin(), a.end(), -1);
      std::fill(b.begin(), b.end(), -1);
      sync(a.data());
      Work w = async(b.data());
      w.wait();
      EXPECT_EQ(a, b) << what;
    };
    const auto I = DataType::Int32;
    both("all_reduce", [&](int32_t* o) { comm.all_reduce(in.data(), o, kCount, I, ReduceOp::Max); },
         [&](int32_t* o) { return comm.all_reduce_async(in.data(), o, kCount, I, ReduceOp::Max); });
    both("broadcast", [&](int32_t* o) { comm.broadcast(in.data(), o, kCount, I, 1); },
         [&](int32_t* o) { return comm.broadcast_async(in.data(), o, kCount, I, 1); });
    both("reduce", [&](int32_t* o) { comm.reduce(in.data(), o, kCount, I, ReduceOp::Sum, 2); },
         [&](int32_t* o) { return comm.reduce_async(in.data(), o, kCount, I, ReduceOp::Sum, 2); });
    both("all_gather", [&](int32_t* o) { comm.all_gather(in.data(), o, kCount, I); },
         [&](int32_t* o) { return comm.all_gather_async(in.data(), o, kCount, I); });
    both("reduce_scatter", [&](int32_t* o) { comm.reduce_scatter(in.data(), o, kCount, I, ReduceOp::Sum); },
         [&](int32_t* o) { return comm.reduce_scatter_async(in.data(), o, kCount, I, ReduceOp::Sum); });
    both("all_to_all", [&](int32_t* o) { comm.all_to_all(in.data(), o, kCount, I); },
         [&](int32_t* o) { return comm.all_to_all_async(in.data(), o, kCount, I); });
    both("gather", [&](int32_t* o) { comm.gather(in.data(), o, kCount, I, 0); },
         [&](int32_t* o) { return comm.gather_async(in.data(), o, kCount, I, 0); });
    both("scatter", [&](int32_t* o) { comm.scatter(in.data(), o, kCount, I, 2); },
         [&](int32_t* o) { return comm.scatter_async(in.data(), o, kCount, I, 2); });
    comm.barrier_async().wait();
    // Independent reference for one of them: the all_reduce max is rank n-1's input.
    std::vector<int32_t> out(kCount);
    comm.all_reduce_async(in.data(), out.data(), kCount, I, ReduceOp::Max, CallOptions{"ring"}).wait();
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(out[i], static_cast<int32_t>((n - 1) * 100000 + i * 7 + 1));
  });
}

TEST_P(Async, SynchronousCallsRunAfterQueuedAsynchronousOnes) {
  run_world(2, options(), [&](Communicator& comm) {
    std::vector<float> big(1 << 20, 1.0f), small(4, 2.0f);
    Work w = comm.all_reduce_async(big.data(), big.data(), big.size(), DataType::Float32, ReduceOp::Sum);
    comm.all_reduce(small, ReduceOp::Sum);  // must not overtake: sequence numbers would mismatch
    EXPECT_TRUE(w.test());                  // it ran first
    EXPECT_EQ(small[0], 4.0f);
    EXPECT_EQ(big[12345], 2.0f);
    EXPECT_EQ(comm.last_operation().count, 4u);
  });
}

TEST_P(Async, WaitWithATimeoutAndTestDoNotBlock) {
  run_world(2, options(), [&](Communicator& comm) {
    std::vector<int64_t> v(8, comm.rank());
    if (comm.rank() == 0) {
      Work w = comm.recv_async(v.data(), v.size(), DataType::Int64, 1);
      auto t0 = Clock::now();
      EXPECT_FALSE(w.test());
      EXPECT_FALSE(w.wait(std::chrono::milliseconds(100)));
      EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(90));
      comm.send(std::vector<int64_t>{7}, 1);  // tells rank 1 to go; runs after the queued recv completes
      w.wait();
      EXPECT_EQ(v, std::vector<int64_t>(8, 1));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.send(v, 0);
      std::vector<int64_t> go(1);
      comm.recv(go, 0);
      EXPECT_EQ(go[0], 7);
    }
  });
}

TEST_P(Async, InvalidArgumentsThrowAtTheCallAndQueueNothing) {
  run_world(2, options(), [&](Communicator& comm) {
    std::vector<float> buf(16, 1.0f);
    expect_error(ErrorCode::InvalidArgument, [&] {
      comm.all_reduce_async(nullptr, buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
    });
    expect_error(ErrorCode::InvalidArgument,
                 [&] { comm.broadcast_async(buf.data(), buf.data(), buf.size(), DataType::Float32, 5); });
    expect_error(ErrorCode::InvalidArgument,
                 [&] { comm.send_async(buf.data(), buf.size(), DataType::Float32, comm.rank()); });
    std::string msg = expect_error(ErrorCode::InvalidArgument, [&] {
      comm.all_reduce_async(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum,
                            CallOptions{"bruck"});
    });
    EXPECT_NE(msg.find("bruck"), std::string::npos) << msg;
    expect_error(ErrorCode::InvalidArgument, [&] { comm.group_end(); });
    EXPECT_FALSE(comm.failed());
    comm.all_reduce_async(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum).wait();
    EXPECT_EQ(buf[3], 2.0f);
  });
}

TEST_P(Async, AnEmptyWorkIsComplete) {
  Work w;
  EXPECT_FALSE(w.valid());
  EXPECT_TRUE(w.test());
  EXPECT_TRUE(w.wait(std::chrono::milliseconds(0)));
  w.wait();
}

TEST_P(Async, ALostPeerIsRethrownByWaitAndLaterCallsAreAborted) {
  run_world(3, options(std::chrono::seconds(20)), [&](Communicator& comm) {
    std::vector<float> buf(1 << 16, 1.0f);
    comm.all_reduce_async(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum).wait();
    if (comm.rank() == 2) return;  // leaves: its communicator is destroyed
    auto t0 = Clock::now();
    Work first = comm.all_reduce_async(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
    Work second = comm.all_reduce_async(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
    try {
      first.wait();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
      EXPECT_EQ(e.peer(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    }
    // The operation queued behind it fails with the cause, and so does every later call, at once.
    std::string msg = expect_error(ErrorCode::Aborted, [&] { second.wait(); });
    EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
    // Each Work rethrows its own error, every time it is asked.
    expect_error(ErrorCode::PeerLost, [&] { first.test(); });
    expect_error(ErrorCode::Aborted, [&] { second.test(); });
    expect_error(ErrorCode::Aborted, [&] { comm.barrier_async(); });
    expect_error(ErrorCode::Aborted, [&] { comm.barrier(); });
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
    EXPECT_TRUE(comm.failed());
  });
}

TEST_P(Async, DifferentOperationsOnDifferentRanksAreAMismatch) {
  CommOptions o = options(std::chrono::seconds(20));
  run_world(2, o, [&](Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    Work w = comm.rank() == 0
                 ? comm.all_reduce_async(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum)
                 : comm.broadcast_async(buf.data(), buf.data(), buf.size(), DataType::Float32, 0);
    std::string msg = expect_error(ErrorCode::Mismatch, [&] { w.wait(); });
    EXPECT_TRUE(msg.find("all_reduce") != std::string::npos || msg.find("allreduce") != std::string::npos) << msg;
  });
}

TEST_P(Async, TheDestructorRunsEverythingStillQueued) {
  std::vector<std::vector<double>> results(3);
  run_world(3, options(), [&](Communicator& comm) {
    auto& v = results[comm.rank()];
    v.assign(5000, comm.rank() + 1.0);
    for (int i = 0; i < 5; ++i) comm.all_reduce_async(v.data(), v.data(), v.size(), DataType::Float64, ReduceOp::Sum);
    // Returning destroys the communicator with up to five operations queued.
  });
  // 6 after the first, 18 after the second, ... 6 * 3^4 after the fifth.
  for (const auto& v : results) {
    ASSERT_EQ(v.size(), 5000u);
    EXPECT_EQ(v[0], 6.0 * 81);
    EXPECT_EQ(v[4999], 6.0 * 81);
  }
}

TEST_P(Async, SynchronizeWaitsForEverythingQueued) {
  run_world(2, options(), [&](Communicator& comm) {
    std::vector<int32_t> v(100000, 1);
    for (int i = 0; i < 4; ++i) comm.all_reduce_async(v.data(), v.data(), v.size(), DataType::Int32, ReduceOp::Sum);
    comm.synchronize();
    EXPECT_EQ(v[99999], 16);
    EXPECT_EQ(comm.traffic().operations, 4u);
  });
}

// ---- groups

TEST_P(Async, AGroupOfSmallAllReducesIsFusedAndCorrect) {
  // The copy rate picks the built-in tuning's entry, whose estimates decide fusion: a fixed one keeps the
  // decision the same under sanitizers, whose memcpy the creation-time probe would time.
  ScopedEnv copy_rate("CHORUS_COPY_GBPS", "35");
  for (int n : {1, 2, 3, 5}) {
    run_world(n, options(), [&](Communicator& comm) {
      const int r = comm.rank();
      constexpr int kCalls = 40;
      std::vector<std::vector<float>> in(kCalls), out(kCalls);
      std::vector<Work> works;
      uint64_t ops_before = comm.traffic().operations;
      comm.group_start();
      size_t total = 0;
      for (int c = 0; c < kCalls; ++c) {
        size_t count = static_cast<size_t>(c * 13 % 50);  // includes 0
        total += count;
        in[c].resize(count);
        out[c].assign(count, -1.0f);
        for (size_t i = 0; i < count; ++i) in[c][i] = value(r, i, c);
        if (c % 3 == 0) {
          works.push_back(comm.all_reduce_async(in[c].data(), out[c].data(), count, DataType::Float32, ReduceOp::Sum));
        } else if (c % 3 == 1) {
          comm.all_reduce(in[c].data(), out[c].data(), count, DataType::Float32, ReduceOp::Sum);  // recorded
        } else {
          out[c] = in[c];  // in place
          comm.all_reduce(out[c].data(), out[c].data(), count, DataType::Float32, ReduceOp::Sum);
        }
      }
      // Nothing has run yet: the buffers are untouched.
      if (n > 1) {
        EXPECT_EQ(out[1].size() ? out[1][0] : -1.0f, -1.0f);
      }
      comm.group_end();
      for (auto& w : works) EXPECT_TRUE(w.test());
      for (int c = 0; c < kCalls; ++c) {
        expect_elements(DataType::Float32, out[c].data(), out[c].size(),
                        [&](size_t i) { return sum_of(n, i, c); }, "call " + std::to_string(c));
      }
      // One fused transfer carried them all. On one rank each all_reduce is a local copy, which fusing would
      // only add copies to: they run one by one.
      OperationInfo info = comm.last_operation();
      EXPECT_EQ(info.collective, "allreduce");
      if (n > 1) {
        EXPECT_EQ(info.count, total);
        EXPECT_EQ(comm.traffic().operations - ops_before, 1u);
      } else {
        EXPECT_EQ(comm.traffic().operations - ops_before, static_cast<uint64_t>(kCalls));
      }
    });
  }
}

// A group fuses a run of all_reduces where the cost model says one call over the communicator's staging buffer,
// plus copying the inputs in and the results out, beats the calls one by one; the fused call is an in-place
// call over registered memory (from 64 KiB), and chooses as such a call of its size does. The reference: the
// same calls made separately, and one call over a mem_alloc buffer, with their estimates.
TEST_P(Async, AGroupFusesWhereTheModelSaysItPaysAndRunsAsARegisteredCallOfItsSize) {
  struct Case {
    int calls;
    size_t per_call;  // elements
  };
  // A fixed copy rate picks the built-in tuning's entry for a fast host (with registered tables) and prices
  // the copies the same way under sanitizers, whose memcpy the creation-time probe would time.
  ScopedEnv copy_rate("CHORUS_COPY_GBPS", "35");
  for (Case cs : {Case{16, 250}, Case{32, 1024}, Case{4, size_t{64} << 10}}) {  // 16 KB, 128 KiB, 1 MiB in all
    run_world(2, options(), [&](Communicator& comm) {
      const int n = comm.size(), r = comm.rank();
      const int k = cs.calls;
      const size_t per_call = cs.per_call, total = k * per_call, bytes = total * sizeof(float);
      std::vector<std::vector<float>> in(k), out(k);
      for (int c = 0; c < k; ++c) {
        in[c].resize(per_call);
        for (size_t i = 0; i < per_call; ++i) in[c][i] = value(r, i, c);
      }
      // The calls one by one: their estimates. A call is fused only if its estimate is above the time of its
      // two copies, and the fused call plus the copies must be estimated below the calls' sum where each is
      // latency-bound (at most twice a one-element call's estimate), else at most 0.8 of it.
      float x = 1.0f, y = 0.0f;
      comm.all_reduce(&x, &y, 1, DataType::Float32, ReduceOp::Sum);
      const double one = comm.last_operation().estimated_seconds;
      bool latency_bound = true;
      double separate = 0;
      bool each_worth = true;
      EXPECT_EQ(comm.copy_rate_gbps(), 35.0);
      const double rate = comm.copy_rate_gbps() * 1e9;
      for (int c = 0; c < k; ++c) {
        out[c].assign(per_call, -1.0f);
        comm.all_reduce(in[c].data(), out[c].data(), per_call, DataType::Float32, ReduceOp::Sum);
        const double est = comm.last_operation().estimated_seconds;
        separate += est;
        each_worth = each_worth && 2.0 * static_cast<double>(per_call * sizeof(float)) / rate < est;
        latency_bound = latency_bound && est <= 2.0 * one;
      }
      // One call of the whole size in place, in plain memory and in registered memory saying so: the group
      // stages in whichever its tables (registered ones where they exist for this size) expect to be faster.
      auto one_call = [&](float* buf, bool registered, bool* read_in_place) {
        for (size_t i = 0; i < total; ++i) buf[i] = value(r, i % per_call, static_cast<int>(i / per_call));
        CallOptions opts;
        opts.registered = registered;
        const uint64_t reads = comm.traffic().registered_reads;
        comm.all_reduce(buf, buf, total, DataType::Float32, ReduceOp::Sum, opts);
        *read_in_place = comm.traffic().registered_reads > reads;
        EXPECT_EQ(buf[total - 1], sum_of(n, per_call - 1, k - 1));
        return comm.last_operation();
      };
      std::vector<float> heap(total);
      bool heap_in_place = false, reg_in_place = false;
      const OperationInfo heap_ref = one_call(heap.data(), false, &heap_in_place);
      auto* reg_buf = static_cast<float*>(mem_alloc(bytes));
      const OperationInfo reg_ref = one_call(reg_buf, true, &reg_in_place);
      mem_free(reg_buf);
      EXPECT_FALSE(heap_ref.registered_tables);
      EXPECT_FALSE(heap_in_place);
      if (bytes < (size_t{64} << 10)) {
        EXPECT_FALSE(reg_ref.registered_tables);  // no registered tables below 64 KiB in the built-in tuning
      }
      const bool use_reg = reg_ref.registered_tables && reg_ref.estimated_seconds < heap_ref.estimated_seconds;
      const OperationInfo& ref = use_reg ? reg_ref : heap_ref;
      const bool ref_read_in_place = use_reg && reg_in_place;
      const bool expect_fused =
          each_worth &&
          (latency_bound ? ref.estimated_seconds + 2.0 * static_cast<double>(bytes) / rate < separate
                         : ref.estimated_seconds + 2.0 * static_cast<double>(bytes) / rate <= 0.8 * separate);

      // The group.
      for (auto& o : out) o.assign(per_call, -1.0f);
      const uint64_t ops_before = comm.traffic().operations;
      const uint64_t reads = comm.traffic().registered_reads;
      comm.group_start();
      for (int c = 0; c < k; ++c) {
        comm.all_reduce(in[c].data(), out[c].data(), per_call, DataType::Float32, ReduceOp::Sum);
      }
      comm.group_end();
      for (int c = 0; c < k; ++c) {
        expect_elements(
            DataType::Float32, out[c].data(), per_call, [&](size_t i) { return sum_of(n, i, c); },
            "call " + std::to_string(c));
      }
      const OperationInfo last = comm.last_operation();
      const uint64_t reads_after = comm.traffic().registered_reads;
      EXPECT_EQ(comm.traffic().operations - ops_before, expect_fused ? 1u : static_cast<uint64_t>(k))
          << bytes << " bytes in " << k << " calls: separately " << separate * 1e6 << " us, fused "
          << ref.estimated_seconds * 1e6 << " us + copies";
      if (expect_fused) {
        EXPECT_EQ(last.count, total);
        EXPECT_EQ(last.registered_tables, ref.registered_tables);
        EXPECT_EQ(last.algorithm, ref.algorithm) << bytes << " bytes";
        EXPECT_EQ(reads_after > reads, ref_read_in_place);
      }
      if (per_call <= 1024 && GetParam().transport != TransportKind::InProc) {
        EXPECT_TRUE(expect_fused) << "calls of at most 4 KiB gain from fusion on tcp and shm";
      }
      if (per_call == (size_t{64} << 10) && GetParam().transport == TransportKind::Tcp) {
        EXPECT_FALSE(expect_fused) << "four 2-rank tcp calls of 256 KiB do not";
      }
      if (GetParam().transport == TransportKind::Shm && bytes >= (size_t{64} << 10)) {
        EXPECT_TRUE(reg_ref.registered_tables) << "the built-in shm tuning has registered tables from 64 KiB";
        EXPECT_TRUE(reg_in_place) << "and their choice reads the peer's registered buffer in place";
      }
    });
  }
}

TEST_P(Async, AGroupMixesDtypesOpsAndOtherCollectivesInOrder) {
  run_world(3, options(), [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    std::vector<float> f1(10, r + 1.0f), f2(7, r + 2.0f);
    std::vector<int32_t> i1(5, r + 1), g(3 * n, -1), mine(3, r);
    std::vector<double> d1(4, r + 0.5), big(size_t{3} << 20, 1.0);  // 24 MiB: not fused
    comm.group_start();
    comm.all_reduce(f1, ReduceOp::Sum);
    comm.all_reduce(f2, ReduceOp::Max);     // another op: a new run
    comm.group_start();                     // nested
    comm.all_reduce(i1, ReduceOp::Prod);
    comm.all_gather(mine, g);
    comm.group_end();                       // inner end: nothing runs yet
    EXPECT_EQ(f1[0], r + 1.0f);
    comm.all_reduce(d1, ReduceOp::Min);
    comm.all_reduce(big, ReduceOp::Sum);
    comm.group_end();
    EXPECT_EQ(f1[9], 6.0f);
    EXPECT_EQ(f2[6], n + 1.0f);
    EXPECT_EQ(i1[4], 6);
    for (int q = 0; q < n; ++q) EXPECT_EQ(g[3 * q + 2], q);
    EXPECT_EQ(d1[0], 0.5);
    EXPECT_EQ(big[(size_t{3} << 20) - 1], 3.0);
  });
}

TEST_P(Async, GroupedSendsAndReceivesOfAnySizeDoNotDeadlock) {
  // Every rank sends a large message to every other rank and receives one from each, all in one group, with
  // the sends issued before the receives on every rank: without the group this is the classic deadlock.
  for (size_t count : {size_t{1}, size_t{100000}, size_t{4} << 20}) {
    run_world(4, options(), [&](Communicator& comm) {
      const int n = comm.size(), r = comm.rank();
      std::vector<std::vector<int32_t>> out(n), in(n);
      comm.group_start();
      for (int q = 0; q < n; ++q) {
        if (q == r) continue;
        out[q].resize(count);
        for (size_t i = 0; i < count; i += 997) out[q][i] = r * 1000 + q + static_cast<int32_t>(i);
        comm.send(out[q], q);
      }
      for (int q = n - 1; q >= 0; --q) {  // receives in another order than the sends
        if (q == r) continue;
        in[q].assign(count, -1);
        comm.recv(in[q], q);
      }
      comm.group_end();
      for (int q = 0; q < n; ++q) {
        if (q == r) continue;
        for (size_t i = 0; i < count; i += 997) ASSERT_EQ(in[q][i], q * 1000 + r + static_cast<int32_t>(i));
      }
    });
  }
}

TEST_P(Async, AGroupCanBeWaitedOnAsynchronously) {
  run_world(2, options(), [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<float> out(1 << 20, comm.rank() + 1.0f), in(1 << 20, 0.0f), small(3, 1.0f);
    comm.group_start();
    Work inner = comm.send_async(out.data(), out.size(), DataType::Float32, peer);
    comm.recv(in, peer);
    comm.all_reduce(small, ReduceOp::Sum);
    Work group = comm.group_end_async();
    group.wait();
    EXPECT_TRUE(inner.test());
    EXPECT_EQ(in[777], peer + 1.0f);
    EXPECT_EQ(small[2], 2.0f);
  });
}

TEST_P(Async, ARankThatGroupsDifferentlyGetsAMismatchNotWrongData) {
  run_world(2, options(std::chrono::seconds(20)), [&](Communicator& comm) {
    std::vector<float> a(8, 1.0f), b(8, 1.0f);
    std::string msg;
    if (comm.rank() == 0) {
      comm.group_start();
      comm.all_reduce(a, ReduceOp::Sum);
      comm.all_reduce(b, ReduceOp::Sum);
      msg = expect_error(ErrorCode::Mismatch, [&] { comm.group_end(); });
    } else {
      msg = expect_error(ErrorCode::Mismatch, [&] { comm.all_reduce(a, ReduceOp::Sum); });
    }
    EXPECT_NE(msg.find("mismatch"), std::string::npos) << msg;
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, Async,
                         ::testing::Values(TransportParam{TransportKind::InProc}, TransportParam{TransportKind::Tcp},
                                           TransportParam{TransportKind::Shm}),
                         transport_name);

}  // namespace
}  // namespace chorus::testing
