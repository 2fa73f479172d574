// The shared-memory rings under a producer that runs far ahead of its consumer: many laps of a small ring,
// frames of every size up to a good part of the ring, and the ring full. Every byte is checked against what
// the sender computed. (The producer keeps its own copy of the head and the consumer reads the shared head
// only when its last look does not cover a frame: these tests are what keeps that bookkeeping honest.)
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"
#include "test_util.h"
#include "transport/shm/shm_transport.h"

namespace chorus::testing {
namespace {

constexpr size_t kRingBytes = 64 << 10;  // the smallest ring CHORUS_SHM_RING_BYTES allows

CommOptions shm_options() {
  CommOptions o;
  o.transport = TransportKind::Shm;
  return o;
}

// The element i of message m from rank r: distinct across messages, so a frame read twice, skipped or read
// from the wrong place in the ring shows.
float value(int r, int m, size_t i) { return static_cast<float>(r * 1000003 + m * 131 + static_cast<int>(i % 127)); }

// Sizes from 1 element to a quarter of the ring, so some frames wrap at the ring's end and some fill it.
size_t count_of(int m) {
  static const size_t kCounts[] = {1, 2, 3, 16, 17, 100, 1000, 4096, 5000, 16384 / 4 * 4};
  return kCounts[m % 10];
}

TEST(ShmRing, OneWayBroadcastsRunManyLapsAhead) {
  ScopedEnv ring("CHORUS_SHM_RING_BYTES", std::to_string(kRingBytes));
  constexpr int kMessages = 3000;  // about 30 laps of the ring
  run_world(2, shm_options(), [&](Communicator& comm) {
    std::vector<float> buf(16384);
    for (int m = 0; m < kMessages; ++m) {
      const size_t n = count_of(m);
      if (comm.rank() == 0) {
        for (size_t i = 0; i < n; ++i) buf[i] = value(0, m, i);
      } else {
        std::fill(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(n), -1.0f);
      }
      comm.broadcast(buf.data(), buf.data(), n, DataType::Float32, 0);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(buf[i], value(0, m, i)) << "rank " << comm.rank() << ", message " << m << ", element " << i;
      }
    }
  });
}

TEST(ShmRing, ManySendersIntoOneConsumerAndBack) {
  // Reduce to a root (three producers into one consumer) then broadcast back out, with the root's consumer
  // running behind while the others race ahead.
  ScopedEnv ring("CHORUS_SHM_RING_BYTES", std::to_string(kRingBytes));
  constexpr int kMessages = 600;
  run_world(4, shm_options(), [&](Communicator& comm) {
    std::vector<float> in(16384), out(16384);
    for (int m = 0; m < kMessages; ++m) {
      const size_t n = count_of(m);
      for (size_t i = 0; i < n; ++i) in[i] = value(comm.rank(), m, i);
      comm.reduce(in.data(), out.data(), n, DataType::Float32, ReduceOp::Max, m % 4);
      if (comm.rank() == m % 4) {
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], value(3, m, i)) << "message " << m << ", element " << i;
      }
      comm.broadcast(in.data(), out.data(), n, DataType::Float32, (m + 1) % 4);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], value((m + 1) % 4, m, i)) << "rank " << comm.rank() << ", message " << m;
      }
    }
  });
}

TEST(ShmRing, PointToPointStreamsFillTheRingBothWays) {
  // Both ranks post a burst of sends (more than the ring holds) before receiving: the sends that do not fit
  // wait in the queue and move while the receives wait.
  ScopedEnv ring("CHORUS_SHM_RING_BYTES", std::to_string(kRingBytes));
  constexpr int kBurst = 40;
  run_world(2, shm_options(), [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<std::vector<float>> sent(kBurst), got(kBurst);
    comm.group_start();
    for (int m = 0; m < kBurst; ++m) {
      const size_t n = count_of(m);
      sent[m].resize(n);
      got[m].assign(n, -1.0f);
      for (size_t i = 0; i < n; ++i) sent[m][i] = value(comm.rank(), m, i);
      comm.send(sent[m].data(), n, DataType::Float32, peer);
      comm.recv(got[m].data(), n, DataType::Float32, peer);
    }
    comm.group_end();
    for (int m = 0; m < kBurst; ++m) {
      for (size_t i = 0; i < got[m].size(); ++i) ASSERT_EQ(got[m][i], value(peer, m, i)) << "message " << m;
    }
  });
}

TEST(ShmRing, SmallFramesGoBackToTheStartOnceTheConsumerCaughtUp) {
  // Exchanges that drain the rings call after call: a producer that has gone 64 KiB into a ring that its
  // consumer has emptied pads the rest of the lap and starts again at the beginning (ShmTransport::rewind),
  // so the consumer skips padding frames between data frames. With a 256 KiB ring, frames of up to 20 KiB
  // straddle the 64 KiB mark; those of up to 4 KiB go back, larger ones walk on through the ring, and the
  // 64 KiB payloads go by cross-memory attach (a descriptor frame, small) where the kernel allows it, else
  // through the ring. Every element is checked, and both ranks must have gone back.
  ScopedEnv ring("CHORUS_SHM_RING_BYTES", std::to_string(4 * kRingBytes));
  constexpr int kMessages = 2000;
  run_world(2, shm_options(), [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> in(16384), out(16384);
    for (int m = 0; m < kMessages; ++m) {
      const size_t n = count_of(m);  // one frame each way
      for (size_t i = 0; i < n; ++i) in[i] = value(r, m, i);
      std::fill(out.begin(), out.begin() + static_cast<ptrdiff_t>(n), -1.0f);
      comm.all_reduce(in.data(), out.data(), n, DataType::Float32, ReduceOp::Max);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], value(1, m, i)) << "rank " << r << ", message " << m << ", element " << i;
      }
    }
    EXPECT_GT(comm.traffic().ring_rewinds, 0u) << "rank " << r;
  });
}

TEST(ShmRing, SmallFramesFoundByTheirTrailerKeepTheBookkeeping) {
  // A consumer waiting for a small frame polls the frame's trailer word rather than the ring's head, so it may
  // take a frame before the producer's store of the head lands; its later looks at the head must not move
  // backwards. One-way streams of many small frames (a broadcast's root runs ahead, fills the ring and queues)
  // of sizes whose trailer shares the last payload line (4, 8, 56 and 68 B), takes a line of its own (60, 64,
  // 256 and 512 B) or that carry none (516 B), on the smallest ring, so it also laps, pads and fills; the
  // root changes every 5000 messages. Every element is checked.
  ScopedEnv ring("CHORUS_SHM_RING_BYTES", std::to_string(kRingBytes));
  static const size_t kCounts[] = {1, 2, 14, 15, 16, 17, 64, 128, 129};
  constexpr int kMessages = 60000;
  run_world(2, shm_options(), [&](Communicator& comm) {
    std::vector<float> buf(129);
    for (int m = 0; m < kMessages; ++m) {
      const size_t n = kCounts[m % 9];
      const int root = (m / 5000) % 2;
      if (comm.rank() == root) {
        for (size_t i = 0; i < n; ++i) buf[i] = value(root, m, i);
      } else {
        std::fill(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(n), -1.0f);
      }
      comm.broadcast(buf.data(), buf.data(), n, DataType::Float32, root);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(buf[i], value(root, m, i)) << "rank " << comm.rank() << ", message " << m << ", element " << i;
      }
    }
  });
}

// Large payloads of a sender with nothing else to do stream through the ring (both cores copy), where each
// rank has a core of its own and the operation sends at least CHORUS_SHM_STREAM_IDLE_BYTES to the peer; every
// other large payload goes by cross-memory attach (the receiver copies). Which way a payload went shows in
// the receiver's count of attach reads; what arrives is the same.
struct IdleCase {
  const char* threshold;  // CHORUS_SHM_STREAM_IDLE_BYTES
  bool streams;           // whether a 1 MiB idle send streams under it
  const char* name;
};

class IdleSenders : public ::testing::TestWithParam<IdleCase> {};

TEST_P(IdleSenders, StreamThroughTheRingWhereEachRankHasACore) {
  ScopedEnv env("CHORUS_SHM_STREAM_IDLE_BYTES", GetParam().threshold);
  ScopedEnv algo("CHORUS_ALGO", "reduce:binomial");  // whose leaf sends to a reducing parent
  ScopedEnv cma("CHORUS_SHM_CMA", "1");  // whatever attach costs on this host (CrossMemoryAttach below)
  const size_t count = (size_t{1} << 20) / sizeof(float);  // above the 64 KiB single-copy threshold
  run_world(2, shm_options(), [&](Communicator& comm) {
    const int r = comm.rank(), peer = 1 - r;
    // On a host whose ranks take turns on its cores the sender's copy would take a core its peer needs.
    const bool streams = GetParam().streams && comm.ranks_per_core() <= 1.0;
    std::vector<float> a(count), b(count);
    auto fill = [&](std::vector<float>& v, int from, int m) {
      for (size_t i = 0; i < count; ++i) v[i] = value(from, m, i);
    };
    auto expect = [&](const std::vector<float>& v, int from, int m, const char* what) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(v[i], value(from, m, i)) << what << ", rank " << r << ", element " << i;
      }
    };
    auto attach_reads = [&] { return comm.traffic().attach_reads; };

    // In place, the root only sends: it is idle.
    uint64_t before = attach_reads();
    if (r == 0) fill(a, 0, 1); else std::fill(a.begin(), a.end(), -1.0f);
    comm.broadcast(a.data(), a.data(), count, DataType::Float32, 0);
    expect(a, 0, 1, "in-place broadcast");
    if (r == 1) {
      EXPECT_EQ(attach_reads() - before > 0, !streams) << "in-place broadcast";
    }

    // Queued (an _async call), the operation runs while the caller may compute: the root is not idle.
    before = attach_reads();
    if (r == 0) fill(a, 0, 6); else std::fill(a.begin(), a.end(), -1.0f);
    comm.broadcast_async(a.data(), a.data(), count, DataType::Float32, 0).wait();
    expect(a, 0, 6, "queued in-place broadcast");
    if (r == 1) {
      EXPECT_GT(attach_reads() - before, 0u) << "queued in-place broadcast";
    }

    // Out of place, the root copies into its own output meanwhile: busy, so the receiver reads.
    before = attach_reads();
    if (r == 0) fill(a, 0, 2);
    std::fill(b.begin(), b.end(), -1.0f);
    comm.broadcast(a.data(), b.data(), count, DataType::Float32, 0);
    expect(b, 0, 2, "out-of-place broadcast");
    if (r == 1) {
      EXPECT_GT(attach_reads() - before, 0u) << "out-of-place broadcast";
    }

    // A reduce's leaf is idle and its parent reduces what it receives: from the ring in one pass rather than
    // a copy by cross-memory attach and a pass, so the leaf streams whatever the threshold (unless 0).
    before = attach_reads();
    fill(a, r, 5);
    std::fill(b.begin(), b.end(), -1.0f);
    comm.reduce(a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum, 0);
    if (r == 0) {
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(b[i], value(0, 5, i) + value(1, 5, i)) << "reduce, element " << i;
      const bool reduce_streams = std::string(GetParam().threshold) != "0" && comm.ranks_per_core() <= 1.0;
      EXPECT_EQ(attach_reads() - before > 0, !reduce_streams) << "reduce";
    }

    // A lone send is idle; sends and receives in one group keep each other busy.
    before = attach_reads();
    if (r == 0) {
      fill(a, 0, 3);
      comm.send(a.data(), count, DataType::Float32, 1);
    } else {
      std::fill(b.begin(), b.end(), -1.0f);
      comm.recv(b.data(), count, DataType::Float32, 0);
      expect(b, 0, 3, "lone send");
      EXPECT_EQ(attach_reads() - before > 0, !streams) << "lone send";
    }
    before = attach_reads();
    fill(a, r, 4);
    std::fill(b.begin(), b.end(), -1.0f);
    comm.group_start();
    comm.send(a.data(), count, DataType::Float32, peer);
    comm.recv(b.data(), count, DataType::Float32, peer);
    comm.group_end();
    expect(b, peer, 4, "exchange");
    EXPECT_GT(attach_reads() - before, 0u) << "exchange, rank " << r;
  });
}

INSTANTIATE_TEST_SUITE_P(Shm, IdleSenders,
                         ::testing::Values(IdleCase{"1M", true, "FromOneMiB"}, IdleCase{"2M", false, "FromTwoMiB"},
                                           IdleCase{"0", false, "Never"}),
                         [](const ::testing::TestParamInfo<IdleCase>& i) { return std::string(i.param.name); });

// Cross-memory attach by default only where it pays: the host's lowest rank times an attach read against a
// copy at creation (ShmTransport::probe_attach_cost), and every rank of the host then moves large payloads the
// way that figure says, reported the same on every rank. CHORUS_SHM_CMA=1 or 0 decides without a probe.
TEST(CrossMemoryAttach, FollowsTheProbeUnlessForced) {
  const double probe = transport::ShmTransport::probe_attach_cost();
  EXPECT_GT(probe, 0.0) << "this host allows process_vm_readv on the test's own memory";
  EXPECT_LT(probe, 10000.0);
  constexpr int kRanks = 3;
  const size_t count = (size_t{1} << 20) / sizeof(float);  // every piece above the 64 KiB single-copy size
  struct Seen {
    bool attach = false;
    double cost = -1;
    uint64_t attach_reads = 0;
  };
  for (const char* mode : {"", "auto", "1", "0"}) {
    SCOPED_TRACE(std::string("CHORUS_SHM_CMA='") + mode + "'");
    ScopedEnv cma("CHORUS_SHM_CMA", mode);
    ScopedEnv adapt("CHORUS_SHM_ADAPT", "0");         // the probe's choice only (AdaptivePath below)
    ScopedEnv algo("CHORUS_ALGO", "allreduce:ring");  // every rank sends and receives: no idle sender streams
    std::vector<Seen> seen(kRanks);
    run_world(kRanks, shm_options(), [&](Communicator& comm) {
      const int r = comm.rank();
      std::vector<float> in(count), out(count, -1.0f);
      for (size_t i = 0; i < count; ++i) in[i] = value(r, 0, i);
      const uint64_t before = comm.traffic().attach_reads;
      comm.all_reduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], value(0, 0, i) + value(1, 0, i) + value(2, 0, i)) << "rank " << r << ", element " << i;
      }
      seen[static_cast<size_t>(r)] = {comm.cross_memory_attach(), comm.attach_cost(),
                                      comm.traffic().attach_reads - before};
      EXPECT_FALSE(comm.adapts_single_copy()) << "CHORUS_SHM_ADAPT=0";
    });
    for (int r = 0; r < kRanks; ++r) {
      const Seen& s = seen[static_cast<size_t>(r)];
      EXPECT_EQ(s.attach, seen[0].attach) << "rank " << r;
      EXPECT_EQ(s.cost, seen[0].cost) << "rank " << r;
      EXPECT_EQ(s.attach_reads > 0, s.attach) << "rank " << r << ": payloads went the way reported";
    }
    const std::string m = mode;
    if (m == "1") {
      EXPECT_TRUE(seen[0].attach);
      EXPECT_EQ(seen[0].cost, 0.0);
    } else if (m == "0") {
      EXPECT_FALSE(seen[0].attach);
      EXPECT_EQ(seen[0].cost, 0.0);
    } else {
      // Measured by rank 0 (this host's lowest) and published to the others with three decimals.
      EXPECT_GT(seen[0].cost, 0.0);
      EXPECT_EQ(seen[0].attach, seen[0].cost < transport::ShmTransport::kAttachPaysBelow) << seen[0].cost;
    }
  }
  for (const char* bad : {"yes", "2", "-1", "on"}) {
    ScopedEnv cma("CHORUS_SHM_CMA", bad);
    const std::string what = expect_error(ErrorCode::InvalidArgument, [] {
      (void)Communicator::create(std::make_shared<MemoryStore>(), 0, 2, shm_options());
    });
    EXPECT_NE(what.find("CHORUS_SHM_CMA"), std::string::npos) << "'" << bad << "': " << what;
  }
}

// The receiver's choice between ring and attach (ShmOptions::adapt): each way's figure is a median, over the
// chosen way's last 16 frames and the other way's last 4 (one try); the other way must cost under kSwitchBelow
// (0.75) of the chosen one, summed over the kinds of frame timed both ways enough, at two tries in a row.
// (The transport counts the tries, PathChoice::tries and tried_samples; here the test does.)
TEST(PathChoice, MovesOnlyForAClearGainSeenAtTwoTries) {
  using Choice = transport::ShmTransport::PathChoice;
  ASSERT_EQ(transport::ShmTransport::kSwitchBelow, 0.75);
  ASSERT_EQ(Choice::kWindow, 16u);
  ASSERT_EQ(Choice::kTried, 4u);
  Choice c;  // starts with the rings
  auto next_try = [&c] {
    ++c.tries;
    c.tried_samples = Choice::kTried;
  };
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(c.add(false, false, 100)) << "copied frames through the ring";
  next_try();
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(c.add(false, true, 80)) << "attach at 0.8 of the rings is not enough";
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(c.add(true, true, 1)) << "reduced frames came by attach only: not compared";
  }
  EXPECT_FALSE(c.candidate);
  // The last four attach frames: 80 80 80 60 (median 80), then 80 80 60 60 (70 < 75): better, once.
  EXPECT_FALSE(c.add(false, true, 60));
  EXPECT_FALSE(c.add(false, true, 60));
  EXPECT_TRUE(c.candidate) << "asks for another try";
  EXPECT_FALSE(c.add(false, true, 60)) << "the same try does not confirm it";
  EXPECT_FALSE(c.attach);
  next_try();
  EXPECT_TRUE(c.add(false, true, 60)) << "the next try does";
  EXPECT_TRUE(c.attach);
  EXPECT_FALSE(c.candidate);
  EXPECT_FALSE(c.clear) << "the rings at 100 against attach's 60 are not far apart";
  // Now attach is the chosen way (8 frames: 80 80 80 80 60 60 60 60, median 70), and the rings must come under
  // 52.5. Their last four: 100 100 100 50 (median 100), 100 100 50 50 (75), 100 50 50 50 (50): better, once;
  // a later try that shows it again moves the choice back.
  next_try();
  EXPECT_FALSE(c.add(false, false, 50));
  EXPECT_FALSE(c.add(false, false, 50));
  EXPECT_FALSE(c.candidate);
  EXPECT_FALSE(c.add(false, false, 50));
  EXPECT_TRUE(c.candidate);
  // A frame the chosen way that makes the other no longer better drops the candidate.
  EXPECT_FALSE(c.add(false, true, 20));  // attach's last 16: median 60, and 0.75 x 60 = 45 < 50
  EXPECT_FALSE(c.candidate);
  EXPECT_TRUE(c.attach);

  // Kinds of frame timed both ways add up: attach at 0.4 of the rings for copied frames does not move a choice
  // where reduced frames cost 4 times as much by attach (rings 100 + 100 against attach 40 + 400).
  Choice d;
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(d.add(true, false, 100));
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(d.add(true, true, 400));
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(d.add(false, false, 100));
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(d.add(false, true, 40));
  EXPECT_FALSE(d.attach);
  EXPECT_FALSE(d.candidate);
  EXPECT_TRUE(d.clear) << "attach measured over twice the rings (440 against 200): tried less often";
}

// With the choice adapting, large payloads come both ways on one channel (CHORUS_SHM_EXPLORE_US=0: every other
// large frame tries the way not chosen), in any order with small frames, and every byte arrives as sent. On a
// host whose ranks take turns on its cores the choice does not adapt (timings there include waiting for a
// core): the probe's choice stays.
TEST(AdaptivePath, RingAndAttachFramesInterleaveAndCarryTheSameBytes) {
  ScopedEnv cma("CHORUS_SHM_CMA", "auto");
  ScopedEnv adapt("CHORUS_SHM_ADAPT", "1");
  ScopedEnv explore("CHORUS_SHM_EXPLORE_US", "0");
  ScopedEnv algo("CHORUS_ALGO", "allreduce:ring;allgather:ring");  // both ranks send and receive: none idle
  const size_t count = (size_t{256} << 10) / sizeof(float);        // above the 64 KiB single-copy size
  run_world(2, shm_options(), [&](Communicator& comm) {
    const int r = comm.rank();
    const TrafficCounters before = comm.traffic();
    std::vector<float> a(count), b(2 * count), small(16);
    for (int m = 0; m < 24; ++m) {
      for (size_t i = 0; i < count; ++i) a[i] = value(r, m, i);
      std::fill(b.begin(), b.end(), -1.0f);
      comm.all_gather(a.data(), b.data(), count, DataType::Float32);
      for (int q = 0; q < 2; ++q) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(b[static_cast<size_t>(q) * count + i], value(q, m, i)) << "all_gather " << m << ", rank " << r;
        }
      }
      comm.all_reduce(a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(b[i], value(0, m, i) + value(1, m, i)) << "all_reduce " << m << ", rank " << r << ", element " << i;
      }
      for (size_t i = 0; i < small.size(); ++i) small[i] = value(r, m, i);
      comm.all_reduce(small.data(), small.data(), small.size(), DataType::Float32, ReduceOp::Max);
      for (size_t i = 0; i < small.size(); ++i) {
        ASSERT_EQ(small[i], std::max(value(0, m, i), value(1, m, i))) << "small all_reduce " << m;
      }
    }
    const TrafficCounters after = comm.traffic();
    const uint64_t attach = after.attach_reads - before.attach_reads;
    const uint64_t ring = after.ring_large_frames - before.ring_large_frames;
    EXPECT_EQ(comm.adapts_single_copy(), comm.ranks_per_core() <= 1.0) << "rank " << r;
    if (comm.ranks_per_core() <= 1.0) {
      EXPECT_GT(attach, 0u) << "rank " << r;
      EXPECT_GT(ring, 0u) << "rank " << r;
    } else {
      EXPECT_EQ(attach > 0, comm.cross_memory_attach()) << "rank " << r;
      EXPECT_EQ(after.path_switches, 0u) << "rank " << r;
    }
  });
}

// A large frame through the ring costs the receiver's copy out plus the producer's copy in where the sender is
// busy (both ranks of an exchange copy both ways), but only the slower of the two where the sender is idle: it
// copies its next frame in while the receiver copies this one out. A frame that streamed was timed with both
// copies side by side already.
TEST(PathChoice, AnIdleSendersFrameThroughTheRingCostsTheSlowerCopy) {
  using T = transport::ShmTransport;
  EXPECT_EQ(T::ring_frame_cost(30, 50, T::kBusyLane, false), 80);
  EXPECT_EQ(T::ring_frame_cost(30, 50, T::kIdleLane, false), 50);
  EXPECT_EQ(T::ring_frame_cost(70, 50, T::kIdleLane, false), 70);
  EXPECT_EQ(T::ring_frame_cost(90, 50, T::kBusyLane, true), 90);
  EXPECT_EQ(T::ring_frame_cost(90, 50, T::kIdleLane, true), 90);
  // An exchange's frame: the wait since the receiver began it, but never less than both copies.
  EXPECT_EQ(T::ring_frame_cost(30, 50, T::kBusyLane, false, 120), 120);
  EXPECT_EQ(T::ring_frame_cost(30, 50, T::kBusyLane, true, 60), 80);
  EXPECT_EQ(T::ring_frame_cost(30, 50, T::kBusyLane, false, 0), 80);
}

// An exchange's frames are chosen for per size class of the operation (its count times its element size):
// under 1 MiB, then by factors of 4 up to the last class, from 64 MiB; the frames of reducing collectives apart
// from the rest, and in-place calls of those apart again (all_reduce apart from reduce_scatter and reduce). An
// idle sender's frames share one choice.
TEST(PathChoice, SizeClassesGoByTheCallsBytesInFactorsOfFour) {
  using T = transport::ShmTransport;
  ASSERT_EQ(T::kSizeClasses, 5);
  ASSERT_EQ(T::kPathClasses, 20);
  auto cls = [](uint64_t count, DataType type) {
    transport::MessageTag tag;
    tag.count = count;
    tag.dtype = type;
    const int size = T::size_class(tag);
    for (auto op : {transport::OpKind::AllGather, transport::OpKind::Broadcast, transport::OpKind::AllToAll,
                    transport::OpKind::SendRecv}) {
      tag.op = op;
      EXPECT_EQ(T::path_class(T::kBusyLane, tag), size) << transport::op_kind_name(op);
    }
    for (auto op : {transport::OpKind::AllReduce, transport::OpKind::ReduceScatter, transport::OpKind::Reduce}) {
      tag.op = op;
      EXPECT_EQ(T::path_class(T::kBusyLane, tag), T::kSizeClasses + size) << transport::op_kind_name(op);
      tag.in_place = true;  // in place: apart again, all_reduce apart from the other two
      EXPECT_EQ(T::path_class(T::kBusyLane, tag), (op == transport::OpKind::AllReduce ? 2 : 3) * T::kSizeClasses + size)
          << transport::op_kind_name(op);
      EXPECT_EQ(T::path_class(T::kIdleLane, tag), 0) << transport::op_kind_name(op);
      tag.in_place = false;
    }
    tag.op = transport::OpKind::AllGather;
    tag.in_place = true;  // copied in place: as out of place
    EXPECT_EQ(T::path_class(T::kBusyLane, tag), size);
    tag.in_place = false;
    return std::pair{size, T::path_class(T::kIdleLane, tag)};
  };
  const uint64_t mib_floats = (uint64_t{1} << 20) / sizeof(float);
  EXPECT_EQ(cls(0, DataType::Float32), std::pair(0, 0));
  EXPECT_EQ(cls(mib_floats - 1, DataType::Float32), std::pair(0, 0)) << "just under 1 MiB";
  EXPECT_EQ(cls(mib_floats, DataType::Float32), std::pair(1, 0)) << "1 MiB";
  EXPECT_EQ(cls(uint64_t{1} << 20, DataType::UInt8), std::pair(1, 0)) << "1 MiB of bytes";
  EXPECT_EQ(cls(4 * mib_floats - 1, DataType::Float32), std::pair(1, 0));
  EXPECT_EQ(cls(4 * mib_floats, DataType::Float32), std::pair(2, 0)) << "4 MiB";
  EXPECT_EQ(cls(2 * mib_floats, DataType::Float64), std::pair(2, 0)) << "4 MiB of doubles";
  EXPECT_EQ(cls(8 * mib_floats, DataType::Float64), std::pair(3, 0)) << "16 MiB of doubles";
  EXPECT_EQ(cls(64 * mib_floats - 1, DataType::Float32), std::pair(3, 0));
  EXPECT_EQ(cls(64 * mib_floats, DataType::Float32), std::pair(4, 0)) << "64 MiB";
  EXPECT_EQ(cls(uint64_t{1} << 40, DataType::Float32), std::pair(4, 0)) << "and everything above";
  EXPECT_EQ(T::size_class_floor(0), 0u);
  EXPECT_EQ(T::size_class_floor(1), uint64_t{1} << 20);
  EXPECT_EQ(T::size_class_floor(3), uint64_t{16} << 20);
  EXPECT_EQ(T::size_class_floor(4), uint64_t{64} << 20);
  // A class holds calls of a size where that size is below its ceiling (the last class: any size).
  EXPECT_TRUE(T::size_class_holds(0, uint64_t{64} << 10));
  EXPECT_FALSE(T::size_class_holds(0, uint64_t{1} << 20));
  EXPECT_TRUE(T::size_class_holds(1, uint64_t{1} << 20));
  EXPECT_FALSE(T::size_class_holds(1, uint64_t{4} << 20));
  EXPECT_TRUE(T::size_class_holds(2, uint64_t{4} << 20));
  EXPECT_TRUE(T::size_class_holds(4, uint64_t{1} << 40));
}

// Each class starts on its own: the probe's choice, except a reducing collective's calls from
// CHORUS_SHM_RING_FIRST_BYTES (4 MiB by default), and the in-place all_reduce's from
// CHORUS_SHM_RING_FIRST_IN_PLACE_BYTES (64 KiB: every class that holds calls of that size), which start through
// the rings. A class sends its first large
// frames its first way (at least 8, and its first 5 calls' worth: ShmTransport::Warmth), then tries 5 the other
// way, and the next try comes at least 256 frames later, so at least 16 of a class's first 32 frames go its
// first way: a 1 MiB 2-rank ring all_reduce sends 2 frames of 512 KiB each way per call, a 16 MiB one 32 (16 per
// phase), and a 2-rank all_gather of 16 MiB per rank 32. Every byte arrives as sent.
TEST(AdaptivePath, LargeExchangesStartThroughTheRingsAndSmallerOnesAsTheProbeSays) {
  ScopedEnv cma("CHORUS_SHM_CMA", "auto");
  ScopedEnv adapt("CHORUS_SHM_ADAPT", "1");
  ScopedEnv algo("CHORUS_ALGO", "allreduce:ring");
  for (const char* ring_first : {"", "0"}) {
    ScopedEnv first("CHORUS_SHM_RING_FIRST_BYTES", ring_first);
    ScopedEnv first_in_place("CHORUS_SHM_RING_FIRST_IN_PLACE_BYTES", ring_first);
    run_world(2, shm_options(), [&](Communicator& comm) {
      const int r = comm.rank();
      if (!comm.adapts_single_copy()) {  // one core for both ranks: nothing adapts
        EXPECT_GT(comm.ranks_per_core(), 1.0);
        return;
      }
      // The probe's first choice (ShmTransport::kAttachPaysBelow copies).
      const bool probe_attach =
          comm.attach_cost() > 0 && comm.attach_cost() < transport::ShmTransport::kAttachPaysBelow;
      for (size_t count : {(size_t{256} << 10) / sizeof(float), (size_t{1} << 20) / sizeof(float),
                           (size_t{16} << 20) / sizeof(float)}) {
        std::vector<float> a(count), b(count);
        for (size_t i = 0; i < count; ++i) a[i] = value(r, 1, i);
        for (bool in_place : {false, true}) {
          if (in_place) b = a;
          const TrafficCounters before = comm.traffic();
          comm.all_reduce(in_place ? b.data() : a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum);
          const TrafficCounters after = comm.traffic();
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(b[i], value(0, 1, i) + value(1, 1, i))
                << "rank " << r << ", count " << count << ", in place " << in_place << ", element " << i;
          }
          const uint64_t attach = after.attach_reads - before.attach_reads;
          const uint64_t ring = after.ring_large_frames - before.ring_large_frames;
          const bool large = count * sizeof(float) >= (size_t{16} << 20);
          const bool rings_first = std::string(ring_first).empty() && (large || in_place);  // 4 MiB and 64 KiB
          const bool first_attach = probe_attach && !rings_first;
          SCOPED_TRACE(
              fmt::format("rank {}, {} bytes, in place {}, CHORUS_SHM_RING_FIRST_BYTES='{}', probe {:.2f} "
                          "copies",
                          r, count * sizeof(float), in_place, ring_first, comm.attach_cost()));
          EXPECT_EQ(attach + ring, large ? 32u : 2u);
          EXPECT_GE(first_attach ? attach : ring, large ? 16u : 2u);
        }
      }
      // A collective that only copies starts as the probe says, whatever its size.
      const size_t count = (size_t{16} << 20) / sizeof(float);
      std::vector<float> a(count), b(2 * count);
      for (size_t i = 0; i < count; ++i) a[i] = value(r, 2, i);
      const TrafficCounters before = comm.traffic();
      comm.all_gather(a.data(), b.data(), count, DataType::Float32);
      const TrafficCounters after = comm.traffic();
      for (int q = 0; q < 2; ++q) {
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(b[q * count + i], value(q, 2, i)) << "rank " << r;
      }
      const uint64_t attach = after.attach_reads - before.attach_reads;
      const uint64_t ring = after.ring_large_frames - before.ring_large_frames;
      EXPECT_EQ(attach + ring, 32u) << "rank " << r;
      EXPECT_GE(probe_attach ? attach : ring, 16u) << "rank " << r;
    });
  }
}

// A class neither times nor tries the other way during its warm-up: at least ShmTransport::kWarmFrames large
// frames, and its first kWarmCalls calls' worth of bytes (a page read by attach for the first times costs
// more than later), counted again from a call larger than any before it in the class. The idle lane warms by
// frames alone (warm_bytes 0).
TEST(PathChoice, AClassWarmsOverItsFirstCallsAndAgainAtALargerOne) {
  using T = transport::ShmTransport;
  auto warm_frames = [](T::Warmth& w, uint64_t& frames, size_t frame, uint64_t call) {
    uint64_t warm = 0;
    for (int i = 0; i < 100000 && w.warming(++frames, frame, call); ++i) ++warm;
    return warm;
  };
  const size_t frame = size_t{512} << 10;
  T::Warmth w;
  uint64_t frames = 0;
  // Calls of 4 MiB, 8 frames each: the first 5 calls' 40 frames warm, the 41st is timed.
  EXPECT_EQ(warm_frames(w, frames, frame, uint64_t{4} << 20), T::kWarmCalls * 8);
  EXPECT_FALSE(w.warming(++frames, frame, uint64_t{4} << 20)) << "warm once";
  EXPECT_FALSE(w.warming(++frames, frame, uint64_t{1} << 20)) << "a smaller call does not warm again";
  // A call of 8 MiB, larger than any before: its first 5 calls' 80 frames warm again (the frame that found
  // it warming counted among them).
  EXPECT_EQ(warm_frames(w, frames, frame, uint64_t{8} << 20), T::kWarmCalls * 16);
  // Small calls: at least kWarmFrames frames.
  T::Warmth small;
  uint64_t small_frames = 0;
  EXPECT_EQ(warm_frames(small, small_frames, size_t{64} << 10, uint64_t{64} << 10), T::kWarmFrames);
  // The idle lane warms by frames alone.
  transport::MessageTag tag;
  tag.count = uint64_t{16} << 20;
  tag.dtype = DataType::Float32;
  EXPECT_EQ(T::warm_bytes(T::kBusyLane, tag), uint64_t{64} << 20);
  EXPECT_EQ(T::warm_bytes(T::kIdleLane, tag), 0u);
  T::Warmth idle;
  uint64_t idle_frames = 0;
  EXPECT_EQ(warm_frames(idle, idle_frames, frame, T::warm_bytes(T::kIdleLane, tag)), T::kWarmFrames);
}

// An attach read is timed only once its pages were read by attach in ShmTransport::ColdPages::kWarmReads calls
// (MessageTag::seq): a page's first reads cost more. Kept per 2 MiB of the sender's addresses; a read that
// reaches a 2 MiB it never read is cold again, and past kMaxEntries everything is forgotten.
TEST(PathChoice, AttachReadsOfPagesReadInFewCallsAreNotTimed) {
  using T = transport::ShmTransport;
  ASSERT_EQ(T::ColdPages::kWarmReads, 3u);
  T::ColdPages pages;
  const uint64_t base = uint64_t{64} << 21;  // a 2 MiB boundary
  const size_t frame = size_t{512} << 10;
  for (uint64_t seq = 1; seq <= 2; ++seq) {
    for (int f = 0; f < 4; ++f) EXPECT_TRUE(pages.read(base + f * frame, frame, seq)) << "call " << seq;
  }
  for (int f = 0; f < 4; ++f) EXPECT_FALSE(pages.read(base + f * frame, frame, 3)) << "the third call";
  EXPECT_FALSE(pages.read(base, frame, 3)) << "read again in the same call";
  // Reaching into the next 2 MiB, which no call read: cold.
  EXPECT_TRUE(pages.read(base + (size_t{2} << 20) - 4096, 8192, 4));
  EXPECT_FALSE(pages.read(base, frame, 5));
  // Forgotten all at once past kMaxEntries granules.
  for (uint64_t g = 0; g <= T::ColdPages::kMaxEntries + 1; ++g) pages.read((g + 1000) << 21, 4096, 6);
  EXPECT_TRUE(pages.read(base, frame, 7));
  EXPECT_FALSE(pages.read(0, 0, 8)) << "nothing read";
}

// The two ranks of an exchange go one way, as the lower rank's receiver chooses: its frames to the higher rank
// go the way it chose for the higher rank's frames (TrafficCounters::paired_frames, all of them after the first
// call), and the higher rank leaves them untimed, so its own choice never changes, while the lower rank's is
// free to (tries as often as the frame counts allow: CHORUS_SHM_EXPLORE_US=0). Every byte arrives as sent,
// whichever way each frame went.
TEST(AdaptivePath, AnExchangesLowerRankChoosesForBothDirections) {
  ScopedEnv cma("CHORUS_SHM_CMA", "auto");
  ScopedEnv adapt("CHORUS_SHM_ADAPT", "1");
  ScopedEnv explore("CHORUS_SHM_EXPLORE_US", "0");
  ScopedEnv algo("CHORUS_ALGO", "allgather:bruck");
  const size_t count = (size_t{1} << 20) / sizeof(float);  // 2 frames of 512 KiB each way per call
  constexpr int kCalls = 300;
  run_world(2, shm_options(), [&](Communicator& comm) {
    const int r = comm.rank();
    if (!comm.adapts_single_copy()) {  // one core for both ranks: nothing adapts, nothing pairs
      EXPECT_GT(comm.ranks_per_core(), 1.0);
      return;
    }
    std::vector<float> a(count), b(2 * count);
    const TrafficCounters before = comm.traffic();
    for (int m = 0; m < kCalls; ++m) {
      for (size_t i = 0; i < count; ++i) a[i] = value(r, m, i);
      comm.all_gather(a.data(), b.data(), count, DataType::Float32);
      for (int q = 0; q < 2; ++q) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(b[static_cast<size_t>(q) * count + i], value(q, m, i)) << "rank " << r << ", call " << m;
        }
      }
    }
    const TrafficCounters after = comm.traffic();
    const uint64_t frames =
        after.ring_large_frames + after.attach_reads - before.ring_large_frames - before.attach_reads;
    EXPECT_EQ(frames, 2u * kCalls) << "rank " << r;
    if (r == 0) {
      EXPECT_EQ(after.paired_frames - before.paired_frames, 2u * (kCalls - 1));
    } else {
      EXPECT_EQ(after.paired_frames - before.paired_frames, 0u);
      EXPECT_EQ(after.path_switches - before.path_switches, 0u) << "rank 1 times only rank 0's first call";
    }
  });
}

// Mid-sized payloads (CHORUS_SHM_SINGLE_COPY_BUSY_BYTES, 8 KiB, up to the 64 KiB single-copy size) go by
// cross-memory attach where both ranks send at once and the sender keeps its buffer as it is (an exchange:
// all_gather, out-of-place all_to_all, reduce_scatter and recursive-doubling all_reduce), and through the
// rings where the receiver only waits (broadcast), where an in-place all_reduce sends what it then replaces,
// below 8 KiB, and with CHORUS_SHM_SINGLE_COPY_BUSY_BYTES=65536. The probe's choice is forced (attach on,
// nothing adapts), so each receiver counts one attach read per exchange frame. Every byte arrives as sent.
TEST(CrossMemoryAttach, MidSizedExchangesGoByAttachAndTheRestThroughTheRings) {
  ScopedEnv cma("CHORUS_SHM_CMA", "1");
  ScopedEnv adapt("CHORUS_SHM_ADAPT", "0");
  ScopedEnv algo("CHORUS_ALGO",
                 "allgather:recursive_doubling;alltoall:pairwise;reducescatter:pairwise;allreduce:recursive_doubling;"
                 "broadcast:binomial");
  for (const char* busy_bytes : {"", "65536"}) {
    ScopedEnv busy("CHORUS_SHM_SINGLE_COPY_BUSY_BYTES", busy_bytes);
    run_world(2, shm_options(), [&](Communicator& comm) {
      const int r = comm.rank();
      // Where the ranks share a core the sender's wait for a read costs a switch: the rings then carry all.
      const bool on = std::string(busy_bytes).empty() && comm.cross_memory_attach() && comm.ranks_per_core() <= 1.0;
      auto attach_reads = [&] { return comm.traffic().attach_reads; };
      for (size_t bytes : {size_t{4} << 10, size_t{16} << 10, size_t{32} << 10}) {
        const size_t n = bytes / sizeof(float);
        const uint64_t expect = on && bytes >= (size_t{8} << 10) ? 1 : 0;
        SCOPED_TRACE(
            fmt::format("rank {}, {} bytes per message, CHORUS_SHM_SINGLE_COPY_BUSY_BYTES='{}'", r, bytes, busy_bytes));
        std::vector<float> a(2 * n), b(2 * n);
        for (size_t i = 0; i < 2 * n; ++i) a[i] = value(r, 3, i);
        uint64_t before = attach_reads();
        comm.all_gather(a.data(), b.data(), n, DataType::Float32);
        EXPECT_EQ(attach_reads() - before, expect) << "all_gather";
        for (int q = 0; q < 2; ++q) {
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(b[q * n + i], value(q, 3, i)) << "all_gather";
        }
        before = attach_reads();
        comm.all_to_all(a.data(), b.data(), n, DataType::Float32);
        EXPECT_EQ(attach_reads() - before, expect) << "all_to_all";
        for (int q = 0; q < 2; ++q) {
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(b[q * n + i], value(q, 3, r * n + i)) << "all_to_all";
        }
        before = attach_reads();
        comm.reduce_scatter(a.data(), b.data(), n, DataType::Float32, ReduceOp::Sum);
        EXPECT_EQ(attach_reads() - before, expect) << "reduce_scatter";
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(b[i], value(0, 3, r * n + i) + value(1, 3, r * n + i)) << "reduce_scatter";
        }
        before = attach_reads();
        comm.all_reduce(a.data(), b.data(), n, DataType::Float32, ReduceOp::Sum);
        EXPECT_EQ(attach_reads() - before, expect) << "all_reduce";
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(b[i], value(0, 3, i) + value(1, 3, i)) << "all_reduce";
        // In place, recursive doubling waits for its send's read before it writes the result over it.
        std::vector<float> c(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n));
        before = attach_reads();
        comm.all_reduce(c.data(), c.data(), n, DataType::Float32, ReduceOp::Sum);
        EXPECT_EQ(attach_reads() - before, 0u) << "all_reduce in place";
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(c[i], value(0, 3, i) + value(1, 3, i)) << "all_reduce in place";
        // In place, all_to_all sends each slice from a buffer aside that it reuses a slice later.
        std::vector<float> e(a);
        before = attach_reads();
        comm.all_to_all(e.data(), e.data(), n, DataType::Float32);
        EXPECT_EQ(attach_reads() - before, 0u) << "all_to_all in place";
        for (int q = 0; q < 2; ++q) {
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(e[q * n + i], value(q, 3, r * n + i)) << "all_to_all in place";
        }
        // The broadcast's receiver only waits: the two copies of the rings overlap their handoff.
        std::vector<float> d(n, r == 0 ? 0.0f : -1.0f);
        if (r == 0) std::copy(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), d.begin());
        before = attach_reads();
        comm.broadcast(d.data(), d.data(), n, DataType::Float32, 0);
        EXPECT_EQ(attach_reads() - before, 0u) << "broadcast";
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], value(0, 3, i)) << "broadcast";
      }
    });
  }
}

// Each rank chooses by its own call's form (MessageTag::in_place is not in the frame): where one rank's
// all_reduce is in place and the other's is not, their classes start differently (1 MiB: the in-place one
// through the rings, the other as the probe says) and the frames of one pair go both ways. Every byte arrives
// as sent, call after call, whichever way each frame went.
TEST(AdaptivePath, RanksWhoseCallsDifferInFormStillAgreeOnEveryByte) {
  ScopedEnv cma("CHORUS_SHM_CMA", "auto");
  ScopedEnv adapt("CHORUS_SHM_ADAPT", "1");
  ScopedEnv algo("CHORUS_ALGO", "allreduce:ring;reducescatter:pairwise");
  run_world(2, shm_options(), [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t count : {(size_t{1} << 20) / sizeof(float), (size_t{4} << 20) / sizeof(float)}) {
      std::vector<float> a(2 * count), b(2 * count);
      for (int m = 0; m < 6; ++m) {
        for (size_t i = 0; i < 2 * count; ++i) a[i] = value(r, m, i);
        // Rank 0 in place, rank 1 out of place.
        if (r == 0) {
          comm.all_reduce(a.data(), a.data(), count, DataType::Float32, ReduceOp::Sum);
        } else {
          comm.all_reduce(a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum);
        }
        const float* got = r == 0 ? a.data() : b.data();
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(got[i], value(0, m, i) + value(1, m, i)) << "rank " << r << ", count " << count << ", call " << m;
        }
        // reduce_scatter the other way round: rank 1 in place (its output is its input's block 1).
        for (size_t i = 0; i < 2 * count; ++i) a[i] = value(r, m, i);
        if (r == 1) {
          comm.reduce_scatter(a.data(), a.data() + count, count, DataType::Float32, ReduceOp::Sum);
        } else {
          comm.reduce_scatter(a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum);
        }
        const float* mine = r == 1 ? a.data() + count : b.data();
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(mine[i], value(0, m, r * count + i) + value(1, m, r * count + i))
              << "rank " << r << ", count " << count << ", call " << m;
        }
      }
    }
  });
}

// An idle sender's large frames (an in-place broadcast's root of at least CHORUS_SHM_STREAM_IDLE_BYTES) go in a
// lane of their own, which the receiver chooses for apart from the rest; an exchange's frames and an
// out-of-place root's (busy copying into its own output) do not. Every byte arrives as sent whichever way.
TEST(AdaptivePath, IdleSendersFramesGoInALaneOfTheirOwn) {
  ScopedEnv cma("CHORUS_SHM_CMA", "auto");
  ScopedEnv adapt("CHORUS_SHM_ADAPT", "1");
  ScopedEnv explore("CHORUS_SHM_EXPLORE_US", "0");
  ScopedEnv algo("CHORUS_ALGO", "allgather:ring;broadcast:binomial");
  const size_t big = (size_t{2} << 20) / sizeof(float);      // the stream-idle threshold (2 MiB)
  const size_t block = (size_t{256} << 10) / sizeof(float);  // above the 64 KiB single-copy size
  run_world(2, shm_options(), [&](Communicator& comm) {
    const int r = comm.rank();
    EXPECT_EQ(comm.adapts_single_copy(), comm.ranks_per_core() <= 1.0) << "rank " << r;
    if (!comm.adapts_single_copy()) return;  // a one-core host: nothing adapts, so there are no lanes to keep
    std::vector<float> a(block), b(2 * block), buf(big), out(big);
    auto large_frames = [&] {
      const TrafficCounters t = comm.traffic();
      return t.ring_large_frames + t.attach_reads;
    };
    // Exchanges only.
    TrafficCounters before = comm.traffic();
    uint64_t frames_before = large_frames();
    for (int m = 0; m < 12; ++m) {
      for (size_t i = 0; i < block; ++i) a[i] = value(r, m, i);
      comm.all_gather(a.data(), b.data(), block, DataType::Float32);
      for (int q = 0; q < 2; ++q) {
        for (size_t i = 0; i < block; ++i) ASSERT_EQ(b[static_cast<size_t>(q) * block + i], value(q, m, i));
      }
    }
    EXPECT_GT(large_frames() - frames_before, 0u) << "rank " << r;
    EXPECT_EQ(comm.traffic().idle_sender_frames, before.idle_sender_frames) << "exchanges are busy, rank " << r;
    // In-place broadcasts from rank 0: rank 1's every large frame comes from an idle sender.
    before = comm.traffic();
    frames_before = large_frames();
    for (int m = 0; m < 12; ++m) {
      for (size_t i = 0; i < big; ++i) buf[i] = r == 0 ? value(0, m, i) : -1.0f;
      comm.broadcast(buf.data(), buf.data(), big, DataType::Float32, 0);
      for (size_t i = 0; i < big; ++i) ASSERT_EQ(buf[i], value(0, m, i)) << "rank " << r << ", broadcast " << m;
    }
    const uint64_t idle = comm.traffic().idle_sender_frames - before.idle_sender_frames;
    if (r == 1) {
      EXPECT_GT(idle, 0u);
      EXPECT_EQ(idle, large_frames() - frames_before) << "every large frame of an in-place root is an idle one";
    } else {
      EXPECT_EQ(idle, 0u) << "the root receives none";
    }
    // Out of place, the root copies into its own output while the receiver reads: busy.
    before = comm.traffic();
    for (int m = 0; m < 4; ++m) {
      for (size_t i = 0; i < big; ++i) buf[i] = value(1, m, i);
      std::fill(out.begin(), out.end(), -1.0f);
      comm.broadcast(buf.data(), out.data(), big, DataType::Float32, 1);
      for (size_t i = 0; i < big; ++i) ASSERT_EQ(out[i], value(1, m, i)) << "rank " << r << ", broadcast " << m;
    }
    EXPECT_EQ(comm.traffic().idle_sender_frames, before.idle_sender_frames) << "rank " << r;
  });
}

// An idle sender's lane starts through the rings (ShmOptions::idle_ring_first), where its frames would stream
// without adapting, whatever the probe says; CHORUS_SHM_IDLE_RING_FIRST=0 starts it as the probe says. The lane
// warms over its first ShmTransport::kWarmFrames (8) frames, untimed and untried: two in-place broadcasts of
// 2 MiB (the stream-idle size), 4 frames of 512 KiB each, all go the first way.
TEST(AdaptivePath, AnIdleSendersLaneStartsThroughTheRings) {
  ScopedEnv cma("CHORUS_SHM_CMA", "auto");
  ScopedEnv adapt("CHORUS_SHM_ADAPT", "1");
  ScopedEnv algo("CHORUS_ALGO", "broadcast:binomial");
  const size_t big = (size_t{2} << 20) / sizeof(float);
  for (const char* ring_first : {"", "0"}) {
    ScopedEnv first("CHORUS_SHM_IDLE_RING_FIRST", ring_first);
    run_world(2, shm_options(), [&](Communicator& comm) {
      const int r = comm.rank();
      if (!comm.adapts_single_copy()) {  // one core for both ranks: nothing adapts, and nothing streams
        EXPECT_GT(comm.ranks_per_core(), 1.0);
        return;
      }
      const bool probe_attach =
          comm.attach_cost() > 0 && comm.attach_cost() < transport::ShmTransport::kAttachPaysBelow;
      const bool first_attach = probe_attach && std::string(ring_first) == "0";
      std::vector<float> buf(big);
      const TrafficCounters before = comm.traffic();
      for (int m = 0; m < 2; ++m) {
        for (size_t i = 0; i < big; ++i) buf[i] = r == 0 ? value(0, m, i) : -1.0f;
        comm.broadcast(buf.data(), buf.data(), big, DataType::Float32, 0);
        for (size_t i = 0; i < big; ++i) ASSERT_EQ(buf[i], value(0, m, i)) << "rank " << r << ", broadcast " << m;
      }
      const TrafficCounters after = comm.traffic();
      if (r == 0) return;  // the root receives nothing
      SCOPED_TRACE(fmt::format("CHORUS_SHM_IDLE_RING_FIRST='{}', probe {:.2f} copies", ring_first, comm.attach_cost()));
      EXPECT_EQ(after.idle_sender_frames - before.idle_sender_frames, 8u);
      EXPECT_EQ(after.attach_reads - before.attach_reads, first_attach ? 8u : 0u);
      EXPECT_EQ(after.ring_large_frames - before.ring_large_frames, first_attach ? 0u : 8u);
    });
  }
}

// Where the ranks outnumber the cores, a broadcast's sends and a reduce leaf's (SenderWork::one_way) go through
// the rings below CHORUS_SHM_SINGLE_COPY_SHARED_CORE_BYTES (512 KiB), not by attach, so that their senders need
// not wait for their receivers to be scheduled; 0 puts them back at CHORUS_SHM_SINGLE_COPY_BYTES (64 KiB).
// The reduce's inner ranks keep attach. Every byte arrives as sent either way.
TEST(SharedCores, TreeEdgesBelowTheSharedCoreSizeGoThroughTheRings) {
  ScopedEnv cma("CHORUS_SHM_CMA", "1");
  ScopedEnv algo("CHORUS_ALGO", "broadcast:binomial;reduce:binomial");
  const size_t count = (size_t{256} << 10) / sizeof(float);
  for (const char* shared : {"", "0"}) {
    ScopedEnv size("CHORUS_SHM_SINGLE_COPY_SHARED_CORE_BYTES", shared);
    run_world(4, shm_options(), [&](Communicator& comm) {
      const int r = comm.rank();
      const bool rule = comm.ranks_per_core() > 1.0 && std::string(shared).empty();
      SCOPED_TRACE(fmt::format("rank {}, CHORUS_SHM_SINGLE_COPY_SHARED_CORE_BYTES='{}', {:.1f} ranks per core", r,
                               shared, comm.ranks_per_core()));
      // Broadcast from rank 1, in place: ranks 1 -> 3 and 1 -> 2, then 3 -> 0 (positions relative to the root).
      std::vector<float> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = r == 1 ? value(1, 3, i) : -1.0f;
      TrafficCounters before = comm.traffic();
      comm.broadcast(buf.data(), buf.data(), count, DataType::Float32, 1);
      TrafficCounters after = comm.traffic();
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], value(1, 3, i)) << "element " << i;
      const uint64_t attach = after.attach_reads - before.attach_reads;
      if (rule) {
        EXPECT_EQ(attach, 0u) << "a broadcast's edge below 512 KiB went by attach";
      } else if (comm.cross_memory_attach()) {
        EXPECT_EQ(attach, r == 1 ? 0u : 1u);
      }
      // Reduce to rank 0: leaves 1 and 3 send their input, rank 2 its partial sum of 2 and 3.
      std::vector<float> in(count), out(count, -1.0f);
      for (size_t i = 0; i < count; ++i) in[i] = value(r, 4, i);
      before = comm.traffic();
      comm.reduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum, 0);
      after = comm.traffic();
      if (r == 0) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[i], value(0, 4, i) + value(1, 4, i) + value(2, 4, i) + value(3, 4, i)) << "element " << i;
        }
      }
      // Rank 0 receives from leaf 1 and from inner rank 2, rank 2 from leaf 3. The inner rank sends its partial
      // sum from the communicator's scratch, registered memory, which its parent reads in place where the ranks
      // can map each other's (else by attach): by descriptor either way.
      const uint64_t by_attach = after.attach_reads - before.attach_reads;
      const uint64_t in_place = after.registered_reads - before.registered_reads;
      const uint64_t from_leaves = r == 0 || r == 2 ? 1 : 0, from_inner = r == 0 ? 1 : 0;
      if (comm.cross_memory_attach()) {
        EXPECT_EQ(by_attach + in_place, from_inner + (rule ? 0 : from_leaves));
      } else {
        EXPECT_EQ(by_attach, 0u);
      }
    });
  }
}

// The same edges at other world sizes, algorithms and lengths (not whole cache lines, a frame of a slice and
// a remainder, in place and out of place, each root): every element arrives as sent and as summed, whichever
// way each edge went.
TEST(SharedCores, TreeEdgesCarryEveryByteAtOddSizes) {
  ScopedEnv cma("CHORUS_SHM_CMA", "1");
  for (const char* algo : {"broadcast:binomial;reduce:binomial", "broadcast:chain;reduce:binomial"}) {
    ScopedEnv forced("CHORUS_ALGO", algo);
    for (int n : {3, 5, 8}) {
      run_world(n, shm_options(), [&](Communicator& comm) {
        const int r = comm.rank();
        for (size_t count : {size_t{50001}, size_t{100003}, size_t{131072} + 7}) {
          for (int root : {0, n - 1}) {
            SCOPED_TRACE(fmt::format("{}, {} ranks, rank {}, count {}, root {}", algo, n, r, count, root));
            std::vector<float> buf(count), out(count, -1.0f);
            for (size_t i = 0; i < count; ++i) buf[i] = r == root ? value(root, 5, i) : -1.0f;
            comm.broadcast(buf.data(), buf.data(), count, DataType::Float32, root);
            for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], value(root, 5, i)) << "in place, element " << i;
            for (size_t i = 0; i < count; ++i) buf[i] = value(root, 6, i);
            comm.broadcast(buf.data(), out.data(), count, DataType::Float32, root);
            for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], value(root, 6, i)) << "out of place, element " << i;
            // Small integers in float: the sum is exact in any order.
            for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((r + 1) * (1 + static_cast<int>(i % 97)));
            std::fill(out.begin(), out.end(), -1.0f);
            comm.reduce(buf.data(), out.data(), count, DataType::Float32, ReduceOp::Sum, root);
            if (r == root) {
              const int ranks_sum = n * (n + 1) / 2;
              for (size_t i = 0; i < count; ++i) {
                ASSERT_EQ(out[i], static_cast<float>(ranks_sum * (1 + static_cast<int>(i % 97)))) << "reduce, " << i;
              }
            }
          }
        }
      });
    }
  }
}

TEST(ShmSegments, ANewCommunicatorRemovesSegmentsLeftByDeadCreators) {
  // A rank that dies while creating a communicator leaves its segment's name in /dev/shm. The next creation
  // removes names of this pid namespace whose creator is gone, and only those.
  char link[64] = {};
  ASSERT_GT(::readlink("/proc/self/ns/pid", link, sizeof(link) - 1), 0);
  unsigned long ns = 0;
  ASSERT_EQ(std::sscanf(link, "pid:[%lu]", &ns), 1);
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string stale = fmt::format("chorus-00000000000000aa-r0-n{}-p{}", ns, dead);
  const std::string alive = fmt::format("chorus-00000000000000aa-r1-n{}-p{}", ns, ::getpid());
  const std::string foreign = fmt::format("chorus-00000000000000aa-r2-n{}-p{}", ns + 1, dead);
  for (const std::string& name : {stale, alive, foreign}) {
    const int fd = ::shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << name;
    ::close(fd);
  }
  auto exists = [](const std::string& name) { return std::filesystem::exists("/dev/shm/" + name); };
  run_world(2, shm_options(), [&](Communicator& comm) { comm.barrier(); });
  EXPECT_FALSE(exists(stale));
  EXPECT_TRUE(exists(alive));
  EXPECT_TRUE(exists(foreign));
  ::shm_unlink(("/" + alive).c_str());
  ::shm_unlink(("/" + foreign).c_str());
  ::shm_unlink(("/" + stale).c_str());
}

// Two ShmTransports in threads of this process, ranks 0 and 1 of one host, each running body(transport, rank,
// deadline) and then closing its transport.
void run_shm_pair(const transport::ShmOptions& options,
                  const std::function<void(transport::ShmTransport&, int, const base::Deadline&)>& body) {
  static std::atomic<int> pairs{0};
  MemoryStore store;
  const std::string prefix = fmt::format("pair{}-{}/", ::getpid(), pairs.fetch_add(1));
  auto rank_body = [&](int rank) {
    try {
      auto deadline = base::Deadline::after(std::chrono::seconds(60));
      auto t = transport::ShmTransport::connect(store, prefix, rank, 2, {0, 1}, 0x5e1f5e1full, options, deadline);
      body(*t, rank, deadline);
      t->close();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << ": " << e.what();
    }
  };
  std::thread r0(rank_body, 0), r1(rank_body, 1);
  r0.join();
  r1.join();
}

TEST(ShmRing, PayloadsLargerThanTheRingStreamInPiecesOfAnySize) {
  // A payload larger than the room in the ring is written in pieces of at most stream_piece_bytes, the head
  // published after each (0: as far as the room goes). Payloads of odd lengths up to five rings, through the
  // default 1 MiB ring, every byte checked, for pieces of one cache line, of an odd number of them, of the
  // default size, and none.
  const std::vector<size_t> lengths{(size_t{1} << 20) + 17, (size_t{3} << 20) + 197, size_t{5} << 20, 4096 + 3};
  for (size_t piece : {size_t{64}, size_t{65 * 64}, size_t{128} << 10, size_t{0}}) {
    SCOPED_TRACE("stream_piece_bytes " + std::to_string(piece));
    transport::ShmOptions o;
    o.cma = 0;  // every payload through the ring
    o.stream_piece_bytes = piece;
    auto tag = [&](size_t i) {
      transport::MessageTag t;
      t.op = transport::OpKind::SendRecv;
      t.dtype = DataType::UInt8;
      t.seq = i;
      t.count = lengths[i];
      return t;
    };
    auto byte = [](size_t m, size_t i) { return static_cast<char>((i * 131 + m * 17 + (i >> 12)) & 0xff); };
    run_shm_pair(o, [&](transport::ShmTransport& t, int rank, const base::Deadline& deadline) {
      for (size_t m = 0; m < lengths.size(); ++m) {
        std::vector<char> buf(lengths[m]);
        if (rank == 0) {
          for (size_t i = 0; i < buf.size(); ++i) buf[i] = byte(m, i);
          t.isend(1, tag(m), buf.data(), buf.size(), deadline, transport::SenderWork::idle(buf.size()));
          t.flush(deadline);
        } else {
          t.recv(0, tag(m), buf.data(), buf.size(), deadline);
          size_t wrong = 0;
          for (size_t i = 0; i < buf.size(); ++i) wrong += buf[i] != byte(m, i);
          EXPECT_EQ(wrong, 0u) << "payload " << m << " of " << lengths[m] << " bytes";
        }
      }
    });
  }
}

// ---- sleeping and waking ----

TEST(ShmWaits, ASenderWaitingForRoomWritesWhatFitsBeforeItSleeps) {
  // A gather of 8 MiB on 2 ranks (2 processes): the leaf's 4 MiB streams through the 1 MiB ring (an idle
  // sender), waiting for room while the root copies its own block and then the ring's frames out. A wait's
  // last look before it sleeps writes what fits: room that the root freed after the leaf's last write, before
  // it could see the leaf asleep, is not rung for. Without that, the first call of a new communicator often
  // lost a whole 100 ms slice with both ranks asleep, counted as a missed wake-up (the slice ended with bytes
  // the leaf could have written): in 10 of this test's 16 jobs. Eight jobs of two processes per way of moving
  // large payloads, each making the first calls of its world and of two splits of it; every byte is checked.
  for (const char* cma : {"CHORUS_SHM_CMA=auto", "CHORUS_SHM_CMA=0"}) {
    for (int job_index = 0; job_index < 8; ++job_index) {
      std::vector<Child> job{spawn({CHORUS_BIN_DIR "/chorus-run", "-n", "2", "--", worker_path(), "gather-fresh",
                                    std::to_string(8 << 20), "3"},
                                   {"CHORUS_TRANSPORT=shm", cma, "CHORUS_TIMEOUT_MS=60000"}, /*merge_stderr=*/true)};
      wait_all(job, std::chrono::seconds(120));
      const Child& c = job.front();
      EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << cma << "\n" << c.output;
      for (int r = 0; r < 2; ++r) {
        EXPECT_NE(c.output.find(fmt::format("GATHER-FRESH rank {} wrong 0 missed 0", r)), std::string::npos)
            << cma << ", job " << job_index << "\n" << c.output;
      }
    }
  }
}

// ---- how long a wait polls (ShmOptions::adaptive_spin) ----

// Two ShmTransports (run_shm_pair): rank 0 sends `gaps.size()` 8-byte frames, each after sleeping its
// gap; rank 1 receives them (on a background thread when `background`) and records its spin_budget() after each.
std::vector<std::chrono::nanoseconds> shm_budgets_after_gaps(const std::vector<std::chrono::microseconds>& gaps,
                                                             const transport::ShmOptions& options,
                                                             bool background = false) {
  std::vector<std::chrono::nanoseconds> budgets;
  auto tag = [](size_t i) {
    transport::MessageTag t;
    t.op = transport::OpKind::SendRecv;
    t.dtype = DataType::UInt8;
    t.seq = i;
    t.count = 8;
    return t;
  };
  run_shm_pair(options, [&](transport::ShmTransport& t, int rank, const base::Deadline& deadline) {
    if (rank == 0) {
      for (size_t i = 0; i < gaps.size(); ++i) {
        std::this_thread::sleep_for(gaps[i]);
        const uint64_t payload = 0x0102030405060708ull + i;
        t.isend(1, tag(i), &payload, sizeof payload, deadline, transport::SenderWork::busy());
        t.flush(deadline);
      }
    } else {
      transport::set_background_thread(background);
      budgets.push_back(t.spin_budget());
      for (size_t i = 0; i < gaps.size(); ++i) {
        uint64_t got = 0;
        t.recv(0, tag(i), &got, sizeof got, deadline);
        EXPECT_EQ(got, 0x0102030405060708ull + i) << "frame " << i;
        budgets.push_back(t.spin_budget());
      }
      transport::set_background_thread(false);
    }
  });
  return budgets;
}

TEST(ShmWaits, PollLongerAfterShortSleepsAndShorterAfterLongOnes) {
  // Where each local rank has a core and CHORUS_SHM_SPIN is unset, a wait polls for its SpinBudget's time.
  // Frames 300 us apart make waits that outlast the first budget (150 us) but end within the maximum (600 us):
  // the budget grows (at least once in 100, however loaded the machine). Frames 10 ms apart then bring it back
  // to the minimum: every such wait is longer than kShrinkFactor times the maximum.
  using transport::ShmTransport;
  transport::ShmOptions o;
  o.oversubscribed = 0;
  o.cores_contended = []() noexcept { return false; };  // the cores to itself (contended waits: the next test)
  constexpr size_t kShortGaps = 100;
  std::vector<std::chrono::microseconds> gaps(kShortGaps, std::chrono::microseconds(300));
  static_assert(ShmTransport::kSpinMax * transport::SpinBudget::kShrinkFactor < std::chrono::milliseconds(10));
  static_assert(ShmTransport::kSpinMin * 32 >= ShmTransport::kSpinMax, "10 long waits bring the maximum down");
  static_assert(ShmTransport::kSpinMin < std::chrono::microseconds(300) &&
                ShmTransport::kSpinMax > std::chrono::microseconds(300));
  gaps.insert(gaps.end(), 10, std::chrono::microseconds(10000));
  EXPECT_TRUE(o.adaptive_spin);  // the default
  auto budgets = shm_budgets_after_gaps(gaps, o);
  ASSERT_EQ(budgets.size(), gaps.size() + 1);
  EXPECT_EQ(budgets.front(), ShmTransport::kSpinMin);
  auto grown = *std::max_element(budgets.begin(), budgets.begin() + kShortGaps + 1);
  EXPECT_GT(grown, ShmTransport::kSpinMin);
  EXPECT_LE(grown, ShmTransport::kSpinMax);
  EXPECT_EQ(budgets.back(), ShmTransport::kSpinMin);

  // On a background thread (the progress thread of async calls, where the caller computes meanwhile) the
  // budget is not used and stays put; with CHORUS_SHM_SPIN's fixed count, oversubscribed (each poll yields the
  // core), and with CHORUS_SHM_ADAPTIVE_SPIN=0 there is none (0).
  std::vector<std::chrono::microseconds> short_gaps(20, std::chrono::microseconds(300));
  for (auto b : shm_budgets_after_gaps(short_gaps, o, /*background=*/true)) EXPECT_EQ(b, ShmTransport::kSpinMin);
  transport::ShmOptions fixed = o;
  fixed.spin = 4000;
  for (auto b : shm_budgets_after_gaps(short_gaps, fixed)) EXPECT_EQ(b, std::chrono::nanoseconds(0));
  transport::ShmOptions over = o;
  over.oversubscribed = 1;
  for (auto b : shm_budgets_after_gaps(short_gaps, over)) EXPECT_EQ(b, std::chrono::nanoseconds(0));
  transport::ShmOptions off = o;
  off.adaptive_spin = false;
  for (auto b : shm_budgets_after_gaps(short_gaps, off)) EXPECT_EQ(b, std::chrono::nanoseconds(0));
}

TEST(ShmWaits, KeepTheirShortestPollWhileOtherWorkWantsTheCores) {
  // The same frames 300 us apart, but every wait that sleeps finds the cores contended: the budget never grows
  // (with both ranks on one CPU beside a busy process, each exchange cost a whole poll; docs/performance.md).
  using transport::ShmTransport;
  transport::ShmOptions o;
  o.oversubscribed = 0;
  static std::atomic<int> asked{0};
  asked = 0;
  o.cores_contended = []() noexcept {
    asked.fetch_add(1);
    return true;
  };
  std::vector<std::chrono::microseconds> gaps(40, std::chrono::microseconds(300));
  for (auto b : shm_budgets_after_gaps(gaps, o)) EXPECT_EQ(b, ShmTransport::kSpinMin);
  // Asked only by waits that slept: at least one of 40, at most one each.
  EXPECT_GE(asked.load(), 1);
  EXPECT_LE(asked.load(), 40);
}

TEST(ShmWaits, AdaptiveSpinIsOnByDefaultAndCHORUS_SHM_ADAPTIVE_SPINTakesZeroOrOne) {
  for (const char* bad : {"2", "yes", "-1"}) {
    ScopedEnv env("CHORUS_SHM_ADAPTIVE_SPIN", bad);
    const std::string what = expect_error(ErrorCode::InvalidArgument, [] {
      (void)Communicator::create(std::make_shared<MemoryStore>(), 0, 2, shm_options());
    });
    EXPECT_NE(what.find("CHORUS_SHM_ADAPTIVE_SPIN"), std::string::npos) << "'" << bad << "': " << what;
  }
}

}  // namespace
}  // namespace chorus::testing
