// The tcp transport's receive path, driven directly: frames that arrive before their receive is posted (a peer
// running ahead, so that the socket holds many of them at once) come out intact and in order, whatever their
// sizes, whether they are copied or reduced, and before the peer's goodbye or abort, with and without reading
// ahead (TcpOptions::read_ahead_bytes), and with read-ahead buffers smaller than a frame's header.
#include "transport/tcp/tcp_transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/files.h"
#include "chorus/communicator.h"
#include "chorus/store.h"
#include "kernels/reduce.h"
#include "test_util.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kCommTag = 0x7c9da4ead5eed5ull;

struct Frame {
  size_t bytes = 0;
  bool reduce = false;  // received with recv_reduce (float sum against local ones)
};

transport::MessageTag tag_of(size_t index, const Frame& f) {
  transport::MessageTag t;
  t.op = transport::OpKind::SendRecv;
  t.dtype = f.reduce ? DataType::Float32 : DataType::UInt8;
  t.seq = index;
  t.count = f.reduce ? f.bytes / 4 : f.bytes;
  return t;
}

// Frame i's payload: bytes that differ from frame to frame and from position to position (floats for a reduce).
std::vector<char> payload_of(size_t index, const Frame& f) {
  std::vector<char> data(f.bytes);
  if (f.reduce) {
    for (size_t k = 0; k < f.bytes / 4; ++k) {
      float v = static_cast<float>((index * 7 + k) % 1000);
      std::memcpy(data.data() + 4 * k, &v, 4);
    }
  } else {
    for (size_t k = 0; k < f.bytes; ++k) data[k] = static_cast<char>((index * 131 + k * 7) % 251);
  }
  return data;
}

// Two ranks over loopback tcp, each run by its own thread.
void run_pair(const std::function<void(transport::TcpTransport&)>& sender,
              const std::function<void(transport::TcpTransport&)>& receiver,
              const transport::TcpOptions& options = {}) {
  MemoryStore store;
  auto body = [&](int rank) {
    try {
      auto deadline = base::Deadline::after(std::chrono::seconds(60));
      auto t = transport::TcpTransport::connect(store, "tcp/", rank, 2, kCommTag, options, std::nullopt,
                                                /*all_local=*/true, deadline);
      (rank == 0 ? sender : receiver)(*t);
      t->close();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << ": " << e.what();
    }
  };
  std::thread r0(body, 0), r1(body, 1);
  r0.join();
  r1.join();
}

// Each test below runs with these read-ahead sizes: none, one smaller than a frame header (frames of up to 25
// bytes read ahead, in pieces), the default, and one that reads ahead of frames up to 256 KiB (reduced ones
// among them, whose 64 KiB staging pieces then come partly from the buffer).
class TcpReadAhead : public ::testing::TestWithParam<size_t> {
 protected:
  transport::TcpOptions options() const {
    transport::TcpOptions o;
    o.read_ahead_bytes = GetParam();
    return o;
  }
};

INSTANTIATE_TEST_SUITE_P(Sizes, TcpReadAhead,
                         ::testing::Values(size_t{0}, size_t{100}, size_t{16} << 10, size_t{1} << 20),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return "Bytes" + std::to_string(info.param);
                         });

TEST_P(TcpReadAhead, FramesThatArriveEarlyStayIntactAndInOrder) {
  // Small frames, empty ones, sizes either side of 16 KiB, a large one, and reduced ones of one and of several
  // 64 KiB staging pieces, in one stream.
  std::vector<Frame> frames;
  for (size_t i = 0; i < 300; ++i) frames.push_back({(i * 37) % 700, false});
  frames.push_back({1 << 20, false});
  for (size_t i = 0; i < 3; ++i) frames.push_back({0, false});
  for (size_t b : {16383, 16384, 16385, 16 * 1024 - 64, 20000}) frames.push_back({b, false});
  frames.push_back({4096, true});
  frames.push_back({200 * 1024, true});
  for (size_t i = 0; i < 100; ++i) frames.push_back({(i * 53) % 300 + 1, i % 10 == 0});
  for (Frame& f : frames)
    if (f.reduce) f.bytes = (f.bytes + 3) / 4 * 4;

  run_pair(
      [&](transport::TcpTransport& t) {
        auto deadline = base::Deadline::after(std::chrono::seconds(60));
        std::vector<std::vector<char>> payloads;
        for (size_t i = 0; i < frames.size(); ++i) payloads.push_back(payload_of(i, frames[i]));
        for (size_t i = 0; i < frames.size(); ++i) {
          t.isend(1, tag_of(i, frames[i]), payloads[i].data(), frames[i].bytes, deadline,
                  transport::SenderWork::busy());
        }
        t.flush(deadline);
      },
      [&](transport::TcpTransport& t) {
        std::this_thread::sleep_for(milliseconds(300));  // the sender runs ahead
        auto deadline = base::Deadline::after(std::chrono::seconds(60));
        transport::Reduction sum;
        sum.fn = kernels::reduce_fn(DataType::Float32, ReduceOp::Sum);
        sum.elem_size = 4;
        for (size_t i = 0; i < frames.size(); ++i) {
          const Frame& f = frames[i];
          std::vector<char> expected = payload_of(i, f);
          std::vector<char> got(f.bytes + 8, '\x5a');  // guard bytes past the end stay untouched
          if (f.reduce) {
            std::vector<float> local(f.bytes / 4, 0.5f);
            t.recv_reduce(0, tag_of(i, f), got.data(), local.data(), f.bytes, sum, deadline);
            for (size_t k = 0; k < f.bytes / 4; ++k) {
              float in, out;
              std::memcpy(&in, expected.data() + 4 * k, 4);
              std::memcpy(&out, got.data() + 4 * k, 4);
              ASSERT_EQ(out, in + 0.5f) << "frame " << i << " element " << k;
            }
          } else {
            t.recv(0, tag_of(i, f), got.data(), f.bytes, deadline);
            ASSERT_TRUE(std::equal(expected.begin(), expected.end(), got.begin()))
                << "frame " << i << " of " << f.bytes;
          }
          for (size_t k = f.bytes; k < got.size(); ++k) ASSERT_EQ(got[k], '\x5a') << "frame " << i << " overran";
        }
      },
      options());
}

// Rank 0 sends `frames` plain frames (frame i of i * 7 + 1 bytes) and then ends its stream with `end` (nothing:
// run_pair's close() sends a goodbye); rank 1 receives them once they are all in its socket, then one more,
// which must fail with `code` and a message containing `what`, within 5 seconds. With `look_between`, rank 1
// looks at its sockets (check_peers) after the first frame, when the rest may sit in the read-ahead buffer:
// the hang-up it finds there must not hide them, nor turn a goodbye into a loss.
void expect_frames_then_error(size_t frames, const transport::TcpOptions& options,
                              const std::function<void(transport::TcpTransport&)>& end, ErrorCode code,
                              const std::string& what, bool look_between = false) {
  auto frame = [](size_t i) { return Frame{i * 7 + 1, false}; };
  run_pair(
      [&](transport::TcpTransport& t) {
        auto deadline = base::Deadline::after(std::chrono::seconds(60));
        std::vector<std::vector<char>> payloads;
        for (size_t i = 0; i < frames; ++i) payloads.push_back(payload_of(i, frame(i)));
        for (size_t i = 0; i < frames; ++i) {
          t.isend(1, tag_of(i, frame(i)), payloads[i].data(), payloads[i].size(), deadline,
                  transport::SenderWork::busy());
        }
        t.flush(deadline);
        if (end) end(t);
      },
      [&](transport::TcpTransport& t) {
        std::this_thread::sleep_for(milliseconds(300));  // the frames and the stream's end are all there
        auto deadline = base::Deadline::after(std::chrono::seconds(20));
        for (size_t i = 0; i < frames; ++i) {
          std::vector<char> got(frame(i).bytes);
          t.recv(0, tag_of(i, frame(i)), got.data(), got.size(), deadline);
          ASSERT_EQ(got, payload_of(i, frame(i))) << "frame " << i;
          if (i == 0 && look_between) t.check_peers();
        }
        const auto started = std::chrono::steady_clock::now();
        char extra[8];
        try {
          t.recv(0, tag_of(frames, {8, false}), extra, 8, deadline);
          ADD_FAILURE() << "a receive past the end of the peer's stream must fail";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), code) << e.what();
          EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5)) << "the error came late";
      },
      options);
}

TEST_P(TcpReadAhead, FramesSentBeforeAGoodbyeAreDeliveredBeforeIt) {
  expect_frames_then_error(40, options(), nullptr, ErrorCode::PeerLost, "rank 0 closed its communicator");
  expect_frames_then_error(40, options(), nullptr, ErrorCode::PeerLost, "rank 0 closed its communicator",
                           /*look_between=*/true);
}

TEST_P(TcpReadAhead, FramesSentBeforeAnAbortAreDeliveredThenItsReasonIsReported) {
  // With reading ahead, the abort frame (or its first bytes) sits in the read-ahead buffer when the peer's
  // stream ends.
  expect_frames_then_error(
      25, options(),
      [](transport::TcpTransport& t) { t.fail(Error(ErrorCode::InvalidArgument, "rank 0 was given a bad count", 0)); },
      ErrorCode::InvalidArgument, "rank 0 aborted the communicator: rank 0 was given a bad count");
}

// A receive that finds its socket empty waits: a small one-way receive (nothing sent to that peer since the
// last receive from it) looks at epoll until the socket is readable and only then reads it; one that follows a
// send of ours, and a large one, read at every poll. Frames that trickle in (the sender pausing now and then),
// of sizes either side of that line, received both ways (after odd frames the receiver answers, so its next
// receive follows a send), all arrive intact; and a wait of the first kind still learns of the peer's abort.
TEST_P(TcpReadAhead, ReceivesThatWaitForTricklingFramesSeeEveryFrameAndThePeersAbort) {
  constexpr size_t kFrames = 121;  // the last one even
  auto frame = [](size_t i) {
    static constexpr size_t kSizes[] = {1, 100, 4096, 65536, 65537, 0, 300000, 8};
    return Frame{kSizes[i % 8], false};
  };
  const std::string reason = "rank 0 stopped on purpose";
  run_pair(
      [&](transport::TcpTransport& t) {
        auto deadline = base::Deadline::after(std::chrono::seconds(60));
        for (size_t i = 0; i < kFrames; ++i) {
          if (i % 3 == 0) std::this_thread::sleep_for(milliseconds(1));
          const std::vector<char> payload = payload_of(i, frame(i));
          auto h =
              t.isend(1, tag_of(i, frame(i)), payload.data(), payload.size(), deadline, transport::SenderWork::busy());
          t.wait_send(h, deadline);
          if (i % 2 == 1) {
            char ack = 0;
            t.recv(1, tag_of(kFrames + i, {1, false}), &ack, 1, deadline);
            ASSERT_EQ(ack, static_cast<char>(i));
          }
        }
        std::this_thread::sleep_for(milliseconds(200));  // the receiver waits for a frame that never comes
        t.fail(Error(ErrorCode::InvalidArgument, reason, 0));
      },
      [&](transport::TcpTransport& t) {
        auto deadline = base::Deadline::after(std::chrono::seconds(60));
        for (size_t i = 0; i < kFrames; ++i) {
          std::vector<char> got(frame(i).bytes);
          t.recv(0, tag_of(i, frame(i)), got.data(), got.size(), deadline);
          ASSERT_EQ(got, payload_of(i, frame(i))) << "frame " << i;
          if (i % 2 == 1) {
            const char ack = static_cast<char>(i);
            t.flush(deadline);
            t.wait_send(t.isend(0, tag_of(kFrames + i, {1, false}), &ack, 1, deadline, transport::SenderWork::busy()),
                        deadline);
          }
        }
        // The last frame was even (not answered): this wait is a one-way one.
        const auto started = std::chrono::steady_clock::now();
        char extra[8];
        try {
          t.recv(0, tag_of(2 * kFrames, {8, false}), extra, 8, deadline);
          ADD_FAILURE() << "a receive after the peer's abort must fail";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
          EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5)) << "the error came late";
      },
      options());
}

TEST(TcpTransport, ConnectionsOnOneHostUseRenoUnlessTheSystemsChoiceIsAsked) {
  // Loopback connections: "auto" (the default) gives them reno, "system" leaves the kernel's default, and a
  // name the kernel refuses is an InvalidArgument that names the variable, on every rank.
  const std::string system_default = base::read_first_line("/proc/sys/net/ipv4/tcp_congestion_control");
  ASSERT_FALSE(system_default.empty());
  std::string seen[2];
  auto record = [&](int rank) {
    return [&seen, rank](transport::TcpTransport& t) { seen[rank] = t.congestion_control(1 - rank); };
  };
  run_pair(record(0), record(1));
  EXPECT_EQ(seen[0], transport::TcpTransport::kSameHostCongestion);
  EXPECT_EQ(seen[1], transport::TcpTransport::kSameHostCongestion);

  transport::TcpOptions system;
  system.congestion = "system";
  run_pair(record(0), record(1), system);
  EXPECT_EQ(seen[0], system_default);
  EXPECT_EQ(seen[1], system_default);

  MemoryStore store;
  transport::TcpOptions bogus;
  bogus.congestion = "no_such_cc";
  int refused = 0;
  std::mutex mu;
  auto body = [&](int rank) {
    try {
      auto deadline = base::Deadline::after(std::chrono::seconds(60));
      transport::TcpTransport::connect(store, "tcp/", rank, 2, kCommTag, bogus, std::nullopt, /*all_local=*/true,
                                       deadline);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("CHORUS_TCP_CONGESTION='no_such_cc'"), std::string::npos) << e.what();
      ++refused;
    }
  };
  std::thread r0(body, 0), r1(body, 1);
  r0.join();
  r1.join();
  EXPECT_EQ(refused, 2);
}

// The second figure of /proc/sys/net/ipv4/tcp_rmem: the receive buffer an autotuned socket starts with.
int autotuned_receive_buffer() {
  std::istringstream in(base::read_first_line("/proc/sys/net/ipv4/tcp_rmem"));
  int min = 0, start = 0;
  in >> min >> start;
  return start;
}

TEST(TcpTransport, ConnectionsOnOneHostReceiveIntoAFixedBufferUnlessAskedOtherwise) {
  // Same-host connections get a fixed receive buffer (kSameHostReceiveBuffer, which the kernel books twice)
  // where the host allows it (SO_RCVBUFFORCE, or net.core.rmem_max at least that large); elsewhere they stay
  // autotuned and the settings line says why. 0 autotunes them; CHORUS_SOCKET_BUFFER_BYTES sets both buffers
  // of every connection instead.
  using transport::TcpTransport;
  ASSERT_GT(autotuned_receive_buffer(), 0);
  int seen[2] = {0, 0};
  std::string settings[2];
  auto record = [&](int rank) {
    return [&, rank](TcpTransport& t) {
      seen[rank] = t.receive_buffer(1 - rank);
      settings[rank] = t.settings();
    };
  };
  run_pair(record(0), record(1));
  if (seen[0] == 2 * TcpTransport::kSameHostReceiveBuffer) {
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(seen[r], 2 * TcpTransport::kSameHostReceiveBuffer);
      EXPECT_NE(settings[r].find("a fixed receive buffer of 4194304 bytes on same-host connections "
                                 "(CHORUS_TCP_SAME_HOST_RCVBUF), others autotuned"),
                std::string::npos)
          << settings[r];
    }
  } else {
    // Neither CAP_NET_ADMIN nor a large enough rmem_max: left as autotuning made it, and said so.
    const long long rmem_max = std::stoll(base::read_first_line("/proc/sys/net/core/rmem_max"));
    EXPECT_LT(rmem_max, TcpTransport::kSameHostReceiveBuffer);
    for (int r = 0; r < 2; ++r) {
      EXPECT_NE(settings[r].find("net.core.rmem_max is under the 4194304 bytes"), std::string::npos) << settings[r];
    }
  }

  transport::TcpOptions autotuned;
  autotuned.same_host_receive_buffer_bytes = 0;
  run_pair(record(0), record(1), autotuned);
  for (int r = 0; r < 2; ++r) {
    // Nothing has been received yet, so autotuning has not grown it.
    EXPECT_EQ(seen[r], autotuned_receive_buffer());
    EXPECT_NE(settings[r].find("socket buffers autotuned by the kernel"), std::string::npos) << settings[r];
  }

  transport::TcpOptions both;
  both.socket_buffer_bytes = 64 << 10;  // under any rmem_max a Linux host ships with
  run_pair(record(0), record(1), both);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(seen[r], 2 * (64 << 10));
    EXPECT_NE(settings[r].find("socket buffers of 65536 bytes (CHORUS_SOCKET_BUFFER_BYTES)"), std::string::npos)
        << settings[r];
  }
}

TEST(TcpTransport, SameHostSendsQueueAtMostTheirLowMarkUnlessAskedOtherwise) {
  // Same-host connections get TCP_NOTSENT_LOWAT = kSameHostNotsentLowat (so that little of a send waits in the
  // socket to go out from the peer's CPU), and the settings line says so; 0 leaves the kernel's (which reads 0).
  using transport::TcpTransport;
  int seen[2] = {-1, -1};
  std::string settings[2];
  auto record = [&](int rank) {
    return [&, rank](TcpTransport& t) {
      seen[rank] = t.notsent_lowat(1 - rank);
      settings[rank] = t.settings();
    };
  };
  run_pair(record(0), record(1));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(seen[r], TcpTransport::kSameHostNotsentLowat);
    EXPECT_NE(
        settings[r].find("same-host sends queue at most 524288 unsent bytes (CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT)"),
        std::string::npos)
        << settings[r];
  }
  transport::TcpOptions kernel;
  kernel.same_host_notsent_lowat_bytes = 0;
  run_pair(record(0), record(1), kernel);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(seen[r], 0);
    EXPECT_NE(settings[r].find("same-host sends queue as the kernel allows (CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT=0)"),
              std::string::npos)
        << settings[r];
  }
  transport::TcpOptions small;
  small.same_host_notsent_lowat_bytes = 64 << 10;
  run_pair(record(0), record(1), small);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(seen[r], 64 << 10);
}

// Each value of the environment variable `name` makes a tcp communicator's creation fail with InvalidArgument
// naming the variable.
void expect_tcp_setting_refused(const char* name, std::initializer_list<const char*> values) {
  for (const char* bad : values) {
    testing::ScopedEnv env(name, bad);
    CommOptions o;
    o.transport = TransportKind::Tcp;
    const std::string what = testing::expect_error(
        ErrorCode::InvalidArgument, [&] { Communicator::create(std::make_shared<MemoryStore>(), 0, 1, o); });
    EXPECT_NE(what.find(name), std::string::npos) << name << "=" << bad << ": " << what;
  }
}

TEST(TcpTransport, CongestionSettingIsCheckedAndSystemLeavesCommunicatorsWorking) {
  // A value that cannot be an algorithm's name is refused before any connection, naming the variable (an empty
  // one counts as unset, as for every CHORUS_ variable).
  expect_tcp_setting_refused("CHORUS_TCP_CONGESTION", {"a b", "reno;bbr", "averyveryverylongname"});
  // "system" and an explicit reno both give working communicators: an all_reduce of 1 MiB comes out right.
  for (const char* choice : {"system", "reno"}) {
    testing::ScopedEnv env("CHORUS_TCP_CONGESTION", choice);
    CommOptions o;
    o.transport = TransportKind::Tcp;
    testing::run_world(2, o, [](Communicator& comm) {
      std::vector<float> buf(1 << 18);
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>((i % 7) + comm.rank());
      comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
      for (size_t i = 0; i < buf.size(); ++i) {
        ASSERT_EQ(buf[i], static_cast<float>(2 * (i % 7) + 1)) << "element " << i;
      }
    });
  }
}

// For each value of the environment variable `name`: 3 tcp ranks, small and large all_reduces and broadcasts
// from every root, each checked against its closed form.
void expect_right_results_with(const char* name, std::initializer_list<const char*> values) {
  for (const char* value : values) {
    testing::ScopedEnv env(name, value);
    CommOptions o;
    o.transport = TransportKind::Tcp;
    constexpr int kRanks = 3;
    testing::run_world(kRanks, o, [&](Communicator& comm) {
      const int r = comm.rank();
      for (size_t count : {size_t{1}, size_t{300}, size_t{1} << 17}) {
        std::vector<int32_t> v(count);
        for (size_t k = 0; k < count; ++k) v[k] = static_cast<int32_t>((r + 1) * 10 + k % 5);
        comm.all_reduce(v.data(), v.data(), count, DataType::Int32, ReduceOp::Sum);
        for (size_t k = 0; k < count; ++k) {
          // sum over ranks q of (q + 1) * 10 + k % 5
          ASSERT_EQ(v[k], static_cast<int32_t>(10 * kRanks * (kRanks + 1) / 2 + kRanks * (k % 5)))
              << name << "=" << value << " element " << k;
        }
        for (int root = 0; root < kRanks; ++root) {
          std::vector<int32_t> b(count, r == root ? root + 7 : -1);
          comm.broadcast(b.data(), b.data(), count, DataType::Int32, root);
          ASSERT_EQ(std::count(b.begin(), b.end(), root + 7), static_cast<std::ptrdiff_t>(count))
              << name << "=" << value;
        }
      }
    });
  }
}

TEST(TcpTransport, SpinSettingIsCheckedAndEveryValueGivesRightResults) {
  // CHORUS_TCP_SPIN: polls of an empty socket before a receive sleeps in epoll_wait. Out of range is refused
  // at creation, naming the variable. 0 (every empty read sleeps until epoll reports data) and a long spin
  // give right results.
  expect_tcp_setting_refused("CHORUS_TCP_SPIN", {"-1", "100000001", "many"});
  expect_right_results_with("CHORUS_TCP_SPIN", {"0", "100000"});
  // CHORUS_TCP_ADAPTIVE_SPIN: 0 or 1.
  expect_tcp_setting_refused("CHORUS_TCP_ADAPTIVE_SPIN", {"2", "-1", "yes"});
  expect_right_results_with("CHORUS_TCP_ADAPTIVE_SPIN", {"0", "1"});
}

TEST(TcpTransport, SameHostBufferSettingsAreCheckedAndEveryValueGivesRightResults) {
  // CHORUS_TCP_SAME_HOST_RCVBUF: a size up to 1 GiB; 0 autotunes same-host connections too.
  expect_tcp_setting_refused("CHORUS_TCP_SAME_HOST_RCVBUF", {"lots", "-1", "2G"});
  expect_right_results_with("CHORUS_TCP_SAME_HOST_RCVBUF", {"0", "64K", "4M"});
  // CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT: the same; 0 leaves the kernel's.
  expect_tcp_setting_refused("CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT", {"lots", "-1", "2G"});
  expect_right_results_with("CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT", {"0", "16K", "4M"});
}

TEST(TcpTransport, ReadAheadSettingIsCheckedAndEveryValueGivesRightResults) {
  // CHORUS_TCP_READ_AHEAD: bytes a receive of a small frame may read past it. Not a size, or above 16 MiB, is
  // refused at creation, naming the variable; none, less than a header, and 1 MiB give right results.
  expect_tcp_setting_refused("CHORUS_TCP_READ_AHEAD", {"-1", "17M", "1.5K", "lots"});
  expect_right_results_with("CHORUS_TCP_READ_AHEAD", {"0", "40", "1M"});
}

TEST(SpinBudget, DoublesAfterShortSleepsHalvesAfterLongOnesAndStaysInItsBounds) {
  using std::chrono::microseconds;
  transport::SpinBudget b(microseconds(40), microseconds(320));
  EXPECT_EQ(b.budget(), microseconds(40));
  // A sleep that ended within the maximum: polling longer would have spared it.
  b.after_sleep(microseconds(150));
  EXPECT_EQ(b.budget(), microseconds(80));
  b.after_sleep(microseconds(320));
  EXPECT_EQ(b.budget(), microseconds(160));
  for (int i = 0; i < 10; ++i) b.after_sleep(microseconds(100));
  EXPECT_EQ(b.budget(), microseconds(320));
  // Between the maximum and kShrinkFactor times it: left alone.
  b.after_sleep(microseconds(321));
  b.after_sleep(microseconds(320 * transport::SpinBudget::kShrinkFactor));
  EXPECT_EQ(b.budget(), microseconds(320));
  // Far beyond it: the peer was busy, polling only burns the core.
  b.after_sleep(microseconds(320 * transport::SpinBudget::kShrinkFactor + 1));
  EXPECT_EQ(b.budget(), microseconds(160));
  for (int i = 0; i < 10; ++i) b.after_sleep(std::chrono::milliseconds(50));
  EXPECT_EQ(b.budget(), microseconds(40));
  // A wait that went to sleep while other work wanted the cores counts as a long one, however soon it ended:
  // its peer may have been waiting for a core that the poll kept.
  b.after_sleep(microseconds(100));
  EXPECT_EQ(b.budget(), microseconds(80));
  b.after_sleep(microseconds(100), /*contended=*/true);
  EXPECT_EQ(b.budget(), microseconds(40));
  b.after_sleep(microseconds(1), /*contended=*/true);
  EXPECT_EQ(b.budget(), microseconds(40));
  // A maximum below the minimum is raised to it.
  transport::SpinBudget flat(microseconds(40), microseconds(10));
  flat.after_sleep(microseconds(5));
  EXPECT_EQ(flat.budget(), microseconds(40));
}

// Rank 0 sends `gaps.size()` frames of `bytes`, each after sleeping its gap; rank 1 receives them (on a
// background thread when `background`) and records its transport's spin_budget() after each, or
// large_spin_budget() when `large`.
std::vector<std::chrono::nanoseconds> budgets_after_gaps(const std::vector<std::chrono::microseconds>& gaps,
                                                         const transport::TcpOptions& options, bool background = false,
                                                         size_t bytes = 8, bool large = false) {
  std::vector<std::chrono::nanoseconds> budgets;
  const Frame f{bytes, false};
  auto budget = [large](const transport::TcpTransport& t) { return large ? t.large_spin_budget() : t.spin_budget(); };
  run_pair(
      [&](transport::TcpTransport& t) {
        auto deadline = base::Deadline::after(std::chrono::seconds(60));
        const std::vector<char> payload = payload_of(0, f);
        for (size_t i = 0; i < gaps.size(); ++i) {
          std::this_thread::sleep_for(gaps[i]);
          t.isend(1, tag_of(i, f), payload.data(), f.bytes, deadline, transport::SenderWork::busy());
          t.flush(deadline);
        }
      },
      [&](transport::TcpTransport& t) {
        transport::set_background_thread(background);
        auto deadline = base::Deadline::after(std::chrono::seconds(60));
        budgets.push_back(budget(t));
        const std::vector<char> expected = payload_of(0, f);  // once: the receiver must not fall behind the gaps
        std::vector<char> got(f.bytes);
        for (size_t i = 0; i < gaps.size(); ++i) {
          t.recv(0, tag_of(i, f), got.data(), f.bytes, deadline);
          EXPECT_EQ(got, expected) << "frame " << i;
          budgets.push_back(budget(t));
        }
        transport::set_background_thread(false);
      },
      options);
  return budgets;
}

// Options under which a receive polls for its SpinBudget's time: adaptive_spin (CHORUS_TCP_ADAPTIVE_SPIN=1, the
// default), without oversubscription and without CHORUS_TCP_SPIN, and the cores to itself whatever else runs
// beside the test (contended waits are SmallReceivesKeepTheirShortestPollWhileOtherWorkWantsTheCores').
transport::TcpOptions timed_poll_options() {
  transport::TcpOptions o;
  o.oversubscribed = 0;
  o.adaptive_spin = true;
  o.cores_contended = []() noexcept { return false; };
  return o;
}

// Frames of `bytes` 100 us apart make waits that outlast the first budget (40 us) but end within the maximum:
// the budget (the large receives' one when `large`) grows (at least once in 100, however loaded the machine:
// under ctest's parallel jobs one run of 40 found none). Frames 10 ms apart then bring it back to the minimum:
// every such wait is longer than kShrinkFactor times the maximum.
void expect_budget_grows_then_shrinks(size_t bytes, bool large) {
  using transport::TcpTransport;
  constexpr size_t kShortGaps = 100;
  std::vector<std::chrono::microseconds> gaps(kShortGaps, std::chrono::microseconds(100));
  static_assert(TcpTransport::kSpinMax * transport::SpinBudget::kShrinkFactor < std::chrono::milliseconds(10));
  gaps.insert(gaps.end(), 10, std::chrono::microseconds(10000));
  auto budgets = budgets_after_gaps(gaps, timed_poll_options(), false, bytes, large);
  ASSERT_EQ(budgets.size(), gaps.size() + 1);
  EXPECT_EQ(budgets.front(), TcpTransport::kSpinMin);
  auto grown = *std::max_element(budgets.begin(), budgets.begin() + kShortGaps + 1);
  EXPECT_GT(grown, TcpTransport::kSpinMin);
  EXPECT_LE(grown, TcpTransport::kSpinMax);
  EXPECT_EQ(budgets.back(), TcpTransport::kSpinMin);
}

// Where the budget does not apply, frames of `bytes` 100 us apart leave it put: on a background thread (core's
// progress engine, where the caller computes meanwhile), and it reads 0 with CHORUS_TCP_SPIN's fixed count,
// oversubscribed (a few yielding polls) and without adaptive_spin (CHORUS_TCP_ADAPTIVE_SPIN=0).
void expect_no_budget_where_it_does_not_apply(size_t bytes, bool large) {
  using transport::TcpTransport;
  const transport::TcpOptions o = timed_poll_options();
  std::vector<std::chrono::microseconds> gaps(20, std::chrono::microseconds(100));
  for (auto b : budgets_after_gaps(gaps, o, /*background=*/true, bytes, large)) EXPECT_EQ(b, TcpTransport::kSpinMin);
  transport::TcpOptions fixed = o;
  fixed.spin = 64;
  transport::TcpOptions over = o;
  over.oversubscribed = 1;
  transport::TcpOptions off = o;
  EXPECT_TRUE(transport::TcpOptions{}.adaptive_spin);  // the default
  off.adaptive_spin = false;
  for (const auto& none : {fixed, over, off}) {
    for (auto b : budgets_after_gaps(gaps, none, false, bytes, large)) EXPECT_EQ(b, std::chrono::nanoseconds(0));
  }
}

TEST(TcpTransport, SmallReceivesPollLongerAfterShortSleepsAndShorterAfterLongOnes) {
  // A small receive polls for its SpinBudget's time, which adapts to its waits.
  expect_budget_grows_then_shrinks(8, /*large=*/false);
  expect_no_budget_where_it_does_not_apply(8, /*large=*/false);
}

TEST(TcpTransport, LargeReceivesPollForABudgetOfTheirOwn) {
  // A receive of more than 64 KiB polls each of its waits (for the peer's first segment, between segments) for a
  // SpinBudget of its own, which adapts as the small receives' does and leaves theirs alone. Before, a large
  // receive polled 64 times in all and then slept at every gap, and two ranks exchanging 512 KiB-4 MiB fell into
  // chains of late wake-ups (docs/performance.md, "Large tcp receives poll for a time too").
  constexpr size_t kBytes = 256 << 10;
  expect_budget_grows_then_shrinks(kBytes, /*large=*/true);
  // The small receives' budget is not touched by large receives' waits.
  std::vector<std::chrono::microseconds> gaps(40, std::chrono::microseconds(100));
  for (auto b : budgets_after_gaps(gaps, timed_poll_options(), false, kBytes, /*large=*/false)) {
    EXPECT_EQ(b, transport::TcpTransport::kSpinMin);
  }
  expect_no_budget_where_it_does_not_apply(kBytes, /*large=*/true);
}

TEST(TcpTransport, SmallReceivesKeepTheirShortestPollWhileOtherWorkWantsTheCores) {
  // The same frames 100 us apart, but every wait that sleeps finds the cores contended: the budget never grows
  // (where other processes want the cores, a longer poll only delays the peer, docs/performance.md).
  using transport::TcpTransport;
  transport::TcpOptions o;
  o.oversubscribed = 0;
  o.adaptive_spin = true;
  static std::atomic<int> asked{0};
  asked = 0;
  o.cores_contended = []() noexcept {
    asked.fetch_add(1);
    return true;
  };
  std::vector<std::chrono::microseconds> gaps(40, std::chrono::microseconds(100));
  for (auto b : budgets_after_gaps(gaps, o)) EXPECT_EQ(b, TcpTransport::kSpinMin);
  // Asked only by waits that slept: at least one of 40 (each gap outlasts the 40 us poll), at most one each.
  EXPECT_GE(asked.load(), 1);
  EXPECT_LE(asked.load(), 40);
}

TEST(CoresContended, ReadsTrueWhileMoreThreadsSpinThanTheHostHasCpus) {
  // transport::cores_contended() reads /proc/loadavg's count of runnable tasks. With a busy thread per online
  // CPU and one more, the count exceeds the CPUs whatever else the host runs.
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT_GT(cpus, 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (long i = 0; i <= cpus; ++i) {
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  bool seen = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!seen && std::chrono::steady_clock::now() < until) {
    seen = transport::cores_contended();
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_TRUE(seen);
}

TEST(TcpTransport, SettingsNameTheTunablesInForce) {
  // Communicator::transport_settings(): what chorus-perf prints under its header. The defaults, then each
  // variable changed: the line follows it.
  auto settings_with = [](std::initializer_list<std::pair<const char*, const char*>> vars) {
    std::vector<std::unique_ptr<testing::ScopedEnv>> env;
    for (const auto& [name, value] : vars) env.push_back(std::make_unique<testing::ScopedEnv>(name, value));
    CommOptions o;
    o.transport = TransportKind::Tcp;
    std::string seen[2];
    testing::run_world(2, o, [&](Communicator& comm) { seen[comm.rank()] = comm.transport_settings(); });
    EXPECT_EQ(seen[0], seen[1]);
    return seen[0];
  };
  const std::string defaults = settings_with({});
  EXPECT_NE(defaults.find("tcp: reno on the 1 connection within this host (CHORUS_TCP_CONGESTION=auto)"),
            std::string::npos)
      << defaults;
  EXPECT_NE(defaults.find("polls"), std::string::npos) << defaults;
  if (!transport::more_ranks_than_cores(2)) {
    EXPECT_NE(defaults.find("each wait of a receive polls for 40-320 us (adapted to its waits and to contention "
                            "for the CPUs, apart for receives of up to 64 KiB and larger ones) before it sleeps "
                            "(CHORUS_TCP_ADAPTIVE_SPIN=1)"),
              std::string::npos)
        << defaults;
    const std::string fixed = settings_with({{"CHORUS_TCP_ADAPTIVE_SPIN", "0"}});
    EXPECT_NE(fixed.find("64 polls before a receive sleeps (CHORUS_TCP_SPIN)"), std::string::npos) << fixed;
  }
  EXPECT_NE(defaults.find("read-ahead of 16384 bytes past frames of up to 4096 (CHORUS_TCP_READ_AHEAD)"),
            std::string::npos)
      << defaults;
  const std::string changed =
      settings_with({{"CHORUS_TCP_READ_AHEAD", "0"}, {"CHORUS_TCP_SPIN", "5"}, {"CHORUS_TCP_CONGESTION", "system"}});
  EXPECT_NE(changed.find("the system's congestion control (CHORUS_TCP_CONGESTION=system)"), std::string::npos)
      << changed;
  EXPECT_NE(changed.find("5 polls"), std::string::npos) << changed;
  EXPECT_NE(changed.find("read-ahead off"), std::string::npos) << changed;
  // Shared memory says nothing here (it has accessors of its own).
  CommOptions shm;
  shm.transport = TransportKind::Shm;
  testing::run_world(2, shm, [](Communicator& comm) { EXPECT_EQ(comm.transport_settings(), ""); });
}

}  // namespace
}  // namespace chorus
