// Memory that the ranks on one host can read directly: chorus::mem_alloc's regions (include/chorus/memory.h).
//
// Each region is a memfd mapped MAP_SHARED in the process that allocated it, which keeps the descriptor
// open until the region is freed. A sender whose payload lies in a region describes it by (pid, fd, region
// id); the receiver maps the region once, through /proc/<pid>/fd/<fd>, and from then on reads the payload
// with ordinary loads: a reduction straight from the peer's buffer, a copy with the CPU's best memcpy, no
// system call per message. The memfd dies with the last mapping, so a crash leaves nothing behind in
// /dev/shm. See docs/design.md, "Registered memory".
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <string>

namespace chorus::transport {

// Where a span of registered memory lies: its region, as the allocating process names it.
struct RegionRef {
  uint64_t id = 0;      // unique in the allocating process, never reused
  int32_t fd = -1;      // the memfd, open in the allocating process while the region lives
  uint64_t base = 0;    // the region's address in the allocating process
  uint64_t bytes = 0;   // the region's length
};

namespace registered_memory {

// A new region of at least `bytes` bytes (rounded up to whole pages), zero-filled. Throws Error
// (InvalidArgument for 0 bytes, SystemError when the kernel refuses).
void* allocate(size_t bytes);
// Frees a region allocate returned. Throws Error(InvalidArgument) for a pointer that is not the start of a
// live region; nullptr is ignored.
void release(void* p);
// The region holding all of [p, p + len), if any.
std::optional<RegionRef> find(const void* p, size_t len);
// Live regions and their total bytes (tests, diagnostics).
size_t live_regions();

}  // namespace registered_memory

// A receiver's mappings of its peers' regions, most recently used first. Bounded: beyond `max_regions`
// mappings (or `max_bytes` mapped), the least recently used one is unmapped, so a peer that allocates and
// frees regions in a loop does not grow this process without bound.
class RegionCache {
 public:
  explicit RegionCache(size_t max_regions = 64, size_t max_bytes = size_t{16} << 30)
      : max_regions_(max_regions), max_bytes_(max_bytes) {}
  ~RegionCache();
  RegionCache(const RegionCache&) = delete;
  RegionCache& operator=(const RegionCache&) = delete;

  // The address in this process of `address` (in process pid's region `region`) for `len` bytes, mapping the
  // region on first use. nullptr, with *error set, if the span is not inside the region or the region cannot
  // be mapped (the caller falls back to another way of reading it). A region that could not be mapped is
  // remembered (the last kMaxFailures of them), so the next span of it fails at once, with the first
  // attempt's reason, instead of repeating the procfs lookups on every message.
  const char* translate(pid_t pid, const RegionRef& region, uint64_t address, size_t len, std::string* error);
  size_t mapped() const { return entries_.size(); }
  size_t failures() const { return failures_.size(); }
  static constexpr size_t kMaxFailures = 64;

 private:
  struct Entry {
    pid_t pid;
    uint64_t id;
    char* base;
    uint64_t bytes;
  };
  struct Failure {
    pid_t pid;
    uint64_t id;
    int fd;
    uint64_t bytes;
    std::string error;
  };
  const char* remember_failure(pid_t pid, const RegionRef& region, std::string error, std::string* out);
  std::list<Entry> entries_;
  std::deque<Failure> failures_;  // oldest first
  size_t mapped_bytes_ = 0;
  size_t max_regions_;
  size_t max_bytes_;
};

}  // namespace chorus::transport
