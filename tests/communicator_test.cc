// Communicator features beyond the collective matrix: split, transport and address choices (IPv6, a named
// interface), 256 MiB messages, the typed API, and creation errors.
#include <gtest/gtest.h>

#include <numeric>

#include "test_util.h"

namespace chorus::testing {
namespace {

CommOptions with_transport(TransportKind t) {
  CommOptions o;
  o.transport = t;
  o.timeout = std::chrono::seconds(60);
  return o;
}

class Split : public ::testing::TestWithParam<TransportKind> {};

TEST_P(Split, GroupsByColorAndOrdersByKeyThenRank) {
  const int n = 6;
  run_world(n, with_transport(GetParam()), [&](Communicator& comm) {
    const int r = comm.rank();
    // Colors 0, 1, 2; key -rank: inside a color the highest parent rank comes first.
    auto child = comm.split(r % 3, -r);
    ASSERT_NE(child, nullptr);
    EXPECT_EQ(child->size(), 2);
    EXPECT_EQ(child->rank(), r < 3 ? 1 : 0);
    EXPECT_EQ(child->transport_name(), comm.transport_name());
    int32_t sum = 0, mine = r;
    child->all_reduce(&mine, &sum, 1, DataType::Int32, ReduceOp::Sum);
    EXPECT_EQ(sum, (r % 3) + (r % 3) + 3);  // members r%3 and r%3+3
    // The parent still works after a split, and splits can nest.
    std::vector<int64_t> v(7, r);
    comm.all_reduce(v, ReduceOp::Max);
    EXPECT_EQ(v[6], n - 1);
    auto grandchild = child->split(0, 0);
    ASSERT_NE(grandchild, nullptr);
    EXPECT_EQ(grandchild->size(), 2);
    grandchild->barrier();
  });
}

TEST_P(Split, NoColorOptsOutAndEqualKeysKeepParentOrder) {
  run_world(5, with_transport(GetParam()), [&](Communicator& comm) {
    const int r = comm.rank();
    auto child = comm.split(r == 2 ? Communicator::kNoColor : 7, 0);
    if (r == 2) {
      EXPECT_EQ(child, nullptr);
      return;
    }
    ASSERT_NE(child, nullptr);
    EXPECT_EQ(child->size(), 4);
    EXPECT_EQ(child->rank(), r < 2 ? r : r - 1);
    std::vector<int32_t> ranks(4), mine{r};
    child->all_gather(mine, ranks);
    EXPECT_EQ(ranks, (std::vector<int32_t>{0, 1, 3, 4}));
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, Split, ::testing::Values(TransportKind::InProc, TransportKind::Tcp),
                         [](const auto& info) { return transport_label(info.param); });

// Ranks that rendezvous through a TCP store on ::1 connect to each other over IPv6 loopback.
TEST(Addresses, TcpOverIpv6Loopback) {
  TcpStoreServer server("::1", 0);
  const int n = 3;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = std::make_shared<TcpStore>("::1", server.port());
        EXPECT_EQ(store->address(), "[::1]:" + std::to_string(server.port()));
        auto comm = Communicator::create(store, r, n, with_transport(TransportKind::Tcp));
        std::vector<double> v(100000, 1.0);
        comm->all_reduce(v, ReduceOp::Sum);
        EXPECT_EQ(v[99999], n);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(Addresses, NamedInterface) {
  CommOptions o = with_transport(TransportKind::Tcp);
  o.socket_ifname = "lo";
  run_world(2, o, [](Communicator& comm) {
    EXPECT_EQ(comm.options().socket_ifname, "lo");
    std::vector<int32_t> v(10, 2);
    comm.all_reduce(v, ReduceOp::Prod);
    EXPECT_EQ(v[0], 4);
  });
}

TEST(Addresses, UnknownInterfaceIsAClearError) {
  CommOptions o = with_transport(TransportKind::Tcp);
  o.socket_ifname = "nosuchif0";
  o.timeout = std::chrono::seconds(5);
  auto store = std::make_shared<MemoryStore>();
  try {
    // One rank has no peers, but the tcp transport still chooses its interface.
    auto c = Communicator::create(store, 0, 1, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("nosuchif0"), std::string::npos) << e.what();
  }
}

TEST(Creation, BadArgumentsAreRejected) {
  auto store = std::make_shared<MemoryStore>();
  auto expect_invalid = [](auto&& f) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    }
  };
  expect_invalid([&] { Communicator::create(nullptr, 0, 1); });
  expect_invalid([&] { Communicator::create(store, 0, 0); });
  expect_invalid([&] { Communicator::create(store, 3, 3); });
  expect_invalid([&] { Communicator::create(store, -1, 3); });
  CommOptions o;
  o.timeout = std::chrono::milliseconds(-5);
  expect_invalid([&] { Communicator::create(store, 0, 1, o); });
}

TEST(Creation, RanksThatDisagreeOnTheWorldSizeAreTold) {
  auto store = std::make_shared<MemoryStore>();
  CommOptions o = with_transport(TransportKind::InProc);
  o.timeout = std::chrono::seconds(1);  // rank 0 only learns of it by timing out
  std::thread t0([&] {
    try {
      auto c = Communicator::create(store, 0, 2, o);
    } catch (const Error&) {
    }
  });
  try {
    auto c = Communicator::create(store, 1, 3, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
    EXPECT_NE(std::string(e.what()).find("world size"), std::string::npos) << e.what();
  }
  t0.join();
}

TEST(Creation, SeveralCommunicatorsOnOneStore) {
  // Ranks create two communicators on one store in the same order; they are independent.
  run_world(3, with_transport(TransportKind::Tcp), [](Communicator& a) {
    std::vector<int32_t> v(5, a.rank());
    a.all_reduce(v, ReduceOp::Sum);
    EXPECT_EQ(v[0], 3);
  });
  run_world(3, with_transport(TransportKind::InProc), [](Communicator& a) {
    std::vector<int32_t> v(5, 1);
    a.all_reduce(v, ReduceOp::Sum);
    EXPECT_EQ(v[0], 3);
  });
}

TEST(TypedApi, SpansVectorsAndArrays) {
  run_world(4, with_transport(TransportKind::InProc), [](Communicator& comm) {
    const int r = comm.rank();
    std::array<float16_t, 3> h{float16_t(1.5f), float16_t(2.0f), float16_t(-1.0f)};
    comm.all_reduce(h, ReduceOp::Sum);
    EXPECT_EQ(static_cast<float>(h[0]), 6.0f);
    EXPECT_EQ(static_cast<float>(h[2]), -4.0f);
    std::vector<bfloat16_t> b(2, bfloat16_t(static_cast<float>(r)));
    comm.all_reduce(b, ReduceOp::Max);
    EXPECT_EQ(static_cast<float>(b[1]), 3.0f);
    std::vector<int64_t> mine{r, 10 * r}, all(8);
    comm.all_gather(mine, all);
    EXPECT_EQ(all, (std::vector<int64_t>{0, 0, 1, 10, 2, 20, 3, 30}));
    std::vector<uint32_t> in(8, 1), out(2);
    comm.reduce_scatter(in, out, ReduceOp::Sum);
    EXPECT_EQ(out, (std::vector<uint32_t>{4, 4}));
    std::vector<double> bc(3, r == 2 ? 7.0 : 0.0);
    comm.broadcast(bc, 2);
    EXPECT_EQ(bc[2], 7.0);
    std::vector<int8_t> a2a_in(4), a2a_out(4);
    for (int j = 0; j < 4; ++j) a2a_in[j] = static_cast<int8_t>(10 * r + j);
    comm.all_to_all(a2a_in, a2a_out);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(a2a_out[j], 10 * j + r);
    std::vector<uint8_t> red(2, static_cast<uint8_t>(r + 1));
    comm.reduce(red, ReduceOp::Prod, 0);
    if (r == 0) {
      EXPECT_EQ(red[0], 24);
    }
    if (r == 0) comm.send(std::vector<int32_t>{42}, 1);
    if (r == 1) {
      std::vector<int32_t> got(1);
      comm.recv(got, 0);
      EXPECT_EQ(got[0], 42);
    }
  });
}

// 256 MiB messages through the real network path, for every collective that moves bulk data.
struct LargeParam {
  const char* name;
  std::function<void(Communicator&)> run;
};

class LargeMessages : public ::testing::TestWithParam<LargeParam> {};

constexpr size_t k256MiB = size_t{256} << 20;

TEST_P(LargeMessages, TwoHundredFiftySixMebibytes) {
  run_world(3, with_transport(TransportKind::Tcp), GetParam().run);
}

// Values exact in float: (i % 1000) + rank sums to at most a few thousand.
float large_value(int rank, size_t i) { return static_cast<float>(i % 1000) + static_cast<float>(rank); }

size_t count_wrong(const std::vector<float>& v, const std::function<float(size_t)>& want) {
  size_t wrong = 0;
  for (size_t i = 0; i < v.size(); ++i) wrong += v[i] != want(i);
  return wrong;
}

INSTANTIATE_TEST_SUITE_P(
    Collectives, LargeMessages,
    ::testing::Values(
        LargeParam{"AllReduce",
                   [](Communicator& c) {
                     std::vector<float> v(k256MiB / 4);
                     for (size_t i = 0; i < v.size(); ++i) v[i] = large_value(c.rank(), i);
                     c.all_reduce(v, ReduceOp::Sum);
                     EXPECT_EQ(count_wrong(v, [](size_t i) { return 3 * static_cast<float>(i % 1000) + 3; }), 0u);
                   }},
        LargeParam{"AllGather",
                   [](Communicator& c) {
                     std::vector<float> mine(k256MiB / 4 / 3), all(mine.size() * 3);
                     for (size_t i = 0; i < mine.size(); ++i) mine[i] = large_value(c.rank(), i);
                     c.all_gather(mine, all);
                     size_t m = mine.size();
                     EXPECT_EQ(count_wrong(all, [m](size_t i) { return large_value(static_cast<int>(i / m), i % m); }),
                               0u);
                   }},
        LargeParam{"ReduceScatter",
                   [](Communicator& c) {
                     std::vector<float> in(k256MiB / 4 / 3 * 3), out(in.size() / 3);
                     for (size_t i = 0; i < in.size(); ++i) in[i] = large_value(c.rank(), i);
                     c.reduce_scatter(in, out, ReduceOp::Sum);
                     size_t base = static_cast<size_t>(c.rank()) * out.size();
                     EXPECT_EQ(count_wrong(out, [base](size_t i) {
                                 return 3 * static_cast<float>((base + i) % 1000) + 3;
                               }),
                               0u);
                   }},
        LargeParam{"Broadcast",
                   [](Communicator& c) {
                     std::vector<float> v(k256MiB / 4, -1.0f);
                     if (c.rank() == 1)
                       for (size_t i = 0; i < v.size(); ++i) v[i] = large_value(1, i);
                     c.broadcast(v, 1);
                     EXPECT_EQ(count_wrong(v, [](size_t i) { return large_value(1, i); }), 0u);
                   }},
        LargeParam{"Reduce",
                   [](Communicator& c) {
                     std::vector<float> v(k256MiB / 4);
                     for (size_t i = 0; i < v.size(); ++i) v[i] = large_value(c.rank(), i);
                     c.reduce(v, ReduceOp::Max, 2);
                     if (c.rank() == 2) {
                       EXPECT_EQ(count_wrong(v, [](size_t i) { return large_value(2, i); }), 0u);
                     }
                   }},
        LargeParam{"AllToAll",
                   [](Communicator& c) {
                     std::vector<float> in(k256MiB / 4 / 3 * 3), out(in.size());
                     for (size_t i = 0; i < in.size(); ++i) in[i] = large_value(c.rank(), i);
                     c.all_to_all(in, out);
                     size_t b = in.size() / 3, r = static_cast<size_t>(c.rank());
                     EXPECT_EQ(count_wrong(out, [&](size_t i) {
                                 return large_value(static_cast<int>(i / b), r * b + i % b);
                               }),
                               0u);
                   }}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace chorus::testing
