#include "base/cpu.h"

#include <sched.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <fmt/format.h>

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

}  // namespace chorus::base
