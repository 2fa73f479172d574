#include "transport/shm/registered_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "base/error.h"
#include "base/logging.h"
#include "chorus/error.h"

namespace chorus::transport {
namespace {

struct Region {
  uint64_t id;
  int fd;
  size_t bytes;
};

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Region> regions;  // by base address
  uint64_t next_id = 1;
};

// Never destroyed: a region may be freed (or looked up) from another static's destructor.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

std::string memfd_name(uint64_t id) { return fmt::format("chorus-mem-{}", id); }

}  // namespace

namespace registered_memory {

void* allocate(size_t bytes) {
  if (bytes == 0) throw Error(ErrorCode::InvalidArgument, "mem_alloc: 0 bytes requested");
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (bytes > (size_t{1} << 46)) {
    throw Error(ErrorCode::InvalidArgument, fmt::format("mem_alloc: {} bytes is more than this can map", bytes));
  }
  const size_t rounded = (bytes + page - 1) / page * page;
  Registry& reg = registry();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    id = reg.next_id++;
  }
  int fd = ::memfd_create(memfd_name(id).c_str(), MFD_CLOEXEC);
  if (fd < 0) base::throw_errno("mem_alloc: memfd_create", errno);
  if (::ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    int err = errno;
    ::close(fd);
    base::throw_errno(fmt::format("mem_alloc: ftruncate to {} bytes", rounded), err);
  }
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    base::throw_errno(fmt::format("mem_alloc: mmap of {} bytes", rounded), err);
  }
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.regions.emplace(reinterpret_cast<uintptr_t>(p), Region{id, fd, rounded});
  return p;
}

void release(void* p) {
  if (p == nullptr) return;
  Registry& reg = registry();
  Region r;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.regions.find(reinterpret_cast<uintptr_t>(p));
    if (it == reg.regions.end()) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("mem_free: {} is not the start of memory from mem_alloc (or was freed already)", p));
    }
    r = it->second;
    reg.regions.erase(it);
  }
  ::munmap(p, r.bytes);
  // Local peers may still have the region mapped (their RegionCache keeps a mapping until it is evicted), and
  // a mapping keeps a memfd's pages alive: truncating frees them now. No peer reads a region after it is freed
  // (a send from it completes only once the receiver has read it); a stale read would fault, not see old data.
  if (::ftruncate(r.fd, 0) != 0) base::log_warn("mem_free: ftruncate: {}", std::strerror(errno));
  ::close(r.fd);
}

std::optional<RegionRef> find(const void* p, size_t len) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.regions.upper_bound(at);
  if (it == reg.regions.begin()) return std::nullopt;
  --it;
  const uintptr_t base = it->first;
  if (at - base > it->second.bytes || len > it->second.bytes - (at - base)) return std::nullopt;
  return RegionRef{it->second.id, it->second.fd, base, it->second.bytes};
}

size_t live_regions() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  return reg.regions.size();
}

}  // namespace registered_memory

RegionCache::~RegionCache() {
  for (const Entry& e : entries_) ::munmap(e.base, e.bytes);
}

const char* RegionCache::remember_failure(pid_t pid, const RegionRef& region, std::string error, std::string* out) {
  *out = error;
  if (failures_.size() >= kMaxFailures) failures_.pop_front();
  failures_.push_back(Failure{pid, region.id, region.fd, region.bytes, std::move(error)});
  return nullptr;
}

const char* RegionCache::translate(pid_t pid, const RegionRef& region, uint64_t address, size_t len,
                                   std::string* error) {
  if (address < region.base || address - region.base > region.bytes || len > region.bytes - (address - region.base)) {
    *error = "the span lies outside the region it names";
    return nullptr;
  }
  const uint64_t offset = address - region.base;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->pid == pid && it->id == region.id) {
      if (it->bytes != region.bytes) break;  // not the region we mapped: remap below
      if (it != entries_.begin()) entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().base + offset;
    }
  }
  for (const Failure& f : failures_) {
    if (f.pid == pid && f.id == region.id && f.fd == region.fd && f.bytes == region.bytes) {
      *error = f.error + " (remembered from the first attempt)";
      return nullptr;
    }
  }
  // First use: open the peer's memfd through procfs and check that it is the region named (the descriptor
  // number could have been reused after a free).
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, region.fd);
  char link[256] = {};
  const ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
  const std::string want = "/memfd:" + memfd_name(region.id) + " ";
  if (n < 0 || std::strncmp(link, want.c_str(), want.size()) != 0) {
    return remember_failure(pid, region,
                            n < 0 ? fmt::format("readlink {}: {}", path, std::strerror(errno))
                                  : fmt::format("{} is {}, not the region named", path, link),
                            error);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return remember_failure(pid, region, fmt::format("open {}: {}", path, std::strerror(errno)), error);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != region.bytes) {
    ::close(fd);
    return remember_failure(pid, region, fmt::format("{} is not {} bytes long", path, region.bytes), error);
  }
  void* p = ::mmap(nullptr, region.bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    *error = fmt::format("mmap of {} bytes: {}", region.bytes, std::strerror(err));
    // Out of address space or mappings may pass once others are unmapped: not remembered.
    if (err == ENOMEM || err == EAGAIN) return nullptr;
    return remember_failure(pid, region, *error, error);
  }
  // Drop a stale mapping of the same id, then the least recently used beyond the bounds.
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->pid == pid && it->id == region.id) {
      ::munmap(it->base, it->bytes);
      mapped_bytes_ -= it->bytes;
      entries_.erase(it);
      break;
    }
  }
  entries_.push_front(Entry{pid, region.id, static_cast<char*>(p), region.bytes});
  mapped_bytes_ += region.bytes;
  while (entries_.size() > 1 && (entries_.size() > max_regions_ || mapped_bytes_ > max_bytes_)) {
    ::munmap(entries_.back().base, entries_.back().bytes);
    mapped_bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
  return static_cast<char*>(p) + offset;
}

}  // namespace chorus::transport
