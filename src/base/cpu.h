// What a host gives a job's processes to run on.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace chorus::base {

// This process's share of the host's CPUs, in text for exchange between the ranks of a host: its affinity
// mask (taskset, a launcher's binding, a container's cpuset) in hex, and its cgroup v2 CPU quota (cpu.max, e.g.
// docker --cpus) in CPUs, 0 when none. No '/' or '|' in it.
std::string cpu_signature();

// How many CPUs the processes with these signatures can run on together: the union of their affinity masks,
// capped by the smallest quota among them. At least 1. Ranks pinned to one core each count one core per rank;
// ranks that all share one core count one.
int cores_of(const std::vector<std::string>& signatures);

// cores_of({cpu_signature()}): what this process alone may use. Computed once.
int usable_cores() noexcept;

// The rate (GB/s) at which one core of this host copies kCopyProbeBytes with memcpy: the fastest of 8 copies
// spread over about 4 ms, after both buffers were written once. It tells apart hosts of one nominal kind that
// order the collective algorithms differently (the project's two hosts: 31-53 GB/s on one, about 4-12 on the
// other; docs/algorithms.md, "Tables per kind of host"). Measured once per process, on first use: about 10 ms
// with huge pages, up to about 60 without them where page faults are slow. 0 when the buffers cannot be mapped.
inline constexpr size_t kCopyProbeBytes = size_t{8} << 20;
double copy_rate_gbps() noexcept;

}  // namespace chorus::base
