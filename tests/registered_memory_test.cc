// Registered memory (chorus::mem_alloc): the allocator's contract, the receiver's mapping cache, and every
// large collective on the shared-memory transport with registered buffers, checked against closed-form
// results and against the transport's own count of payloads read in place.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "test_util.h"
#include "transport/shm/registered_memory.h"

namespace chorus::testing {
namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

TEST(MemAlloc, GivesZeroedPageAlignedWritableMemory) {
  const size_t before = transport::registered_memory::live_regions();
  char* p = static_cast<char*>(mem_alloc(100));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kPage, 0u);
  for (size_t i = 0; i < kPage; ++i) ASSERT_EQ(p[i], 0) << i;  // rounded up to a whole page, all zero
  std::memset(p, 0x5a, kPage);
  EXPECT_EQ(transport::registered_memory::live_regions(), before + 1);
  mem_free(p);
  EXPECT_EQ(transport::registered_memory::live_regions(), before);
}

TEST(MemAlloc, KnowsWhichSpansAreRegistered) {
  char* p = static_cast<char*>(mem_alloc(2 * kPage));
  EXPECT_TRUE(mem_is_registered(p, 2 * kPage));
  EXPECT_TRUE(mem_is_registered(p + kPage - 4, 8));
  EXPECT_TRUE(mem_is_registered(p + 2 * kPage - 1, 1));
  EXPECT_FALSE(mem_is_registered(p + 2 * kPage - 1, 2));  // runs past the end
  EXPECT_FALSE(mem_is_registered(p - 1, 2));
  int on_stack = 0;
  EXPECT_FALSE(mem_is_registered(&on_stack, sizeof(on_stack)));
  std::vector<char> heap(64);
  EXPECT_FALSE(mem_is_registered(heap.data(), heap.size()));
  mem_free(p);
  EXPECT_FALSE(mem_is_registered(p, 1));
}

TEST(MemAlloc, MisuseIsAClearError) {
  expect_error(ErrorCode::InvalidArgument, [] { mem_alloc(0); });
  char* p = static_cast<char*>(mem_alloc(64));
  const std::string what = expect_error(ErrorCode::InvalidArgument, [&] { mem_free(p + 8); });
  EXPECT_NE(what.find("not the start of memory from mem_alloc"), std::string::npos) << what;
  int on_stack = 0;
  expect_error(ErrorCode::InvalidArgument, [&] { mem_free(&on_stack); });
  mem_free(p);
  expect_error(ErrorCode::InvalidArgument, [&] { mem_free(p); });  // twice
  mem_free(nullptr);                                                // ignored
}

TEST(RegionCache, MapsARegionReadOnlyAndSeesItsWrites) {
  char* p = static_cast<char*>(mem_alloc(3 * kPage));
  auto ref = transport::registered_memory::find(p + kPage, 100);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->base, reinterpret_cast<uint64_t>(p));
  EXPECT_EQ(ref->bytes, 3 * kPage);
  transport::RegionCache cache;
  std::string why;
  const char* q = cache.translate(::getpid(), *ref, reinterpret_cast<uint64_t>(p + kPage), 100, &why);
  ASSERT_NE(q, nullptr) << why;
  EXPECT_NE(q, p + kPage);  // a second mapping of the same pages
  std::memcpy(p + kPage, "registered", 11);
  EXPECT_STREQ(q, "registered");
  EXPECT_EQ(cache.mapped(), 1u);
  // Another span of the same region reuses the mapping.
  EXPECT_EQ(cache.translate(::getpid(), *ref, reinterpret_cast<uint64_t>(p), 10, &why), q - kPage);
  EXPECT_EQ(cache.mapped(), 1u);
  mem_free(p);
}

TEST(RegionCache, RefusesSpansOutsideTheRegionAndRegionsItCannotVerify) {
  char* p = static_cast<char*>(mem_alloc(kPage));
  auto ref = transport::registered_memory::find(p, kPage);
  ASSERT_TRUE(ref.has_value());
  transport::RegionCache cache;
  std::string why;
  EXPECT_EQ(cache.translate(::getpid(), *ref, reinterpret_cast<uint64_t>(p) + kPage - 8, 16, &why), nullptr);
  EXPECT_NE(why.find("outside the region"), std::string::npos) << why;
  EXPECT_EQ(cache.translate(::getpid(), *ref, reinterpret_cast<uint64_t>(p) - 8, 8, &why), nullptr);
  // A descriptor naming another id for this memfd (as after the fd number was reused) is refused.
  transport::RegionRef wrong = *ref;
  wrong.id += 1000;
  EXPECT_EQ(cache.translate(::getpid(), wrong, reinterpret_cast<uint64_t>(p), 8, &why), nullptr);
  EXPECT_NE(why.find("not the region named"), std::string::npos) << why;
  // A descriptor that is not open at all.
  transport::RegionRef closed = *ref;
  closed.fd = 1 << 20;
  EXPECT_EQ(cache.translate(::getpid(), closed, reinterpret_cast<uint64_t>(p), 8, &why), nullptr);
  EXPECT_EQ(cache.mapped(), 0u);
  // The two regions it could not verify are remembered (spans outside a region are not: that is the span's
  // fault, not the region's), and asking again gives the first reason without trying again.
  EXPECT_EQ(cache.failures(), 2u);
  EXPECT_EQ(cache.translate(::getpid(), wrong, reinterpret_cast<uint64_t>(p) + 8, 8, &why), nullptr);
  EXPECT_NE(why.find("not the region named"), std::string::npos) << why;
  EXPECT_NE(why.find("remembered"), std::string::npos) << why;
  EXPECT_EQ(cache.failures(), 2u);
  // The region itself still maps.
  const char* q = cache.translate(::getpid(), *ref, reinterpret_cast<uint64_t>(p), 8, &why);
  ASSERT_NE(q, nullptr) << why;
  EXPECT_EQ(cache.mapped(), 1u);
  // The memory of failures is bounded: the oldest go first.
  for (size_t i = 0; i < transport::RegionCache::kMaxFailures + 5; ++i) {
    transport::RegionRef other = *ref;
    other.id += 2000 + i;
    EXPECT_EQ(cache.translate(::getpid(), other, reinterpret_cast<uint64_t>(p), 8, &why), nullptr);
  }
  EXPECT_EQ(cache.failures(), transport::RegionCache::kMaxFailures);
  mem_free(p);
}

// Resident kilobytes of this process's mapping that starts at `start` (/proc/self/smaps), -1 if none does.
long resident_kb_of_mapping(const void* start) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const auto want = reinterpret_cast<uintptr_t>(start);
  bool in = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < 17) {
      in = lo == want;
      continue;
    }
    long kb = 0;
    if (in && std::sscanf(line.c_str(), "Rss: %ld kB", &kb) == 1) return kb;
  }
  return -1;
}

TEST(RegionCache, FreeingARegionReleasesItsPagesFromPeersMappingsToo) {
  // A peer's cache keeps its mapping of a region after the owner frees it (until evicted); that mapping must
  // not keep the memory alive. Here the "peer" is this process's cache, a second mapping of the same pages.
  const size_t bytes = 64 * kPage;
  char* p = static_cast<char*>(mem_alloc(bytes));
  std::memset(p, 7, bytes);
  auto ref = transport::registered_memory::find(p, bytes);
  ASSERT_TRUE(ref.has_value());
  transport::RegionCache cache;
  std::string why;
  const char* q = cache.translate(::getpid(), *ref, ref->base, bytes, &why);
  ASSERT_NE(q, nullptr) << why;
  long sum = 0;
  for (size_t i = 0; i < bytes; i += kPage) sum += q[i];  // fault every page in through the second mapping
  EXPECT_EQ(sum, 7 * 64);
  EXPECT_GE(resident_kb_of_mapping(q), static_cast<long>(bytes / 1024));
  mem_free(p);
  // The mapping is still there (the cache holds it) but nothing of it is resident any more.
  EXPECT_EQ(resident_kb_of_mapping(q), 0);
}

TEST(RegionCache, DropsTheLeastRecentlyUsedMappingBeyondItsBound) {
  transport::RegionCache cache(2);
  std::vector<char*> regions;
  std::string why;
  for (int i = 0; i < 3; ++i) {
    regions.push_back(static_cast<char*>(mem_alloc(kPage)));
    regions.back()[0] = static_cast<char>('a' + i);
    auto ref = transport::registered_memory::find(regions.back(), 1);
    ASSERT_TRUE(ref.has_value());
    const char* q = cache.translate(::getpid(), *ref, ref->base, 1, &why);
    ASSERT_NE(q, nullptr) << why;
    EXPECT_EQ(*q, 'a' + i);
  }
  EXPECT_EQ(cache.mapped(), 2u);
  for (char* r : regions) mem_free(r);
}

// ---- collectives with registered buffers, shared memory ----

// How large payloads may move: by default both ways; without cross-memory attach (as under container
// profiles that forbid process_vm_readv), registered memory is still read in place; with in-place reads
// turned off, everything goes by cross-memory attach.
enum class Mode { Default, NoAttach, NoRegistered };

struct Case {
  int ranks;
  bool in_place;
  Mode mode = Mode::Default;
};

class RegisteredCollectives : public ::testing::TestWithParam<Case> {};

// Element k of rank r's input: small integers, so float sums are exact in any order.
float input(int r, size_t k) { return static_cast<float>((r + 1) * 3 + static_cast<int>(k % 1000)); }

TEST_P(RegisteredCollectives, LargeCollectivesReadPeersInPlaceAndAreRight) {
  const auto [n, in_place, mode] = GetParam();
  ScopedEnv cma("CHORUS_SHM_CMA", mode == Mode::NoAttach ? "0" : "1");  // "1": whatever its cost on this host
  ScopedEnv registered("CHORUS_SHM_REGISTERED", mode == Mode::NoRegistered ? "0" : "");
  CommOptions o;
  o.transport = TransportKind::Shm;
  o.timeout = std::chrono::seconds(60);
  // Large enough for single-copy frames in every algorithm's pieces; odd, so the pieces are uneven.
  const size_t count = (size_t{3} << 20) / sizeof(float) + 7;
  run_world(n, o, [&](Communicator& comm) {
    const int r = comm.rank();
    auto* send = static_cast<float*>(mem_alloc(count * n * sizeof(float)));
    auto* recv = static_cast<float*>(mem_alloc(count * n * sizeof(float)));
    auto fill = [&](float* buf, size_t elems) {
      for (size_t k = 0; k < elems; ++k) buf[k] = input(r, k);
    };
    const float rank_sum = static_cast<float>(3 * n * (n + 1) / 2);  // sum over q of (q + 1) * 3

    // all_reduce
    fill(send, count);
    float* out = in_place ? send : recv;
    comm.all_reduce(send, out, count, DataType::Float32, ReduceOp::Sum);
    for (size_t k = 0; k < count; ++k) {
      ASSERT_EQ(out[k], rank_sum + static_cast<float>(n * static_cast<int>(k % 1000))) << "all_reduce " << k;
    }
    // all_gather: block q holds rank q's input
    fill(in_place ? recv + r * count : send, count);
    comm.all_gather(in_place ? recv + r * count : send, recv, count, DataType::Float32);
    for (int q = 0; q < n; ++q) {
      for (size_t k = 0; k < count; k += 97) ASSERT_EQ(recv[q * count + k], input(q, k)) << "all_gather " << q;
    }
    // reduce_scatter: rank r gets block r of the sum
    fill(send, count * n);
    comm.reduce_scatter(send, in_place ? send + r * count : recv, count, DataType::Float32, ReduceOp::Sum);
    const float* rs = in_place ? send + r * count : recv;
    for (size_t k = 0; k < count; k += 89) {
      const size_t g = r * count + k;
      ASSERT_EQ(rs[k], rank_sum + static_cast<float>(n * static_cast<int>(g % 1000))) << "reduce_scatter " << k;
    }
    // broadcast from the last rank
    const int root = n - 1;
    fill(send, count);
    comm.broadcast(send, in_place ? send : recv, count, DataType::Float32, root);
    const float* b = in_place ? send : recv;
    for (size_t k = 0; k < count; k += 83) ASSERT_EQ(b[k], input(root, k)) << "broadcast " << k;
    // reduce to rank 0
    fill(send, count);
    comm.reduce(send, in_place ? send : recv, count, DataType::Float32, ReduceOp::Sum, 0);
    if (r == 0) {
      const float* s = in_place ? send : recv;
      for (size_t k = 0; k < count; k += 79) {
        ASSERT_EQ(s[k], rank_sum + static_cast<float>(n * static_cast<int>(k % 1000))) << "reduce " << k;
      }
    }
    // all_to_all (out of place only: the API has no in-place form), block q of rank r goes to rank q
    const size_t per = count / n;
    for (int q = 0; q < n; ++q) {
      for (size_t k = 0; k < per; ++k) send[q * per + k] = static_cast<float>(r * 1000 + q * 10 + static_cast<int>(k % 7));
    }
    comm.all_to_all(send, recv, per, DataType::Float32);
    for (int q = 0; q < n; ++q) {
      for (size_t k = 0; k < per; k += 71) {
        ASSERT_EQ(recv[q * per + k], static_cast<float>(q * 1000 + r * 10 + static_cast<int>(k % 7))) << "all_to_all";
      }
    }

    const TrafficCounters t = comm.traffic();
    if (mode == Mode::NoRegistered) {
      EXPECT_EQ(t.registered_reads, 0u) << "rank " << r;
      EXPECT_GT(t.attach_reads, 0u) << "rank " << r;
    } else {
      EXPECT_GT(t.registered_reads, 0u) << "rank " << r << ": no payload was read in place";
      EXPECT_EQ(t.attach_reads, 0u) << "rank " << r << ": every large payload was registered";
    }
    comm.barrier();  // no peer still reads our regions
    mem_free(send);
    mem_free(recv);
  });
}

INSTANTIATE_TEST_SUITE_P(Shm, RegisteredCollectives,
                         ::testing::Values(Case{2, false}, Case{2, true}, Case{3, false}, Case{4, true},
                                           Case{2, false, Mode::NoAttach}, Case{3, true, Mode::NoAttach},
                                           Case{3, false, Mode::NoRegistered}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           const char* mode = i.param.mode == Mode::NoAttach       ? "WithoutAttach"
                                              : i.param.mode == Mode::NoRegistered ? "InPlaceReadsOff"
                                                                                   : "";
                           return std::to_string(i.param.ranks) + "Ranks" + (i.param.in_place ? "InPlace" : "") + mode;
                         });

// Registered and plain buffers mixed across ranks and calls, and regions freed and reallocated between
// calls (so a receiver's cached mapping may name a region that is gone): every result stays right.
TEST(RegisteredMemory, MixedAndReallocatedBuffersStayRight) {
  ScopedEnv cma("CHORUS_SHM_CMA", "1");  // plain buffers by cross-memory attach, whatever its cost on this host
  CommOptions o;
  o.transport = TransportKind::Shm;
  o.timeout = std::chrono::seconds(60);
  constexpr int kRanks = 3;
  const size_t count = (size_t{1} << 20) / sizeof(int32_t);
  run_world(kRanks, o, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int32_t> plain(count);
    for (int round = 0; round < 6; ++round) {
      const bool registered = (r + round) % 2 == 0;
      int32_t* buf = registered ? static_cast<int32_t*>(mem_alloc(count * sizeof(int32_t))) : plain.data();
      for (size_t k = 0; k < count; ++k) buf[k] = static_cast<int32_t>((r + 1) * (round + 1) + k);
      comm.all_reduce(buf, buf, count, DataType::Int32, ReduceOp::Sum);
      for (size_t k = 0; k < count; ++k) {
        ASSERT_EQ(buf[k], static_cast<int32_t>(kRanks * (kRanks + 1) / 2 * (round + 1) + kRanks * k)) << round;
      }
      comm.barrier();
      if (registered) mem_free(buf);
    }
    const TrafficCounters t = comm.traffic();
    EXPECT_GT(t.registered_reads, 0u);
    EXPECT_GT(t.attach_reads, 0u);
  });
}

}  // namespace
}  // namespace chorus::testing
