#include "base/cpu.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "base/units.h"

namespace chorus::base {
namespace {

// The cgroup v2 quota of this process's cgroup in CPUs (0: "max", or no v2 hierarchy).
double cgroup_quota() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);  // the unified (v2) hierarchy
  }
  if (path.empty()) return 0;
  std::ifstream f("/sys/fs/cgroup" + (path == "/" ? std::string() : path) + "/cpu.max");
  std::string quota;
  double period = 0;
  if (!(f >> quota >> period) || quota == "max" || period <= 0) return 0;
  char* end = nullptr;
  const double q = std::strtod(quota.c_str(), &end);
  return end && *end == '\0' && q > 0 ? q / period : 0;
}

// The affinity mask, lowest CPUs first, 4 CPUs per hex digit; empty when it cannot be read.
std::string affinity_hex() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) last = c;
  }
  std::string hex;
  for (int base = 0; base <= last; base += 4) {
    int nibble = 0;
    for (int b = 0; b < 4; ++b) {
      if (CPU_ISSET(base + b, &set)) nibble |= 1 << b;
    }
    hex.push_back("0123456789abcdef"[nibble]);
  }
  return hex;
}

int nibble_of(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string cpu_signature() { return fmt::format("{},{:.3f}", affinity_hex(), cgroup_quota()); }

int cores_of(const std::vector<std::string>& signatures) {
  std::vector<int> mask;  // union, one nibble per entry
  bool unknown = false;
  double quota = 0;
  for (const std::string& s : signatures) {
    const size_t comma = s.find(',');
    const std::string hex = s.substr(0, comma);
    if (hex.empty()) unknown = true;
    if (mask.size() < hex.size()) mask.resize(hex.size(), 0);
    for (size_t i = 0; i < hex.size(); ++i) {
      const int v = nibble_of(hex[i]);
      if (v < 0) {
        unknown = true;
        break;
      }
      mask[i] |= v;
    }
    if (comma != std::string::npos) {
      const double q = std::strtod(s.c_str() + comma + 1, nullptr);
      if (q > 0 && (quota == 0 || q < quota)) quota = q;
    }
  }
  int cores = 0;
  for (int v : mask) cores += std::popcount(static_cast<unsigned>(v));
  if (unknown || cores == 0) cores = static_cast<int>(std::thread::hardware_concurrency());
  if (quota > 0) cores = std::min(cores, static_cast<int>(std::ceil(quota)));
  return std::max(cores, 1);
}

int usable_cores() noexcept {
  static const int cores = [] {
    try {
      return cores_of({cpu_signature()});
    } catch (...) {
      return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    }
  }();
  return cores;
}

size_t largest_cache_in(const std::string& dir) {
  size_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string index = dir + "/index" + std::to_string(i);
    std::ifstream level_file(index + "/level"), type_file(index + "/type"), size_file(index + "/size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    if (type != "Data" && type != "Unified") continue;
    const size_t bytes = parse_size(size).value_or(0);
    if (bytes == 0) continue;
    if (level > best_level || (level == best_level && bytes > best)) {
      best = bytes;
      best_level = level;
    }
  }
  return best;
}

size_t last_level_cache_bytes() noexcept {
  static const size_t bytes = []() -> size_t {
    try {
      if (size_t b = largest_cache_in("/sys/devices/system/cpu/cpu0/cache"); b > 0) return b;
    } catch (...) {
    }
    if (long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE); l3 > 0) return static_cast<size_t>(l3);
    if (long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE); l2 > 0) return static_cast<size_t>(l2);
    return size_t{8} << 20;
  }();
  return bytes;
}

size_t cache_share_bytes() noexcept {
  static const size_t bytes =
      std::min(last_level_cache_bytes(), kCachePerCore * static_cast<size_t>(std::max(usable_cores(), 1)));
  return bytes;
}

namespace {

// The probe's progress, kept across calls: copy_rate_gbps(enough) may stop early, and a later call that needs
// more goes on from there with the same spacing and the same count in all.
struct CopyProbe {
  std::mutex mu;
  int rounds = 0;
  double best_seconds = 0;
};

CopyProbe& copy_probe() {
  static CopyProbe probe;
  return probe;
}

double rate_of(double seconds) { return seconds > 0 ? static_cast<double>(kCopyProbeBytes) / seconds * 1e-9 : 0.0; }

}  // namespace

double copy_rate_gbps(double enough_gbps) noexcept {
  CopyProbe& p = copy_probe();
  std::lock_guard<std::mutex> lock(p.mu);
  const auto settled = [&] {
    return p.rounds >= kCopyProbeRounds || (enough_gbps > 0 && rate_of(p.best_seconds) >= enough_gbps);
  };
  if (settled()) return rate_of(p.best_seconds);
  // Both buffers in one mapping, aligned to 2 MiB and asked for huge pages: written once first, 4 KiB pages
  // cost 7 us each on some hosts (50 ms for the two buffers), huge pages a few milliseconds in all.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t length = 2 * kCopyProbeBytes + kHuge;
  void* map = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return rate_of(p.best_seconds);
  char* from = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(map) + kHuge - 1) & ~(kHuge - 1));
  char* to = from + kCopyProbeBytes;
  (void)::madvise(from, 2 * kCopyProbeBytes, MADV_HUGEPAGE);  // a hint: without it, slower to set up
  std::memset(from, 1, kCopyProbeBytes);
  std::memset(to, 2, kCopyProbeBytes);
  for (bool first = true; !settled(); first = false) {
    // Spread over tens of milliseconds: a copy that shared the memory with another process's burst (the other
    // ranks start at the same time) is slower, and only the fastest counts.
    if (!first) std::this_thread::sleep_for(std::chrono::microseconds(250));
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(to, from, kCopyProbeBytes);
    // The copy's result is "used": the compiler may not drop it as a store to memory about to be unmapped.
    asm volatile("" : : "r"(to) : "memory");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0 && (p.best_seconds == 0 || s < p.best_seconds)) p.best_seconds = s;
    ++p.rounds;
  }
  ::munmap(map, length);
  return rate_of(p.best_seconds);
}

int copy_probe_rounds() noexcept {
  CopyProbe& p = copy_probe();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.rounds;
}

}  // namespace chorus::base
