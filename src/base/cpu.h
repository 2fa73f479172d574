// What a host gives a job's processes to run on.
#pragma once

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

}  // namespace chorus::base
