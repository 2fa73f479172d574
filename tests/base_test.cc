// The base layer's clocks, deadlines and CPU accounting.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "base/cpu.h"
#include "base/time.h"
#include "base/units.h"

namespace chorus::base {
namespace {

using std::chrono::milliseconds;

TEST(CoarseClock, FollowsThePreciseClockWithinAFewTicks) {
  // It may lag (by a tick, more after an idle spell), never lead by more than rounding, and it moves.
  const auto first = coarse_now();
  for (int i = 0; i < 20000; ++i) {
    const auto before = Clock::now();
    const auto coarse = coarse_now();
    const auto after = Clock::now();
    ASSERT_LE(coarse, after + std::chrono::microseconds(1)) << "iteration " << i;
    ASSERT_LE(before - coarse, milliseconds(100)) << "iteration " << i;
    if (i % 1000 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_GE(coarse_now() - first, milliseconds(20));
}

TEST(LazyDeadline, StartsAtItsFirstLookAndNeverExpiresEarly) {
  const Deadline d = Deadline::lazy_after(milliseconds(40));
  std::this_thread::sleep_for(milliseconds(60));  // not counted: nobody looked yet
  const auto first_look = Clock::now();
  EXPECT_FALSE(d.expired());
  while (!d.expired()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  EXPECT_GE(Clock::now() - first_look, milliseconds(40));
  EXPECT_EQ(d.remaining(), milliseconds(0));
  EXPECT_EQ(d.poll_timeout_ms(250), 0);
}

TEST(LazyDeadline, EveryAccessorStartsIt) {
  const auto t0 = Clock::now();
  EXPECT_GE(Deadline::lazy_after(milliseconds(500)).at(), t0 + milliseconds(500));
  const int ms = Deadline::lazy_after(milliseconds(500)).poll_timeout_ms(10000);
  EXPECT_GT(ms, 400);
  EXPECT_LE(ms, 500);
  const auto left = Deadline::lazy_after(milliseconds(500)).remaining();
  EXPECT_GT(left, milliseconds(400));
  EXPECT_LE(left, milliseconds(500));
  // Once started, it stays put.
  const Deadline d = Deadline::lazy_after(milliseconds(500));
  const auto at = d.at();
  std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(d.at(), at);
}

TEST(Deadline, SaturatesInsteadOfOverflowing) {
  for (const Deadline& d : {Deadline::after(milliseconds::max()), Deadline::lazy_after(milliseconds::max())}) {
    EXPECT_FALSE(d.expired());
    EXPECT_EQ(d.remaining(), milliseconds::max());
    EXPECT_EQ(d.poll_timeout_ms(250), 250);
  }
  const Deadline past = Deadline::after(milliseconds(0));
  EXPECT_TRUE(past.expired());
  EXPECT_EQ(past.poll_timeout_ms(250), 0);
  EXPECT_TRUE(Deadline::lazy_after(milliseconds(0)).expired());
}

TEST(Cores, UnionOfAffinityMasksCappedByTheSmallestQuota) {
  // Four ranks pinned to CPUs 0, 1, 2 and 3: four cores between them.
  EXPECT_EQ(cores_of({"1,0.000", "2,0.000", "4,0.000", "8,0.000"}), 4);
  // Four ranks sharing CPUs 0 and 1: two.
  EXPECT_EQ(cores_of({"3,0.000", "3,0.000", "3,0.000", "3,0.000"}), 2);
  // CPUs 0-7 and 12 (mask digits lowest CPUs first).
  EXPECT_EQ(cores_of({"ff01,0.000"}), 9);
  // A quota of 1.5 CPUs lets two run; the smallest quota of a host's ranks counts.
  EXPECT_EQ(cores_of({"ff,1.500"}), 2);
  EXPECT_EQ(cores_of({"ff,4.000", "ff,0.000", "ff,3.000"}), 3);
  // Unreadable masks fall back to the machine's count, and the answer is never 0.
  const int machine = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(cores_of({",0.000"}), machine);
  EXPECT_EQ(cores_of({"zz,0.000"}), machine);
  EXPECT_EQ(cores_of({"0,0.000"}), machine);
  // This process: its signature round-trips to what the kernel says it may use.
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_LE(usable_cores(), CPU_COUNT(&set));
  EXPECT_EQ(usable_cores(), cores_of({cpu_signature()}));
  EXPECT_EQ(cpu_signature().find_first_of("/|"), std::string::npos);
}

// The copy-rate probe stops once its fastest copy reads `enough`, and a later call that needs more goes on
// from where it stopped, up to kCopyProbeRounds copies in all; its figure only ever rises.
TEST(CopyProbe, StopsOnceEnoughAndGoesOnFromThere) {
  const int before = copy_probe_rounds();
  const double first = copy_rate_gbps(1e-9);  // any copy at all is enough
  ASSERT_GT(first, 0.0);
  EXPECT_EQ(copy_probe_rounds(), std::max(before, 1));  // one copy, unless an earlier call made some
  EXPECT_EQ(copy_rate_gbps(1e-9), first);               // settled: no more copies
  EXPECT_EQ(copy_probe_rounds(), std::max(before, 1));
  const double all = copy_rate_gbps(first * 1e6);  // out of reach: every round
  EXPECT_EQ(copy_probe_rounds(), kCopyProbeRounds);
  EXPECT_GE(all, first);
  EXPECT_LT(all, 1e5);
  EXPECT_EQ(copy_rate_gbps(), all);  // done: the figure at once, whatever is asked
  EXPECT_EQ(copy_rate_gbps(1e-9), all);
  EXPECT_EQ(copy_probe_rounds(), kCopyProbeRounds);
}

TEST(Units, ParsesSizesInBinaryUnits) {
  EXPECT_EQ(parse_size("32768K"), size_t{32} << 20);  // as sysfs writes a cache's size
  EXPECT_EQ(parse_size("1M"), size_t{1} << 20);
  EXPECT_EQ(parse_size("64k"), size_t{64} << 10);
  EXPECT_EQ(parse_size("1MiB"), size_t{1} << 20);
  EXPECT_EQ(parse_size("4KB"), size_t{4} << 10);
  EXPECT_EQ(parse_size("2G"), size_t{2} << 30);
  EXPECT_EQ(parse_size("512"), size_t{512});
  for (const char* bad : {"", "K", "12Q", "-4K", "1.5M", "32768K\n", "99999999999999999999"}) {
    EXPECT_FALSE(parse_size(bad).has_value()) << bad;
  }
}

// The kernel's description of the caches decides: the highest level's data or unified cache, never an
// instruction cache, and unreadable entries are skipped.
TEST(Caches, LargestCacheIsTheHighestLevelsDataOrUnifiedOne) {
  const std::string dir = ::testing::TempDir() + "chorus-caches-" + std::to_string(::getpid());
  auto index = [&](int i, const char* level, const char* type, const char* size) {
    const std::string d = dir + "/index" + std::to_string(i);
    std::filesystem::create_directories(d);
    std::ofstream(d + "/level") << level << "\n";
    std::ofstream(d + "/type") << type << "\n";
    std::ofstream(d + "/size") << size << "\n";
  };
  std::filesystem::remove_all(dir);
  EXPECT_EQ(largest_cache_in(dir), 0u);  // nothing there
  index(0, "1", "Data", "32K");
  index(1, "1", "Instruction", "64K");
  EXPECT_EQ(largest_cache_in(dir), size_t{32} << 10);
  index(2, "2", "Unified", "1024K");
  EXPECT_EQ(largest_cache_in(dir), size_t{1} << 20);
  index(3, "3", "Unified", "32768K");
  EXPECT_EQ(largest_cache_in(dir), size_t{32} << 20);
  index(4, "4", "Instruction", "1G");   // not for data
  index(5, "4", "Unified", "garbage");  // unreadable: skipped
  EXPECT_EQ(largest_cache_in(dir), size_t{32} << 20);
  std::filesystem::remove_all(dir);

  // This host: the kernel's figure where it gives one.
  const size_t sysfs = largest_cache_in("/sys/devices/system/cpu/cpu0/cache");
  if (sysfs > 0) {
    EXPECT_EQ(last_level_cache_bytes(), sysfs);
  }
  EXPECT_GT(last_level_cache_bytes(), 0u);
  // What the stream-copy rule counts on: the kernel's figure, at most 16 MiB per usable core.
  EXPECT_EQ(cache_share_bytes(),
            std::min(last_level_cache_bytes(), (size_t{16} << 20) * static_cast<size_t>(usable_cores())));
  EXPECT_GT(cache_share_bytes(), 0u);
}

}  // namespace
}  // namespace chorus::base
