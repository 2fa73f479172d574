// What a host gives a job's processes to run on.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
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

// The size in bytes of the largest data (or unified) cache that CPU 0 uses, from the kernel's description of
// it (/sys/devices/system/cpu/cpu0/cache), else from glibc's sysconf (L3, else L2), else 8 MiB. Computed once.
// The kernel's figure comes first: on some virtual hosts the processor's cache leaf that glibc reads says ten
// times the real size (an AMD EPYC host with 32 MiB of L3 whose sysconf said 320 MiB).
size_t last_level_cache_bytes() noexcept;
// What of the last-level cache this process can count on: last_level_cache_bytes, at most kCachePerCore per
// usable core. A virtual machine sees its host's whole cache, which other guests share (a 2-CPU guest of an
// Intel Xeon read 480 MiB; its copies slowed as on a cache of 32-64 MiB); a physical core's share is a few
// MiB on current processors. Computed once.
inline constexpr size_t kCachePerCore = size_t{16} << 20;
size_t cache_share_bytes() noexcept;
// The largest data or unified cache described under `dir` (index*/ with level, type and size files, as in
// sysfs, sizes as base::parse_size reads them); 0 if none is readable.
size_t largest_cache_in(const std::string& dir);

// The rate (GB/s) at which one core of this host copies kCopyProbeBytes with memcpy: the fastest of
// kCopyProbeRounds copies 250 us apart (30-40 ms in all), after both buffers were written once. It tells apart
// hosts of one nominal kind that order the collective algorithms differently (the project's two hosts: 31-53 GB/s
// on one, about 4-12 on the other; docs/algorithms.md, "Tables per kind of host"). The fastest copy is the host's
// figure only if one of them ran undisturbed: while a job's ranks start together, their own set-up streams memory
// on the other cores, and the fastest of 8 copies over 4 ms read 13.7-35.7 GB/s over 8 jobs of 4 ranks on one host
// (3 of them on the other side of the 17.9 GB/s between its two built-in kinds, so the job's algorithms changed
// from run to run), the fastest of 48 over 30-40 ms 30.4-38.0 (docs/algorithms.md, "A copy-rate probe that holds
// still").
//
// `enough_gbps` > 0 stops the copies as soon as the fastest reaches it: a caller that only needs to know which
// side of some lines the host is on (tune::copy_rate_settles_at) stops once the fastest copy is past the highest
// one, since more copies can only raise it. The probe's progress is kept for the process: a later call goes on
// from there (with 0, up to kCopyProbeRounds copies in all), and once it is done every call returns its figure at
// once. 0 when the buffers cannot be mapped. Thread-safe. Each call that copies maps and writes 16 MiB first (a
// few milliseconds with huge pages, more where page faults are slow).
inline constexpr int kCopyProbeRounds = 48;
inline constexpr size_t kCopyProbeBytes = size_t{8} << 20;
double copy_rate_gbps(double enough_gbps = 0) noexcept;
// How many copies the probe has timed so far in this process (for tests and the debug log).
int copy_probe_rounds() noexcept;

}  // namespace chorus::base
