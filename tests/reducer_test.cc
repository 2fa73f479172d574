// The gradient reducer: bucket assignment, results against a serial reference for every policy (ranks mark
// their gradients in different random orders), the error cases, and a rank that stops issuing.
#include "chorus/reducer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "test_util.h"

namespace chorus {
// Readable test parameters in ctest's listing.
void PrintTo(BucketPolicy p, std::ostream* os) { *os << to_string(p); }
}  // namespace chorus

namespace chorus::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

CommOptions comm_options(TransportKind t = TransportKind::InProc, std::chrono::milliseconds timeout = 30s) {
  CommOptions o;
  o.transport = t;
  o.timeout = timeout;
  return o;
}

// Runs fn on a world of one rank (bucketing is a local matter).
void run_single(const std::function<void(Communicator&)>& fn) { run_world(1, comm_options(), fn); }

ErrorCode code_of(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (message != nullptr) *message = e.message();
    return e.code();
  }
  ADD_FAILURE() << "no chorus::Error thrown";
  return ErrorCode::Internal;
}

// Every parameter in exactly one bucket, one dtype per bucket, bytes add up, caps respected unless a bucket
// holds a single parameter.
void check_invariants(const std::vector<BucketInfo>& buckets, const std::vector<size_t>& bytes,
                      const std::vector<DataType>& types, size_t cap) {
  std::vector<int> seen(bytes.size(), 0);
  for (const BucketInfo& b : buckets) {
    size_t sum = 0;
    for (size_t i : b.parameters) {
      ASSERT_LT(i, bytes.size());
      ++seen[i];
      sum += bytes[i];
      EXPECT_EQ(types[i], b.dtype) << "parameter " << i;
    }
    EXPECT_EQ(sum, b.bytes);
    if (b.parameters.size() > 1) {
      EXPECT_LE(b.bytes, cap);
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "parameter " << i;
}

std::vector<std::vector<size_t>> param_lists(const std::vector<BucketInfo>& buckets) {
  std::vector<std::vector<size_t>> out;
  for (const BucketInfo& b : buckets) out.push_back(b.parameters);
  return out;
}

// ---- bucket assignment ----

TEST(ReducerBuckets, ReverseOrderWithFirstBucketCap) {
  run_single([](Communicator& comm) {
    ReducerOptions o;
    o.first_bucket_bytes = 1000;
    o.bucket_cap_bytes = 1200;
    Reducer r(comm, o);
    std::vector<std::vector<float>> grads(10, std::vector<float>(100));  // 400 bytes each
    for (size_t i = 0; i < grads.size(); ++i)
      EXPECT_EQ(r.add_parameter("p" + std::to_string(i), grads[i].data(), 100, DataType::Float32), i);
    // First bucket: 9, 8 (800 B; 7 would pass 1000). Then 1200 B each: 7 6 5 (exactly the cap), 4 3 2, 1 0.
    EXPECT_EQ(param_lists(r.buckets()), (std::vector<std::vector<size_t>>{{9, 8}, {7, 6, 5}, {4, 3, 2}, {1, 0}}));
    EXPECT_EQ(r.buckets()[0].bytes, 800u);
    EXPECT_EQ(r.buckets()[1].bytes, 1200u);
    EXPECT_EQ(r.num_parameters(), 10u);
  });
}

TEST(ReducerBuckets, DefaultCapsPutASmallModelInTwoBuckets) {
  run_single([](Communicator& comm) {
    Reducer r(comm);
    EXPECT_EQ(r.options().bucket_cap_bytes, size_t{25} << 20);
    EXPECT_EQ(r.options().first_bucket_bytes, size_t{1} << 20);
    EXPECT_EQ(r.options().policy, BucketPolicy::ReadyOrder);
    EXPECT_TRUE(r.options().average);
    // 4 x 512 KiB: the first bucket takes two (1 MiB exactly), the second the rest.
    std::vector<std::vector<float>> grads(4, std::vector<float>(128 << 10));
    for (size_t i = 0; i < grads.size(); ++i)
      r.add_parameter("w" + std::to_string(i), grads[i].data(), grads[i].size(), DataType::Float32);
    EXPECT_EQ(param_lists(r.buckets()), (std::vector<std::vector<size_t>>{{3, 2}, {1, 0}}));
  });
}

TEST(ReducerBuckets, OversizedParameterGetsItsOwnBucket) {
  run_single([](Communicator& comm) {
    ReducerOptions o;
    o.first_bucket_bytes = 1000;
    o.bucket_cap_bytes = 1000;
    Reducer r(comm, o);
    std::vector<float> small(50), huge(1000);  // 200 B and 4000 B
    r.add_parameter("a", small.data(), 50, DataType::Float32);
    r.add_parameter("b", small.data(), 50, DataType::Float32);
    r.add_parameter("big", huge.data(), 1000, DataType::Float32);
    r.add_parameter("c", small.data(), 50, DataType::Float32);
    r.add_parameter("d", small.data(), 50, DataType::Float32);
    EXPECT_EQ(param_lists(r.buckets()), (std::vector<std::vector<size_t>>{{4, 3}, {2}, {1, 0}}));
    EXPECT_EQ(r.buckets()[1].bytes, 4000u);
  });
}

TEST(ReducerBuckets, DtypesAreNeverMixed) {
  run_single([](Communicator& comm) {
    ReducerOptions o;
    o.first_bucket_bytes = 300;
    o.bucket_cap_bytes = 1000;
    Reducer r(comm, o);
    std::vector<double> storage(1000);
    std::vector<size_t> bytes;
    std::vector<DataType> types;
    const DataType kinds[] = {DataType::Float32, DataType::Float64, DataType::BFloat16, DataType::Float32,
                              DataType::Float16};
    for (size_t i = 0; i < 23; ++i) {
      DataType t = kinds[i % 5];
      size_t count = 10 + 7 * (i % 4);
      r.add_parameter("m" + std::to_string(i), storage.data(), count, t);
      bytes.push_back(count * dtype_size(t));
      types.push_back(t);
    }
    check_invariants(r.buckets(), bytes, types, 1000);
    std::set<DataType> dtypes;
    for (const BucketInfo& b : r.buckets()) dtypes.insert(b.dtype);
    EXPECT_EQ(dtypes.size(), 4u);
    // Within one dtype the parameters still come in reverse order.
    for (const BucketInfo& b : r.buckets()) EXPECT_TRUE(std::is_sorted(b.parameters.rbegin(), b.parameters.rend()));
  });
}

TEST(ReducerBuckets, LargestFirstGroupsBySize) {
  run_single([](Communicator& comm) {
    ReducerOptions o;
    o.policy = BucketPolicy::LargestFirst;
    o.first_bucket_bytes = 1600;
    o.bucket_cap_bytes = 3000;
    Reducer r(comm, o);
    std::vector<float> g(400);
    const size_t counts[] = {100, 400, 200, 400, 50, 200};  // bytes 400 1600 800 1600 200 800
    for (size_t i = 0; i < 6; ++i) r.add_parameter("p" + std::to_string(i), g.data(), counts[i], DataType::Float32);
    // By size, ties in reverse registration order: 3, 1 (1600), 5, 2 (800), 0 (400), 4 (200).
    // First bucket (1600): {3}. Then 3000: {1, 5} (2400; 2 would pass), {2, 0, 4} (1400).
    EXPECT_EQ(param_lists(r.buckets()), (std::vector<std::vector<size_t>>{{3}, {1, 5}, {2, 0, 4}}));
  });
}

TEST(ReducerBuckets, EmptyReducerAndZeroSizedParameters) {
  run_single([](Communicator& comm) {
    Reducer empty(comm);
    EXPECT_TRUE(empty.buckets().empty());
    empty.finalize();
    empty.finalize();
    EXPECT_EQ(empty.last_step().launches, 0u);

    for (BucketPolicy policy : {BucketPolicy::ReadyOrder, BucketPolicy::FrontFirst, BucketPolicy::LargestFirst}) {
      ReducerOptions o;
      o.policy = policy;
      Reducer r(comm, o);
      float x = 3;
      r.add_parameter("nothing", nullptr, 0, DataType::Float32);
      r.add_parameter("x", &x, 1, DataType::Float32);
      r.add_parameter("none", nullptr, 0, DataType::Float64);
      for (int step = 0; step < 2; ++step) {
        r.mark_ready(2);
        r.mark_ready(size_t{1});
        r.mark_ready("nothing");
        r.finalize();
        EXPECT_EQ(x, 3) << to_string(policy);
      }
      size_t listed = 0;
      for (const BucketInfo& b : r.buckets()) listed += b.parameters.size();
      EXPECT_EQ(listed, 3u);
    }
  });
}

TEST(ReducerBuckets, RegisteringAfterTheBucketsAreFixedThrows) {
  run_single([](Communicator& comm) {
    Reducer r(comm);
    std::vector<float> a(4, 1.0f), b(4, 2.0f);
    r.add_parameter("a", a.data(), a.size(), DataType::Float32);
    r.buckets();
    std::string msg;
    EXPECT_EQ(code_of([&] { r.add_parameter("late.weight", b.data(), b.size(), DataType::Float32); }, &msg),
              ErrorCode::InvalidArgument);
    EXPECT_THAT(msg, HasSubstr("late.weight"));
    EXPECT_THAT(msg, HasSubstr("#1"));
    EXPECT_EQ(r.num_parameters(), 1u);
    // Still usable.
    r.mark_ready(size_t{0});
    r.finalize();
    EXPECT_EQ(a[0], 1.0f);
  });
}

TEST(ReducerBuckets, RegistrationChecksArguments) {
  run_single([](Communicator& comm) {
    Reducer r(comm);
    float x = 0;
    r.add_parameter("x", &x, 1, DataType::Float32);
    std::string msg;
    EXPECT_EQ(code_of([&] { r.add_parameter("x", &x, 1, DataType::Float32); }, &msg), ErrorCode::InvalidArgument);
    EXPECT_THAT(msg, HasSubstr("'x'"));
    EXPECT_EQ(code_of([&] { r.add_parameter("y", nullptr, 1, DataType::Float32); }), ErrorCode::InvalidArgument);
    EXPECT_EQ(code_of([&] { r.add_parameter("z", &x, 1, static_cast<DataType>(99)); }), ErrorCode::InvalidArgument);
    EXPECT_EQ(r.num_parameters(), 1u);
  });
}

TEST(ReducerPolicy, NamesRoundTrip) {
  for (BucketPolicy p : {BucketPolicy::ReadyOrder, BucketPolicy::FrontFirst, BucketPolicy::LargestFirst})
    EXPECT_EQ(parse_bucket_policy(to_string(p)), p);
  EXPECT_EQ(parse_bucket_policy("front-first"), BucketPolicy::FrontFirst);
  std::string msg;
  EXPECT_EQ(code_of([&] { parse_bucket_policy("fastest"); }, &msg), ErrorCode::InvalidArgument);
  EXPECT_THAT(msg, HasSubstr("largest_first"));
}

// ---- results against a serial reference ----

struct ResultParam {
  BucketPolicy policy;
  int world_size;
  bool views;
  bool average;
  TransportKind transport = TransportKind::InProc;
};

std::string result_label(const ResultParam& p) {
  return std::string(to_string(p.policy)) + "_" + std::to_string(p.world_size) + "ranks_" +
         (p.views ? "views" : "copies") + "_" + (p.average ? "avg" : "sum") + "_" + transport_label(p.transport);
}
std::string result_name(const ::testing::TestParamInfo<ResultParam>& info) { return result_label(info.param); }
void PrintTo(const ResultParam& p, std::ostream* os) { *os << result_label(p); }

// A small model: mixed sizes (one far larger than the cap, some empty), three dtypes.
struct Layer {
  std::string name;
  size_t count;
  DataType type;
};
std::vector<Layer> test_model() {
  std::vector<Layer> m;
  const size_t counts[] = {37, 5, 300, 1, 0, 64, 1500, 17, 90, 250, 3, 128, 33, 700, 9, 0, 41, 200};
  for (size_t i = 0; i < std::size(counts); ++i) {
    DataType t = i % 7 == 3 ? DataType::Float64 : (i % 5 == 4 ? DataType::BFloat16 : DataType::Float32);
    if (i == 11) t = DataType::Float16;
    m.push_back({"layer" + std::to_string(i) + (i % 2 ? ".bias" : ".weight"), counts[i], t});
  }
  return m;
}

// Rank r's gradient element i of parameter p at `step`: small integers, so sums and averages are exact or
// rounded the same way as the reference.
double grad_value(DataType t, int rank, size_t p, size_t i, int step) {
  return input_value(t, ReduceOp::Sum, rank + step * 3, i + p * 13);
}

class ReducerResults : public ::testing::TestWithParam<ResultParam> {};

TEST_P(ReducerResults, MatchSerialReference) {
  const ResultParam prm = GetParam();
  const std::vector<Layer> model = test_model();
  constexpr int kSteps = 4;
  run_world(prm.world_size, comm_options(prm.transport), [&](Communicator& comm) {
    ReducerOptions o;
    o.policy = prm.policy;
    o.gradient_as_bucket_view = prm.views;
    o.average = prm.average;
    o.first_bucket_bytes = 256;
    o.bucket_cap_bytes = 1024;
    o.partition_bytes = 300;
    Reducer reducer(comm, o);
    std::vector<std::vector<std::byte>> grads;
    for (const Layer& l : model) {
      grads.emplace_back(l.count * dtype_size(l.type) + 8);
      reducer.add_parameter(l.name, grads.back().data(), l.count, l.type);
    }
    std::mt19937 rng(1234 + 77 * comm.rank());
    std::vector<size_t> order(model.size());
    std::iota(order.begin(), order.end(), size_t{0});
    ReduceOp op = prm.average ? ReduceOp::Avg : ReduceOp::Sum;
    for (int step = 0; step < kSteps; ++step) {
      // Backward in a different order on every rank and step, with short pauses here and there.
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t p : order) {
        void* g = reducer.gradient(p);
        for (size_t i = 0; i < model[p].count; ++i)
          store_value(model[p].type, g, i, grad_value(model[p].type, comm.rank(), p, i, step));
        if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        if (p % 2 == 0) {
          reducer.mark_ready(p);
        } else {
          reducer.mark_ready(model[p].name);
        }
      }
      // The caller's communicator stays free for other work while the Reducer's operations run.
      std::vector<int32_t> token{comm.rank()};
      comm.all_reduce(token, ReduceOp::Sum);
      EXPECT_EQ(token[0], prm.world_size * (prm.world_size - 1) / 2);
      reducer.finalize();
      for (size_t p = 0; p < model.size(); ++p) {
        const Layer& l = model[p];
        const void* got = reducer.gradient(p);
        if (prm.views) {
          EXPECT_NE(got, grads[p].data());
        }
        expect_elements(
            l.type, got, l.count,
            [&](size_t i) {
              std::vector<double> vals;
              for (int r = 0; r < prm.world_size; ++r) vals.push_back(grad_value(l.type, r, p, i, step));
              return reference_reduce(l.type, op, vals);
            },
            "rank " + std::to_string(comm.rank()) + " step " + std::to_string(step) + " " + l.name);
      }
      Reducer::StepStats s = reducer.last_step();
      if (prm.policy == BucketPolicy::FrontFirst) {
        EXPECT_GE(s.launches, reducer.buckets().size());
      } else {
        EXPECT_EQ(s.launches, reducer.buckets().size());
      }
    }
  });
}

std::vector<ResultParam> result_params() {
  std::vector<ResultParam> out;
  for (BucketPolicy policy : {BucketPolicy::ReadyOrder, BucketPolicy::FrontFirst, BucketPolicy::LargestFirst}) {
    for (int n : {1, 2, 3, 4}) {
      out.push_back({policy, n, false, true});
      out.push_back({policy, n, true, true});
      out.push_back({policy, n, false, false});
    }
    out.push_back({policy, 3, true, false, TransportKind::Tcp});
    out.push_back({policy, 2, false, true, TransportKind::Shm});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Policies, ReducerResults, ::testing::ValuesIn(result_params()), result_name);

// Bucket buffers of 64 KiB and more come from chorus::mem_alloc, so on shared memory the peers read them in
// place: the averaged gradients are right and the transport counts in-place reads.
TEST(ReducerBuckets, LargeBucketsAreRegisteredAndReadInPlaceOnShm) {
  run_world(2, comm_options(TransportKind::Shm), [&](Communicator& comm) {
    ReducerOptions o;
    o.first_bucket_bytes = size_t{1} << 20;
    o.bucket_cap_bytes = size_t{1} << 20;
    Reducer r(comm, o);
    const size_t count = (size_t{1} << 20) / sizeof(float);
    std::vector<float> a(count), b(count);
    r.add_parameter("a", a.data(), count, DataType::Float32);
    r.add_parameter("b", b.data(), count, DataType::Float32);
    for (int step = 0; step < 2; ++step) {
      for (size_t k = 0; k < count; ++k) {
        a[k] = static_cast<float>(comm.rank() * 2 + static_cast<int>(k % 64));
        b[k] = static_cast<float>(step + comm.rank() * 4);
      }
      r.mark_ready(size_t{1});
      r.mark_ready(size_t{0});
      r.finalize();
      for (size_t k = 0; k < count; k += 61) {
        ASSERT_EQ(a[k], 1.0f + static_cast<float>(k % 64)) << k;  // mean over ranks of 2r + k % 64
        ASSERT_EQ(b[k], static_cast<float>(step) + 2.0f) << k;    // mean of step + 4r
      }
    }
    const TrafficCounters t = r.traffic();
    EXPECT_GT(t.registered_reads, 0u);
    EXPECT_EQ(t.attach_reads, 0u);
  });
}

// ---- errors ----

class ReducerErrors : public ::testing::TestWithParam<BucketPolicy> {};

std::string policy_name(const ::testing::TestParamInfo<BucketPolicy>& info) { return to_string(info.param); }

TEST_P(ReducerErrors, MarkingTwiceNamesTheParameterAndTheStepContinues) {
  run_world(2, comm_options(), [&](Communicator& comm) {
    ReducerOptions o;
    o.policy = GetParam();
    o.first_bucket_bytes = 16;
    o.bucket_cap_bytes = 16;
    Reducer r(comm, o);
    std::vector<float> a(4), b(4), c(4);
    r.add_parameter("embed", a.data(), 4, DataType::Float32);
    r.add_parameter("block.attn", b.data(), 4, DataType::Float32);
    r.add_parameter("head", c.data(), 4, DataType::Float32);
    for (int step = 0; step < 2; ++step) {
      a.assign(4, 1.0f + comm.rank());
      b.assign(4, 2.0f + comm.rank());
      c.assign(4, 3.0f + comm.rank());
      r.mark_ready(size_t{2});
      r.mark_ready(size_t{1});
      std::string msg;
      EXPECT_EQ(code_of([&] { r.mark_ready(size_t{1}); }, &msg), ErrorCode::InvalidArgument);
      EXPECT_THAT(msg, HasSubstr("'block.attn' (#1)"));
      EXPECT_EQ(code_of([&] { r.mark_ready("block.attn"); }, &msg), ErrorCode::InvalidArgument);
      EXPECT_THAT(msg, HasSubstr("already marked"));
      r.mark_ready(size_t{0});
      r.finalize();
      EXPECT_EQ(a[0], 1.5f);
      EXPECT_EQ(b[3], 2.5f);
      EXPECT_EQ(c[1], 3.5f);
    }
  });
}

TEST_P(ReducerErrors, FinalizeNamesEveryUnmarkedParameterThenWorksOnceTheyAreMarked) {
  run_world(2, comm_options(), [&](Communicator& comm) {
    ReducerOptions o;
    o.policy = GetParam();
    o.first_bucket_bytes = 8;
    o.bucket_cap_bytes = 32;
    Reducer r(comm, o);
    std::vector<std::vector<double>> g(6, std::vector<double>(3));
    const char* names[] = {"conv1.weight", "bn1.bias", "layer1.weight", "layer2.weight", "layer3.weight", "fc"};
    for (size_t i = 0; i < 6; ++i) r.add_parameter(names[i], g[i].data(), 3, DataType::Float64);
    for (size_t i = 0; i < 6; ++i) g[i].assign(3, static_cast<double>(i + 10 * comm.rank()));
    for (size_t i : {5, 3, 2, 0}) r.mark_ready(i);
    std::string msg;
    EXPECT_EQ(code_of([&] { r.finalize(); }, &msg), ErrorCode::InvalidArgument);
    EXPECT_THAT(msg, HasSubstr("2 parameters were never marked ready"));
    EXPECT_THAT(msg, HasSubstr("'bn1.bias' (#1)"));
    EXPECT_THAT(msg, HasSubstr("'layer3.weight' (#4)"));
    EXPECT_THAT(msg, ::testing::Not(HasSubstr("fc")));
    r.mark_ready("bn1.bias");
    EXPECT_EQ(code_of([&] { r.finalize(); }, &msg), ErrorCode::InvalidArgument);
    EXPECT_THAT(msg, HasSubstr("1 parameter was never marked ready this step: 'layer3.weight' (#4)"));
    r.mark_ready(size_t{4});
    r.finalize();
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(g[i][2], static_cast<double>(i) + 5.0) << names[i];
  });
}

TEST_P(ReducerErrors, UnknownParametersAreRejected) {
  run_world(2, comm_options(), [&](Communicator& comm) {
    ReducerOptions o;
    o.policy = GetParam();
    Reducer r(comm, o);
    std::vector<float> a(2, 1.0f);
    r.add_parameter("a", a.data(), 2, DataType::Float32);
    std::string msg;
    EXPECT_EQ(code_of([&] { r.mark_ready("missing.weight"); }, &msg), ErrorCode::InvalidArgument);
    EXPECT_THAT(msg, HasSubstr("missing.weight"));
    EXPECT_EQ(code_of([&] { r.mark_ready(size_t{7}); }, &msg), ErrorCode::InvalidArgument);
    EXPECT_THAT(msg, HasSubstr("#7"));
    EXPECT_EQ(code_of([&] { r.gradient(1); }), ErrorCode::InvalidArgument);
    r.mark_ready("a");
    r.finalize();
    EXPECT_EQ(a[1], 1.0f);
  });
}

// A rank that stops issuing: it never marks one parameter and never calls finalize. The others' finalize
// must fail within the communicator's timeout (2 s here), not hang.
TEST_P(ReducerErrors, ARankThatStopsIssuingFailsTheOthers) {
  constexpr int kWorld = 3;
  constexpr int kStuck = 1;
  std::atomic<int> finished{0};
  run_world(kWorld, comm_options(TransportKind::InProc, 2s), [&](Communicator& comm) {
    ReducerOptions o;
    o.policy = GetParam();
    o.first_bucket_bytes = 64;
    o.bucket_cap_bytes = 256;
    o.partition_bytes = 64;
    std::vector<std::vector<float>> g(8, std::vector<float>(30, 1.0f));
    {
      Reducer r(comm, o);
      for (size_t i = 0; i < g.size(); ++i)
        r.add_parameter("layer" + std::to_string(i), g[i].data(), 30, DataType::Float32);
      // One good step first.
      for (size_t i = g.size(); i-- > 0;) r.mark_ready(i);
      r.finalize();
      for (size_t i = g.size(); i-- > 0;)
        if (!(comm.rank() == kStuck && i == 5)) r.mark_ready(i);
      if (comm.rank() == kStuck) {
        // Stop issuing until the others gave up (bounded), then leave.
        auto until = std::chrono::steady_clock::now() + 60s;
        while (finished.load() < kWorld - 1 && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(10ms);
        return;
      }
      auto start = std::chrono::steady_clock::now();
      std::string msg;
      ErrorCode code = code_of([&] { r.finalize(); }, &msg);
      auto took = std::chrono::steady_clock::now() - start;
      EXPECT_TRUE(code == ErrorCode::Timeout || code == ErrorCode::PeerLost) << to_string(code) << ": " << msg;
      EXPECT_LT(took, 30s) << "bounded by the 2 s timeout, generously";
      EXPECT_THAT(msg, HasSubstr("finalize: "));
      EXPECT_THAT(msg, HasSubstr("rank 1"));
      if (GetParam() == BucketPolicy::ReadyOrder) {
        EXPECT_THAT(msg, HasSubstr("'layer5' (#5)"));
      }
      ++finished;
    }
  });
  EXPECT_EQ(finished.load(), kWorld - 1);
}

INSTANTIATE_TEST_SUITE_P(Policies, ReducerErrors,
                         ::testing::Values(BucketPolicy::ReadyOrder, BucketPolicy::FrontFirst,
                                           BucketPolicy::LargestFirst),
                         policy_name);

// ---- views and statistics ----

TEST(ReducerViews, GradientsLiveInTheBucketsAndNothingIsCopied) {
  run_world(2, comm_options(), [](Communicator& comm) {
    ReducerOptions o;
    o.gradient_as_bucket_view = true;
    o.average = false;
    Reducer r(comm, o);
    std::vector<float> a(5, 7.0f), b(3, 9.0f);
    r.add_parameter("a", a.data(), a.size(), DataType::Float32);
    r.add_parameter("b", b.data(), b.size(), DataType::Float32);
    auto* va = static_cast<float*>(r.gradient(0));
    auto* vb = static_cast<float*>(r.gradient(1));
    EXPECT_NE(va, a.data());
    EXPECT_EQ(va[4], 7.0f) << "a view starts from the registered buffer's contents";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(va) % alignof(float), 0u);
    // Reverse order: b sits first in the bucket, then a.
    EXPECT_EQ(vb + 3, va);
    for (int i = 0; i < 5; ++i) va[i] = static_cast<float>(i + comm.rank());
    for (int i = 0; i < 3; ++i) vb[i] = 1.0f;
    r.mark_ready(size_t{1});
    r.mark_ready(size_t{0});
    r.finalize();
    EXPECT_EQ(va[2], 2.0f * 2 + 1);
    EXPECT_EQ(vb[0], 2.0f);
    EXPECT_EQ(a[2], 7.0f) << "the registered buffer is not written";
    EXPECT_EQ(r.last_step().launches, 1u);
  });
}

TEST(ReducerStats, LastStepCountsLaunchesAndSpans) {
  run_world(2, comm_options(), [](Communicator& comm) {
    ReducerOptions o;
    o.first_bucket_bytes = 1 << 10;
    o.bucket_cap_bytes = 64 << 10;
    Reducer r(comm, o);
    std::vector<std::vector<float>> g(6, std::vector<float>(8 << 10));
    for (size_t i = 0; i < g.size(); ++i)
      r.add_parameter("p" + std::to_string(i), g[i].data(), g[i].size(), DataType::Float32);
    EXPECT_EQ(r.last_step().launches, 0u);
    for (size_t i = g.size(); i-- > 0;) r.mark_ready(i);
    r.finalize();
    Reducer::StepStats s = r.last_step();
    EXPECT_EQ(s.launches, r.buckets().size());
    EXPECT_GT(s.comm_span.count(), 0);
    EXPECT_GE(s.finalize_wait.count(), 0);
  });
}

}  // namespace
}  // namespace chorus::testing
