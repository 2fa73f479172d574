#include "transport/shm/shm_transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

#include <fmt/format.h>

#include "base/error.h"
#include "base/logging.h"

namespace chorus::transport {

// ---------------------------------------------------------------- the shared layout

namespace {

constexpr uint64_t kMagic = 0x314d485353524843;  // "CHRSSHM1"
constexpr size_t kAlign = 64;                   // frames and payloads start on cache lines
constexpr size_t kPrefetchLines = 8;            // payload lines a wait for a frame may prefetch (receive)
// A small frame sent at once (up to kPrefetchLines payload lines) ends with a trailer word, stored after the rest
// of the frame: its stream position mixed with the communicator's tag (trailer_word). A consumer expecting such a
// frame polls that word instead of the ring's head (docs/design.md, "The shm transport"). When the payload leaves
// fewer than 8 spare bytes in its last line, the trailer takes a line of its own, which the header's reserved1
// word announces (kTrailerLine).
constexpr uint32_t kTrailerLine = 1;
// FrameHeader::reserved1 bit: a large frame of the idle lane (ShmTransport::kIdleLane; adapt only).
constexpr uint32_t kIdleSenderFrame = 2;
// FrameHeader::reserved1 bit: a large frame of an exchange (SenderWork::exchange; adapt only), which its receiver
// times from the start of its wait for the frame (ShmTransport::receive).
constexpr uint32_t kExchangeFrame = 4;
// FrameHeader::reserved1 bit: an exchange's frame that went the way its sender (the lower rank of the pair) chose
// for both directions (adapt only; ShmTransport::paired_way): its receiver leaves it untimed.
constexpr uint32_t kPairedFrame = 8;
constexpr size_t kDescriptorBytes = 64;         // body of a single-copy frame
constexpr uint64_t kProbeValue = 0x5eed5eed5eed5eedull;  // what the cross-memory and registered probes read
constexpr uint8_t kFlagRemote = 0x80;           // FrameHeader::flags bit: the body is a descriptor
constexpr uint32_t kControlMembarrier = 1;      // Control::flags bit: registered for membarrier(GLOBAL_EXPEDITED)
// Small frames stay in the first kHotBytes of a ring (plus one frame): a producer that has reached that far
// and finds its consumer caught up pads the rest of the lap and goes back to the start, instead of walking
// on through the whole ring (1 MiB by default). The cache lines and pages that small messages use are then
// the same few call after call, as a fixed mailbox's would be: the first lap through a ring's pages costs a
// miss per line (and, on a virtual machine, more per page: touch_pages). Measured on the 2-core
// machine, 2026-12-02: 2-rank all_gathers of 8 B to 2 KiB took 1.2-5.5 us per call over their first 200
// calls with the 1 MiB ring walked end to end, 0.5-0.8 us with a 64 KiB ring. "Small" is a frame of at most
// kHotFrameBytes: a payload of up to 4 KiB, or a descriptor. Larger frames walk the ring even when the consumer
// has caught up: rewritten call after call, the same lines go back and forth between the producer's core and the
// consumer's, which has just read them, and 2-rank shm all_gathers and all_to_alls of 16-128 KiB took 1.3-1.8
// times as long as with those frames walking the ring (4 KiB frames: 0.6-0.8 times; docs/performance.md, "Which
// frames go back to the ring's start").
constexpr size_t kHotBytes = 64 << 10;
constexpr size_t kHotFrameBytes = sizeof(FrameHeader) + (4 << 10);  // a header and up to 4 KiB of payload

int membarrier(int cmd) { return static_cast<int>(::syscall(__NR_membarrier, cmd, 0, 0)); }

// Registers this process as a target of MEMBARRIER_CMD_GLOBAL_EXPEDITED (once; a registration lasts for the
// process). False where the kernel (or a seccomp filter) does not offer it.
bool register_membarrier() {
  static const bool ok = [] {
    int cmds = membarrier(MEMBARRIER_CMD_QUERY);
    return cmds >= 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
           (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
           membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
  }();
  return ok;
}

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The word at `at` in a ring, where a consumer expects a small frame's trailer (ShmTransport::receive). Until
// the frame is published the producer may be writing those bytes as part of another frame (a queued frame, which
// carries no trailer, or the payload of a frame of another length, which fails the call anyway): the value is
// then compared and discarded, never used. ThreadSanitizer would report such a read as a race with the
// producer's copy; tests/tsan.supp names this function for it. A match is an acquire of the producer's release
// store.
__attribute__((noinline)) uint64_t probe_trailer(const char* at) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(at), __ATOMIC_ACQUIRE);
}

// Whether a frame of `len` payload bytes sent at once carries a trailer, and its size with it.
bool trailer_eligible(size_t len) { return round_up(len, kAlign) <= kPrefetchLines * kAlign; }
size_t trailer_frame_bytes(size_t len) {
  const size_t body = round_up(len, kAlign);
  return sizeof(FrameHeader) + body + (body - len >= sizeof(uint64_t) ? 0 : kAlign);
}

struct alignas(64) Ring {
  alignas(64) std::atomic<uint64_t> head;      // bytes the producer has published
  alignas(64) std::atomic<uint64_t> tail;      // bytes the consumer has released
  alignas(64) std::atomic<uint64_t> consumed;  // frames the consumer has finished
  alignas(64) std::atomic<uint32_t> severed;   // fault injection: either side tore the channel down
  // The consumer's choice for the producer's large payloads (ShmOptions::adapt): kPathUnset (the choice made
  // at creation), kPathRing or kPathAttach, with kPathClear where the other way measured far slower (then the
  // producer tries it less often). Written on a change only; the producer reads it per large frame.
  // One word per lane (ShmTransport::kBusyLane, kIdleLane) and class (ShmTransport::path_class).
  std::atomic<uint32_t> path[ShmTransport::kLanes][ShmTransport::kPathClasses];
  // No try of the other way before this steady_clock time (ns since its epoch): the consumer pushes it out by
  // kHoldPerExtra times what each tried frame cost beyond the chosen way, so tries cost at most about 2%. Per
  // lane and class.
  std::atomic<int64_t> hold_tries_until[ShmTransport::kLanes][ShmTransport::kPathClasses];
  // The producer's copy into the ring of its last large payload, per KiB, for the consumer's choice: the
  // rings cost both copies, and in some placements of the two cores the one into the ring is most of it
  // (docs/performance.md, "Ring or attach, chosen while running"). 0: none timed yet.
  alignas(64) std::atomic<uint32_t> producer_ns_per_kib;
};
constexpr uint32_t kPathUnset = 0, kPathRing = 1, kPathAttach = 2;
constexpr uint32_t kPathWay = 3;    // the bits above
constexpr uint32_t kPathClear = 4;  // the other way measured over PathChoice::kClearAbove times the chosen one
constexpr uint32_t kPathRetry = 8;  // the other way looked better once: try it again soon, to confirm

struct Descriptor {
  uint64_t address;  // in the producer's address space
  uint64_t length;
  int32_t pid;
  // The payload lies in registered memory (chorus::mem_alloc) when region_id != 0: the consumer maps that
  // region and reads it directly instead of by cross-memory attach.
  int32_t region_fd;
  uint64_t region_id;
  uint64_t region_base;
  uint64_t region_bytes;
};
static_assert(sizeof(Descriptor) <= 64, "a descriptor fits its frame body");

}  // namespace

struct ShmSegment {
  struct Control {
    uint64_t magic;
    uint64_t comm_tag;
    uint64_t ring_bytes;
    int32_t rank;
    int32_t local_count;
    int32_t pid;
    uint32_t flags;  // kControl* bits, set before magic
    uint64_t probe_address;  // address of `probe` in the owner's memory, for the cross-memory-attach probe
    uint64_t probe;
    // A page of the owner's registered memory holding kProbeValue, for the registered-memory probe (id 0: none).
    int32_t probe_region_fd;
    uint64_t probe_region_id;
    uint64_t probe_region_base;
    uint64_t probe_region_bytes;
    alignas(64) std::atomic<uint32_t> doorbell;
    alignas(64) std::atomic<uint32_t> sleeping;
    std::atomic<uint32_t> closed;
    std::atomic<uint32_t> failed;
    int32_t fail_code;
    int32_t fail_culprit;
    char fail_message[2048];
  };
  Control control;

  static size_t bytes(int local_count, size_t ring_bytes) {
    return round_up(sizeof(Control), kAlign) + static_cast<size_t>(local_count) * (sizeof(Ring) + ring_bytes);
  }
  // The inbound ring whose producer is local rank `from`.
  Ring& ring(int from) {
    char* base = reinterpret_cast<char*>(this) + round_up(sizeof(Control), kAlign);
    return reinterpret_cast<Ring*>(base)[from];
  }
  char* data(int from) {
    return reinterpret_cast<char*>(this) + data_offset(from, control.local_count, control.ring_bytes);
  }
  // Offset of the bytes of local rank `from`'s inbound ring.
  static size_t data_offset(int from, int local_count, size_t ring_bytes) {
    return round_up(sizeof(Control), kAlign) + static_cast<size_t>(local_count) * sizeof(Ring) +
           static_cast<size_t>(from) * ring_bytes;
  }
};

namespace {

long futex(std::atomic<uint32_t>* addr, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, value, timeout, nullptr, 0);
}

// Fills in the page-table entries (and, for a fresh shared-memory file, allocates the pages) of
// [offset, offset + len) of a mapping, as a write would. Kernels before 5.14 lack the advice: the pages then
// fault in on first use, as before. Running out of /dev/shm is an error that says so.
void prefault(void* base, size_t offset, size_t len, const std::string& name) {
#ifdef MADV_POPULATE_WRITE
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(base) + offset) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(base) + offset + len;
  if (len == 0 || ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0) return;
  if (errno == EINVAL || errno == EPERM) return;  // not supported here
  base::throw_error(ErrorCode::SystemError,
                    fmt::format("cannot allocate {} bytes of shared memory for {} ({}); is /dev/shm large enough "
                                "(df -h /dev/shm; containers: --shm-size)? CHORUS_TRANSPORT=tcp avoids shared memory",
                                end - begin, name, errno == EFAULT ? "no space left" : std::strerror(errno)));
#else
  (void)base, (void)offset, (void)len, (void)name;
#endif
}

// Reads one byte of every page of the first `bytes` of a ring through this mapping. On a virtual machine the
// first access to a page through a mapping can cost far more than a cache miss even once prefault has filled
// in its page-table entry: on the 2-core test machine (2026-12-02) about 5 us per 4 KiB page and per mapping,
// whether the access read or wrote, and 0.2 us once either had touched it. Left to the frames, that cost falls
// inside the first collectives to reach each page (2-rank reduce_scatters of 64 KiB took 15-20 us per call
// over their first 200 calls instead of 3).
void touch_pages(const char* ring_data, size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  unsigned sink = 0;
  for (size_t off = 0; off < bytes; off += page) {
    sink += *reinterpret_cast<const volatile unsigned char*>(ring_data + off);
  }
  static_cast<void>(sink);
}

// How much of each ring touch_pages reads at creation: all of it while this rank's rings (inbound, and its own
// in each peer) come to at most kTouchAllBytes, which covers 4 local ranks with the default 1 MiB rings; else
// kTouchPartBytes, the part small frames use (kHotBytes, then at most one small frame) and more, since touching
// every ring of 16 local ranks tripled the CPU time of creating their communicators here.
constexpr size_t kTouchAllBytes = size_t{8} << 20;
constexpr size_t kTouchPartBytes = 2 * kHotBytes + sizeof(FrameHeader);  // as when small frames went to 64 KiB
size_t touch_bytes(int local_count, size_t ring_bytes) {
  const size_t rings = 2 * static_cast<size_t>(local_count - 1) * ring_bytes;
  return rings <= kTouchAllBytes ? ring_bytes : std::min(ring_bytes, kTouchPartBytes);
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
#else
  return -1;
#endif
}

// Whether a process is gone: its pidfd is readable once it exits (or, without pidfds, kill(0) fails).
bool process_gone(int pidfd, pid_t pid) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Copies n bytes starting at ring position pos (which may wrap) to dst, or calls fn on up to two pieces.
template <class Fn>
void for_ring_bytes(char* data, size_t ring_bytes, uint64_t pos, size_t n, Fn&& fn) {
  size_t at = static_cast<size_t>(pos & (ring_bytes - 1));  // a power of two (connect)
  size_t first = std::min(n, ring_bytes - at);
  fn(data + at, first, size_t{0});
  if (first < n) fn(data, n - first, first);
}

// Reads `len` bytes at `address` in process `pid` into `dst` (looping over partial reads).
bool remote_read(pid_t pid, char* dst, uint64_t address, size_t len) {
  size_t done = 0;
  while (done < len) {
    iovec local{dst + done, len - done};
    iovec remote{reinterpret_cast<void*>(address + done), len - done};
    ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

double ShmTransport::probe_attach_cost() {
  constexpr size_t kBytes = size_t{64} << 10;
  constexpr int kRounds = 16;
  void* m = ::mmap(nullptr, 2 * kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 0;
  ::madvise(m, 2 * kBytes, MADV_NOHUGEPAGE);  // 4 KiB pages, as most heap buffers: pinning costs per page
  char* src = static_cast<char*>(m);
  char* dst = src + kBytes;
  std::memset(src, 1, 2 * kBytes);
  using Clock = std::chrono::steady_clock;
  auto best_attach = Clock::duration::max(), best_copy = Clock::duration::max();
  bool ok = true;
  // Interleaved, so that both see the same moments of the machine; the best of each is its cost undisturbed.
  for (int i = 0; i < kRounds && ok; ++i) {
    auto t0 = Clock::now();
    ok = remote_read(::getpid(), dst, reinterpret_cast<uint64_t>(src), kBytes);
    auto t1 = Clock::now();
    std::memcpy(dst, src, kBytes);
    asm volatile("" : : "r"(dst) : "memory");  // the copy is not dead
    auto t2 = Clock::now();
    best_attach = std::min(best_attach, t1 - t0);
    best_copy = std::min(best_copy, t2 - t1);
  }
  ::munmap(m, 2 * kBytes);
  if (!ok || best_copy.count() <= 0) return 0;
  return std::chrono::duration<double>(best_attach) / std::chrono::duration<double>(best_copy);
}

namespace {

// This process's pid namespace, as the inode number of /proc/self/ns/pid (0 if unreadable).
unsigned long pid_namespace() {
  static const unsigned long ns = [] {
    char link[64] = {};
    unsigned long inode = 0;
    if (::readlink("/proc/self/ns/pid", link, sizeof(link) - 1) > 0) std::sscanf(link, "pid:[%lu]", &inode);
    return inode;
  }();
  return ns;
}

// A rank that dies between creating its segment and every peer having mapped it (a peer that never came, a
// crash, a kill during creation) leaves the name in /dev/shm, and its memory with it. Each creation removes
// such names: segments of this pid namespace whose creator no longer exists. Names from another pid
// namespace, whose pids mean nothing here, and names whose pid is alive (or reused) are left alone.
void sweep_stale_segments() {
  const unsigned long ns = pid_namespace();
  if (ns == 0) return;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  const std::string mark = fmt::format("-n{}-p", ns);
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    const size_t at = name.rfind(mark);
    if (name.rfind("chorus-", 0) != 0 || at == std::string::npos) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + at + mark.size(), &end, 10);
    if (pid <= 0 || end == nullptr || *end != '\0') continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) {
      base::log_info("removed /dev/shm/{}: left by process {}, which died while creating a communicator", name,
                     pid);
    }
  }
  ::closedir(dir);
}

}  // namespace

// ---------------------------------------------------------------- setup and teardown

ShmTransport::ShmTransport(int rank, int size, uint64_t comm_tag, const ShmOptions& options)
    : Transport(rank, size), comm_tag_(comm_tag), options_(options), peers_(size), staging_(new char[64 * 1024]) {}

std::unique_ptr<ShmTransport> ShmTransport::connect(Store& store, const std::string& key_prefix, int rank, int size,
                                                    const std::vector<int>& local, uint64_t comm_tag,
                                                    const ShmOptions& options, base::Deadline deadline) {
  std::unique_ptr<ShmTransport> t(new ShmTransport(rank, size, comm_tag, options));
  t->local_ = local;
  const int count = static_cast<int>(local.size());
  size_t ring = std::max<size_t>(size_t{64} << 10, std::bit_ceil(options.ring_bytes));
  t->options_.ring_bytes = ring;

  // Create this rank's segment; the name carries the communicator's random tag, so it never collides with
  // another job's, and O_EXCL makes sure we are its only creator. It also carries our pid namespace and pid,
  // so that a later creation can tell a segment whose creator died before unlinking it (sweep_stale_segments).
  sweep_stale_segments();
  t->self_name_ = fmt::format("/chorus-{:016x}-r{}-n{}-p{}", comm_tag, rank, pid_namespace(), ::getpid());
  t->self_bytes_ = ShmSegment::bytes(count, ring);
  int fd = ::shm_open(t->self_name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) base::throw_errno(fmt::format("shm_open {}", t->self_name_), errno);
  if (::ftruncate(fd, static_cast<off_t>(t->self_bytes_)) != 0) {
    int err = errno;
    ::close(fd);
    ::shm_unlink(t->self_name_.c_str());
    base::throw_errno(fmt::format("ftruncate {} to {} bytes (is /dev/shm large enough?)", t->self_name_,
                                  t->self_bytes_),
                      err);
  }
  void* p = ::mmap(nullptr, t->self_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    int err = errno;
    ::shm_unlink(t->self_name_.c_str());
    base::throw_errno(fmt::format("mmap {}", t->self_name_), err);
  }
  // Every page of our segment now, not on first touch: the first trip of each frame through a fresh ring page
  // cost both ranks a page fault (small all_reduces of 256 B to 1 KiB timed 2-3 times slower over their first
  // few hundred calls), and a /dev/shm too small for the rings fails here, with a message, instead of as a
  // SIGBUS in the middle of a collective. The transport adopts the mapping only afterwards: on failure even
  // the control page may be missing, and close() would write to it (a SIGBUS in the destructor, seen when the
  // ranks of one host raced for too small a /dev/shm).
  try {
    prefault(p, 0, t->self_bytes_, t->self_name_);
  } catch (...) {
    ::munmap(p, t->self_bytes_);
    throw;  // the destructor unlinks the name
  }
  t->self_ = static_cast<ShmSegment*>(p);
  for (int from = 0; from < count; ++from) {
    if (local[from] != rank) {
      touch_pages(static_cast<char*>(p) + ShmSegment::data_offset(from, count, ring), touch_bytes(count, ring));
    }
  }
  auto& c = t->self_->control;
  c.comm_tag = comm_tag;
  c.ring_bytes = ring;
  c.rank = rank;
  c.local_count = count;
  c.pid = ::getpid();
  c.probe = kProbeValue;
  c.probe_address = reinterpret_cast<uint64_t>(&c.probe);
  c.probe_region_fd = -1;
  c.probe_region_id = 0;
  if (options.allow_registered) {
    try {
      t->probe_region_ = registered_memory::allocate(8);
      std::memcpy(t->probe_region_, &kProbeValue, sizeof(kProbeValue));
      const std::optional<RegionRef> ref = registered_memory::find(t->probe_region_, 8);
      c.probe_region_fd = ref->fd;
      c.probe_region_id = ref->id;
      c.probe_region_base = ref->base;
      c.probe_region_bytes = ref->bytes;
    } catch (const Error& e) {
      base::log_info("shm transport: no registered memory here ({}); it is read by other means", e.message());
    }
  }
  c.flags = options.allow_membarrier && register_membarrier() ? kControlMembarrier : 0;
  std::atomic_thread_fence(std::memory_order_release);
  c.magic = kMagic;
  store.set(key_prefix + "seg/" + std::to_string(rank), t->self_name_);

  // Map every local peer's segment and check it is the one we expect.
  const int me = static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
  for (int i = 0; i < count; ++i) {
    int q = local[i];
    Peer& peer = t->peers_[q];
    peer.local = i;
    if (q == rank) continue;
    std::string name = store.get(key_prefix + "seg/" + std::to_string(q), deadline.remaining());
    int pfd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (pfd < 0) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("rank {} cannot open rank {}'s shared memory {}: {}; are the ranks on one host "
                                    "(and in one IPC namespace)? CHORUS_TRANSPORT=tcp avoids shared memory",
                                    rank, q, name, std::strerror(errno)));
    }
    peer.map_bytes = ShmSegment::bytes(count, ring);
    void* m = ::mmap(nullptr, peer.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
    ::close(pfd);
    if (m == MAP_FAILED) base::throw_errno(fmt::format("mmap {}", name), errno);
    peer.segment = static_cast<ShmSegment*>(m);
    // Our page-table entries for the ring we write into (its owner has already allocated the pages).
    prefault(m, ShmSegment::data_offset(me, count, ring), ring, name);
    touch_pages(static_cast<char*>(m) + ShmSegment::data_offset(me, count, ring), touch_bytes(count, ring));
    const auto& pc = peer.segment->control;
    if (pc.magic != kMagic || pc.comm_tag != comm_tag || pc.rank != q || pc.ring_bytes != ring) {
      base::throw_error(ErrorCode::Mismatch,
                        fmt::format("rank {}: the shared memory {} does not belong to rank {} of this communicator",
                                    rank, name, q),
                        q);
    }
    peer.pid = pc.pid;
    peer.pidfd = open_pidfd(peer.pid);
  }
  // Asymmetric wake-ups need every local rank registered (a sleeper's barrier reaches registered processes
  // only) and every rank choosing them: each reads the same flags, so all agree.
  t->asymmetric_wake_ = (c.flags & kControlMembarrier) != 0;
  for (int q : local) {
    if (q != rank && !(t->peers_[q].segment->control.flags & kControlMembarrier)) t->asymmetric_wake_ = false;
  }

  // Cross-memory attach: every rank probes reading each local peer's memory; all must succeed for any pair
  // to use it (the sender picks single-copy frames, so both sides must agree). By default the host's lowest
  // rank also measures what an attach read costs against a copy, and answers no where it does not pay, which
  // turns it off for the whole host; it publishes the figure first, so every rank can report it.
  bool cma = options.cma != 0;
  for (int q : local) {
    if (q == rank || !cma) continue;
    uint64_t value = 0;
    const Peer& peer = t->peers_[q];
    cma = remote_read(peer.pid, reinterpret_cast<char*>(&value), peer.segment->control.probe_address, 8) &&
          value == kProbeValue;
  }
  const bool measure = options.cma < 0 && local.size() > 1;
  if (measure && rank == local.front()) {
    const std::string published = fmt::format("{:.3f}", cma ? probe_attach_cost() : 0.0);
    store.set(key_prefix + "attach_cost", published);
    t->attach_cost_ = std::strtod(published.c_str(), nullptr);  // as the others read it
  }
  store.set(key_prefix + "cma/" + std::to_string(rank), cma ? "1" : "0");
  for (int q : local) {
    if (q != rank && store.get(key_prefix + "cma/" + std::to_string(q), deadline.remaining()) != "1") cma = false;
  }
  if (measure && rank != local.front()) {
    t->attach_cost_ = std::strtod(store.get(key_prefix + "attach_cost", deadline.remaining()).c_str(), nullptr);
  }
  // The probe's answer: where an attach read costs too much, large payloads start in the rings. Without
  // adapt that is final (attach off); with it, each receiver may ask for attach later, so it stays possible.
  t->yield_ = options.oversubscribed >= 0 ? options.oversubscribed > 0 : more_ranks_than_cores(static_cast<int>(count));
  t->adapt_ = cma && measure && options.adapt && !t->yield_;
  t->attach_first_ = cma && !(measure && t->attach_cost_ >= kAttachPaysBelow);
  t->cma_ = t->adapt_ || t->attach_first_;
  if (t->adapt_) {
    for (int q : local) {
      if (q == rank) continue;
      for (int lane = 0; lane < kLanes; ++lane) {
        for (int cls = 0; cls < kPathClasses; ++cls) t->peers_[q].path[lane][cls].attach = t->first_attach(lane, cls);
      }
    }
  }

  // Registered memory: every rank maps each local peer's probe page and reads it; again all must succeed.
  bool registered = options.allow_registered && t->probe_region_ != nullptr;
  for (int q : local) {
    if (q == rank || !registered) continue;
    const Peer& peer = t->peers_[q];
    const auto& pc = peer.segment->control;
    std::string why;
    const char* at = pc.probe_region_id == 0
                         ? nullptr
                         : t->regions_.translate(peer.pid,
                                                 RegionRef{pc.probe_region_id, pc.probe_region_fd, pc.probe_region_base,
                                                           pc.probe_region_bytes},
                                                 pc.probe_region_base, 8, &why);
    uint64_t value = 0;
    if (at != nullptr) std::memcpy(&value, at, sizeof(value));
    registered = value == kProbeValue;
    if (!registered) {
      base::log_info("shm transport: rank {} cannot map rank {}'s registered memory ({})", rank, q,
                     at == nullptr ? why : "the probe reads wrong");
    }
  }
  store.set(key_prefix + "reg/" + std::to_string(rank), registered ? "1" : "0");
  for (int q : local) {
    if (q != rank && store.get(key_prefix + "reg/" + std::to_string(q), deadline.remaining()) != "1") registered = false;
  }
  t->registered_ = registered;
  // Every peer published its answer after probing ours: the probe page is done with (peers keep a one-page
  // mapping in their caches until they need the room), and its descriptor goes back.
  if (t->probe_region_ != nullptr) {
    registered_memory::release(t->probe_region_);
    t->probe_region_ = nullptr;
  }

  // Everyone has mapped everyone: the names can go, so nothing is left in /dev/shm even if we crash.
  std::vector<std::string> keys;
  for (int q : local) keys.push_back(key_prefix + "cma/" + std::to_string(q));
  store.wait(keys, deadline.remaining());
  ::shm_unlink(t->self_name_.c_str());
  t->self_unlinked_ = true;

  t->stream_idle_ = options.stream_idle_bytes > 0 && !t->yield_;
  t->stream_piece_ =
      options.stream_piece_bytes > 0 ? std::max<size_t>(kAlign, options.stream_piece_bytes) : options.ring_bytes;
  // Oversubscribed, each poll yields the core (to the rank we wait for, most likely); 200 yields before
  // sleeping measured best for 4 and 8 ranks on 2 cores (8 B all_reduce: 4.2-5.3 us against 5.1-7.6 us with
  // 40, docs/performance.md). Otherwise pause-spin, which costs nothing but this core.
  t->spin_ = options.spin >= 0 ? options.spin : (t->yield_ ? 200 : 4000);
  t->timed_spin_ = options.adaptive_spin && options.spin < 0 && !t->yield_;
  if (options.cores_contended != nullptr) t->cores_contended_ = options.cores_contended;
  base::log_info(
      "shm transport: {} local ranks, {} KiB rings, large payloads by {}{}{}{}, wake-up checks {}, a wait polls {}",
      count, ring >> 10,
      t->attach_first_ ? "cross-memory attach (one copy)" : "streaming through the rings (two copies)",
      t->attach_cost_ > 0 ? fmt::format(" (an attach read measured at {:.1f} copies; attach where under {:.0f})",
                                        t->attach_cost_, kAttachPaysBelow)
                          : std::string(),
      t->adapt_ ? ", then as each receiver's timings choose" : "",
      registered ? ", or read in place from registered memory" : "",
      t->asymmetric_wake_ ? "by plain loads (membarrier)" : "by locked instructions",
      t->timed_spin_ ? fmt::format("for {}-{} us as its earlier waits teach (CHORUS_SHM_ADAPTIVE_SPIN=1) before it "
                                   "first sleeps, then {} times between sleeps",
                                   std::chrono::duration_cast<std::chrono::microseconds>(kSpinMin).count(),
                                   std::chrono::duration_cast<std::chrono::microseconds>(kSpinMax).count(), t->spin_)
                     : fmt::format("{} times before it sleeps", t->spin_));
  return t;
}

ShmTransport::~ShmTransport() {
  close();
  for (Peer& p : peers_) {
    if (p.segment) ::munmap(p.segment, p.map_bytes);
    if (p.pidfd >= 0) ::close(p.pidfd);
  }
  if (self_) ::munmap(self_, self_bytes_);
  if (probe_region_ != nullptr) registered_memory::release(probe_region_);
  if (!self_unlinked_ && !self_name_.empty()) ::shm_unlink(self_name_.c_str());
}

// ---------------------------------------------------------------- waiting

// Called after publishing something a peer may wait for (frame data, ring room, a failure). The peer, going to
// sleep, announces it in `sleeping` and then looks once more; one of the two sides must see the other's
// store. Symmetric: our locked increment orders our stores before our load of `sleeping`; it drains the store
// buffer, which for a small frame means waiting for the ring's cache lines to reach this core, and that was
// most of a small send's time. Asymmetric: a compiler barrier here, and the sleeper's membarrier(2) orders
// every registered process at the rare moment it goes to sleep.
void ShmTransport::ring_doorbell(int peer) {
  auto& c = peers_[peer].segment->control;
  if (asymmetric_wake_) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (!c.sleeping.load(std::memory_order_relaxed)) return;
  }
  c.doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (c.sleeping.load(std::memory_order_seq_cst)) {
    futex(&c.doorbell, FUTEX_WAKE, 1 << 30, nullptr);
  }
}

void ShmTransport::throw_unusable() {
  if (aborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(abort_mu_);
    throw Error(ErrorCode::Aborted, abort_reason_);
  }
  throw Error(ErrorCode::Aborted, fmt::format("the communicator failed earlier: {}", failed_->message()));
}

bool ShmTransport::peer_failed(int peer) const {
  const Peer& p = peers_[peer];
  return p.dead || p.segment->control.failed.load(std::memory_order_acquire) != 0 || channel_severed(peer);
}

bool ShmTransport::channel_severed(int peer) const {
  const Peer& p = peers_[peer];
  return p.severed || self_->ring(p.local).severed.load(std::memory_order_acquire) != 0 ||
         p.segment->ring(peers_[rank_].local).severed.load(std::memory_order_acquire) != 0;
}

void ShmTransport::throw_peer_failure(int peer) {
  Peer& p = peers_[peer];
  auto& c = p.segment->control;
  if (c.failed.load(std::memory_order_acquire)) {
    std::string message(c.fail_message, strnlen(c.fail_message, sizeof(c.fail_message)));
    throw Error(static_cast<ErrorCode>(c.fail_code), fmt::format("rank {} aborted the communicator: {}", peer, message),
                c.fail_culprit >= 0 ? c.fail_culprit : peer);
  }
  if (p.severed) {
    throw Error(ErrorCode::PeerLost,
                fmt::format("rank {} reset its connection to rank {} (fault injection)", rank_, peer), rank_);
  }
  if (channel_severed(peer)) {
    // Bytes short of a frame header in our inbound ring are the remains of a frame cut off by the reset.
    const Ring& in = self_->ring(p.local);
    const uint64_t head = in.head.load(std::memory_order_acquire), tail = in.tail.load(std::memory_order_relaxed);
    const uint64_t left = head > tail ? head - tail : 0;  // a frame taken by its trailer may pass the head
    throw peer_closed_error(rank_, peer, false,
                            left > 0 && left < sizeof(FrameHeader)
                                ? fmt::format("its last bytes were not a complete frame ({} of the {} header "
                                              "bytes); connection reset",
                                              left, sizeof(FrameHeader))
                                : std::string("connection reset"));
  }
  if (p.dead) throw peer_closed_error(rank_, peer, false, "detected by a liveness check");
  throw peer_closed_error(rank_, peer, true, "");
}

void ShmTransport::remote_read_failed(int peer) {
  int err = errno;
  // A peer that failed (and perhaps exited) before we read its buffer: its own error names the cause.
  if (peer_failed(peer)) throw_peer_failure(peer);
  // ESRCH: its memory is already gone (the exit has begun, even if its pidfd does not show it yet).
  if (err == ESRCH || process_gone(peers_[peer].pidfd, peers_[peer].pid)) {
    peers_[peer].dead = true;
    throw_peer_failure(peer);
  }
  throw Error(ErrorCode::SystemError,
              fmt::format("rank {} could not read rank {}'s memory (cross-memory attach): {}", rank_, peer,
                          std::strerror(err)),
              peer);
}

void ShmTransport::check_liveness() {
  for (int q : local_) {
    if (q == rank_ || peers_[q].dead) continue;
    Peer& p = peers_[q];
    if (!p.segment->control.closed.load(std::memory_order_acquire) && process_gone(p.pidfd, p.pid)) p.dead = true;
  }
}

// Waits until ready() holds, keeping sends (and, in a hybrid, the other transport) moving. `peer` is the rank
// whose data or room is awaited: its failure or departure ends the wait with that peer's error.
template <class Ready>
void ShmTransport::wait_until(Ready&& ready, const base::Deadline& deadline, int peer, const char* what,
                              const MessageTag* tag) {
  auto& me = self_->control;
  // A Ready that takes a bool is told when a look must be thorough (before sleeping, after a failure): see
  // receive(), whose frame wait looks at the ring's head only now and then otherwise.
  auto look = [&](bool thorough) {
    if constexpr (std::is_invocable_v<Ready&, bool>) {
      return ready(thorough);
    } else {
      return ready();
    }
  };
  int spins = 0;
  // Adaptive polling (ShmOptions::adaptive_spin): the wait's first round polls for spin_budget_'s time, from
  // `wait_start` (read after kUntimedPolls polls, so that the many waits that end sooner never read the clock),
  // before it sleeps; once it has slept, the time from `wait_start` until its data came teaches the budget.
  // Not on the progress thread, where the caller computes meanwhile.
  const bool timed = timed_spin_ && !on_background_thread();
  constexpr int kUntimedPolls = 64;
  bool extra = false, slept = false, contended = false;
  base::Clock::time_point wait_start{};
  auto learn = [&] {
    if (slept) spin_budget_.after_sleep(base::Clock::now() - wait_start, contended);
  };
  while (true) {
    bool external_busy = external_progress_ && external_progress_();
    progress();
    if (look(spins == 0)) return learn();
    if (peer_failed(peer)) throw_peer_failure(peer);
    if (peers_[peer].segment->control.closed.load(std::memory_order_acquire)) {
      if (look(true)) return learn();
      throw_peer_failure(peer);
    }
    bool poll_more;
    if (timed && !slept) {
      poll_more = ++spins <= kUntimedPolls;
      if (!poll_more) {
        const auto now = base::Clock::now();
        if (spins == kUntimedPolls + 1) wait_start = now;
        const auto polled = now - wait_start;
        poll_more = polled < spin_budget_.budget();
        extra = polled >= kSpinMin;
        if (!poll_more) {
          // From here on the wait sleeps between rounds of spin_ pause-spun polls, as without the budget.
          slept = true;
          extra = false;
          contended = cores_contended_();
        }
      }
    } else {
      poll_more = ++spins < spin_;
    }
    if (poll_more) {
      if (yield_ || extra) {
        // Past the shortest budget, each poll yields the CPU: where the scheduler has put the rank we wait
        // for on our CPU, it runs (and the two, both runnable, are soon spread over the CPUs), where a
        // pause-spin would hold it off for the whole budget.
        sched_yield();
      } else {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      continue;
    }
    spins = 0;
    check_usable();
    if (deadline.expired()) {
      throw Error(ErrorCode::Timeout,
                  fmt::format("rank {} timed out waiting for rank {} ({}{}); rank {} may be stuck or calling "
                              "collectives in a different order",
                              rank_, peer, what, tag ? " in " + describe(*tag) : std::string(), peer),
                  peer);
    }
    // Sleep on our doorbell: announce it, look once more (a waker that missed the announcement has already
    // rung), then wait for a ring or a slice to pass. The slice bounds how late a dead peer is noticed.
    uint32_t seen = me.doorbell.load(std::memory_order_seq_cst);
    me.sleeping.store(1, std::memory_order_seq_cst);
    // Asymmetric wake-ups: once this returns, every peer has either seen `sleeping` or made its stores
    // visible to the look below. Should it fail, sleep in short slices instead.
    const bool ordered = !asymmetric_wake_ || membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
    // abort() sets aborted_ before it rings: had it rung before `seen` was read, its flag is visible here (the
    // doorbell's seq_cst read synchronizes with the ring), so an abort between check_usable() above and the
    // read does not cost a whole slice of sleep.
    // The look covers our queued frames too: a consumer that freed room in its ring after our last progress()
    // but before it could see us asleep did not ring, and a frame we wait to finish (wait_send) or that the
    // peer waits for before it answers us is written only if we write it now. Without this, a 2-rank gather
    // of 8 MiB (the leaf's payload streaming through the ring) lost a whole slice in about one run in three,
    // both ranks asleep: the root waiting for the rest of the frame, the leaf for room it already had.
    const bool wrote = write_queued();
    if (!wrote && !look(true) && !peer_failed(peer) && !aborted_.load(std::memory_order_acquire)) {
      constexpr auto kLong = std::chrono::microseconds(100000);
      auto slice = external_busy || !ordered ? std::chrono::microseconds(200) : kLong;
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline.remaining());
      if (left < slice) slice = std::max(left, std::chrono::microseconds(1));
      timespec ts{static_cast<time_t>(slice.count() / 1000000), static_cast<long>(slice.count() % 1000000) * 1000};
      ++waits_.sleeps;
      if (futex(&me.doorbell, FUTEX_WAIT, seen, &ts) != 0 && errno == ETIMEDOUT && slice == kLong &&
          (look(true) || write_queued())) {
        // Slept the whole slice although what we waited for had come: its sender did not see us asleep.
        ++waits_.missed_wakeups;
      }
    }
    me.sleeping.store(0, std::memory_order_relaxed);
    check_liveness();
    stalled();
    for (int q : local_) {
      if (q != rank_ && peer_failed(q) && peers_[q].segment->control.failed.load()) throw_peer_failure(q);
    }
  }
}

// ---------------------------------------------------------------- sending

SendHandle ShmTransport::isend(int peer, const MessageTag& tag, const void* data, size_t len,
                               const base::Deadline& deadline, SenderWork work) {
  check_usable();
  Peer& p = peers_[peer];
  if (peer_failed(peer) || p.segment->control.closed.load(std::memory_order_acquire)) throw_peer_failure(peer);
  // Large payloads go by descriptor: read in place from registered memory, or else by cross-memory attach,
  // which puts the whole copy on the receiver's core. A sender with nothing else to do streams the payload
  // through the ring instead, so that both cores copy, pipelined, unless the local ranks share cores (then
  // the sender's copy would take a core another rank needs).
  std::optional<RegionRef> region;
  bool remote = false;
  bool idle_lane = false;
  bool paired = false;
  // Mid-sized payloads by attach only for exchanges (SenderWork::exchange), and only where each local rank has
  // a core of its own: where the ranks outnumber the cores, a rendezvous (the sender waits for its receiver's
  // read) costs switches between them that the ring's buffered send does not (4 ranks on 2 cores: all_reduce
  // of 8-512 KiB 1.1-1.8 times as long).
  const bool busy = work.exchange && !yield_;
  // Where the ranks share cores, a tree's edge by attach would make its sender wait for a switch
  // (ShmOptions::single_copy_shared_core_bytes).
  const size_t single_copy = yield_ && work.one_way
                                 ? std::max(options_.single_copy_bytes, options_.single_copy_shared_core_bytes)
                                 : options_.single_copy_bytes;
  if ((len >= single_copy || (busy && len >= options_.single_copy_busy_bytes)) && (cma_ || registered_)) {
    if (registered_) region = registered_memory::find(data, len);
    // An idle sender to a reducing receiver streams at any size (the receiver then reduces straight from the
    // ring: one pass instead of a copy and a pass); to a plain receiver only from options_.stream_idle_bytes,
    // below which streaming's extra cache-line transfers between the cores cost what the overlap saves.
    // Where the receiver chooses from its timings (adapt_), its choice holds for idle senders too: the rule
    // above was measured where the rings are fast, and where the cores sit far apart a reduce leaf streaming
    // to its parent took 3-4 times as long as the peers' attach (docs/performance.md, "Ring or attach, chosen
    // while running").
    // Adapting, such a sender's frames go in the idle lane, chosen apart from the rest (kIdleLane).
    const bool stream = stream_idle_ && work.idle_bytes > 0 &&
                        (work.receiver_reduces || work.idle_bytes >= options_.stream_idle_bytes);
    idle_lane = adapt_ && stream && !region.has_value();
    const std::optional<bool> pair_way =
        adapt_ && busy && !region.has_value() ? paired_way(peer, path_class(kBusyLane, tag)) : std::nullopt;
    if (pair_way.has_value()) {
      paired = true;
      remote = *pair_way;
      ++waits_.paired_frames;
    } else if (len < options_.single_copy_bytes) {
      // A mid-sized exchange frame (single_copy_busy_bytes): the way its class goes, untimed, untried.
      remote = region.has_value() ||
               (adapt_ ? current_attach(p, kBusyLane, path_class(kBusyLane, tag)) : cma_ && attach_first_);
    } else {
      remote = region.has_value() || (adapt_ ? attach_to(p, idle_lane ? kIdleLane : kBusyLane,
                                                         path_class(idle_lane ? kIdleLane : kBusyLane, tag), len,
                                                         warm_bytes(idle_lane ? kIdleLane : kBusyLane, tag))
                                             : cma_ && !stream && attach_first_);
    }
  }
  // The header's word for the receiver's timing (adapting): an exchange's large frame, and whether it went the
  // way our own receiver chose for the pair.
  const uint32_t marks = (adapt_ && busy && len >= options_.single_copy_bytes ? kExchangeFrame : 0) |
                         (idle_lane ? kIdleSenderFrame : 0) | (paired ? kPairedFrame : 0);
  if (!remote && p.queue.empty()) {
    // Fast path (every small message): nothing queued ahead and the whole frame fits, so it goes into the
    // ring now, without a queue entry.
    Ring& ring = p.segment->ring(peers_[rank_].local);
    char* ring_data = p.segment->data(peers_[rank_].local);
    // Frames start on cache lines (the ring size is a multiple of one), except after send_raw (fault injection)
    // wrote an odd length; rewind() keeps that alignment.
    const bool aligned = (p.head & (kAlign - 1)) == 0;
    const bool trailer = aligned && !yield_ && trailer_eligible(len);
    const size_t body = round_up(len, kAlign);
    const size_t frame = trailer ? trailer_frame_bytes(len) : sizeof(FrameHeader) + body;
    rewind(p, ring_data, frame);
    const uint64_t head = p.head;
    if (ring_room(p, head, frame) >= frame) {
      const size_t at = static_cast<size_t>(head & (options_.ring_bytes - 1));
      if (aligned) {
        // The header never wraps: it is composed where it goes, eight stores, rather than built aside and copied.
        encode_header(ring_data + at, FrameKind::Data, tag, len, comm_tag_, rank_,
                      (trailer && frame > sizeof(FrameHeader) + body ? kTrailerLine : 0) | marks);
      } else {
        FrameHeader header = make_header(FrameKind::Data, tag, len, comm_tag_, rank_);
        if (marks != 0) {
          header.reserved1 |= marks;
          header.checksum = header_checksum(header);
        }
        put_ring(ring_data, head, reinterpret_cast<const char*>(&header), sizeof(FrameHeader));
      }
      const bool timed = adapt_ && len >= options_.single_copy_bytes;
      const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      if (len) put_ring(ring_data, head + sizeof(FrameHeader), static_cast<const char*>(data), len);
      if (timed) timed_copy_in(ring.producer_ns_per_kib, len, std::chrono::steady_clock::now() - t0);
      if (trailer) {
        // Stored last, with release order: a consumer that reads it (acquire) also sees every store above.
        auto* word =
            reinterpret_cast<uint64_t*>(ring_data + ((head + frame - sizeof(uint64_t)) & (options_.ring_bytes - 1)));
        __atomic_store_n(word, trailer_word(head), __ATOMIC_RELEASE);
      }
      p.head = head + frame;
      ring.head.store(p.head, std::memory_order_release);
      ring_doorbell(peer);
      ++p.written;
      return SendHandle{peer, p.posted++};
    }
  }
  SendReq r{make_header(FrameKind::Data, tag, len, comm_tag_, rank_), static_cast<const char*>(data), len, 0, false,
            p.posted, region};
  r.remote = remote;
  r.piece = work.idle_bytes > 0 ? stream_piece_ : options_.ring_bytes;
  r.header.reserved1 |= marks;
  if (r.remote) {
    r.header.flags |= kFlagRemote;
    p.last_remote = p.posted + 1;
  }
  if (marks != 0 || r.remote) r.header.checksum = header_checksum(r.header);
  p.queue.push_back(r);
  SendHandle h{peer, p.posted++};
  if (p.queue.size() == 1) write_some(peer);
  return h;
}

int ShmTransport::size_class(const MessageTag& tag) noexcept {
  const uint64_t bytes = call_bytes(tag);
  int c = 0;
  for (uint64_t limit = uint64_t{1} << 20; c + 1 < kSizeClasses && bytes >= limit; limit <<= 2) ++c;
  return c;
}

bool ShmTransport::ColdPages::read(uint64_t address, size_t len, uint64_t seq) {
  if (len == 0) return false;
  if (entries.size() > kMaxEntries) entries.clear();
  bool cold = false;
  const uint64_t last = (address + len - 1) >> kShift;
  for (uint64_t g = address >> kShift; g <= last; ++g) {
    auto it = std::lower_bound(entries.begin(), entries.end(), g,
                               [](const std::pair<uint64_t, Entry>& e, uint64_t key) { return e.first < key; });
    if (it == entries.end() || it->first != g) it = entries.insert(it, {g, Entry{seq, 0}});
    Entry& e = it->second;
    if (e.calls == 0 || e.seq != seq) {
      e.seq = seq;
      if (e.calls < UINT32_MAX) ++e.calls;
    }
    if (e.calls < kWarmReads) cold = true;
  }
  return cold;
}

std::optional<bool> ShmTransport::paired_way(int peer, int path_cls) const {
  if (peer < rank_) return std::nullopt;
  const PathChoice& c = peers_[peer].path[kBusyLane][path_cls];
  if (c.frames == 0) return std::nullopt;
  return c.attach;
}

bool ShmTransport::current_attach(const Peer& p, int lane, int path_cls) const {
  const uint32_t asked = p.segment->ring(peers_[rank_].local).path[lane][path_cls].load(std::memory_order_relaxed);
  return asked_attach(asked, lane, path_cls);
}

bool ShmTransport::asked_attach(uint32_t asked, int lane, int path_cls) const {
  return (asked & kPathWay) == kPathUnset ? first_attach(lane, path_cls) : (asked & kPathWay) == kPathAttach;
}

bool ShmTransport::attach_to(Peer& p, int lane, int path_cls, size_t len, uint64_t call_bytes) {
  Exploration& e = p.explore[lane][path_cls];
  if (e.left > 0) {
    --e.left;
    return e.attach;
  }
  const Ring& ring = p.segment->ring(peers_[rank_].local);
  const uint32_t asked = ring.path[lane][path_cls].load(std::memory_order_relaxed);
  const bool attach = asked_attach(asked, lane, path_cls);
  // Now and then kExploreFrames + 1 frames in a row go the other way (the receiver does not time the first,
  // which finds the caches set for the other way), so that the receiver's figure for it stays current: the
  // large frame after the class's warm-up (Warmth: the receiver does not time those either), then after at least
  // kExploreSpacing large frames (kExploreSpacingClear where the last try was far slower), 50 ms, 100, 200,
  // ... up to explore_us, and the ring's hold_tries_until. The frame count bounds what trying a slow way costs
  // in a busy channel, the interval in a long run, the hold whatever the frames' size (a clock read per large
  // frame: tens of nanoseconds against microseconds of copying). Where the receiver asks to confirm a change
  // (kPathRetry), the next try comes after kRetrySpacing frames, without waiting.
  ++e.large_frames;
  const bool retry = (asked & kPathRetry) != 0;
  if (e.warmth.warming(e.large_frames, len, call_bytes)) return attach;
  if (e.count > 0) {
    const uint64_t spacing = retry ? kRetrySpacing : (asked & kPathClear) ? kExploreSpacingClear : kExploreSpacing;
    if (e.large_frames < e.tried_at + kExploreFrames + 1 + spacing) return attach;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!retry) {
    if (now < e.at) return attach;
    const int64_t hold = ring.hold_tries_until[lane][path_cls].load(std::memory_order_relaxed);
    if (std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count() < hold) return attach;
  }
  const uint64_t wait_us = uint64_t{50000} << std::min<uint32_t>(e.count, 16);
  e.at = now + std::chrono::microseconds(std::min<uint64_t>(options_.explore_us, wait_us));
  e.tried_at = e.large_frames;
  ++e.count;
  e.attach = !attach;
  e.left = kExploreFrames;
  return !attach;
}

bool ShmTransport::PathChoice::add(bool reduces, bool by_attach, double ns_per_kib_sample) {
  // Each way's figure is the median of its last frames: the chosen way's last kWindow (16), the other way's
  // last kTried (4, one try): a few frames disturbed (a cold cache, a page fault, the other core busy, a
  // moment descheduled: a short frame takes microseconds) or lucky move it little. A kind of frame counts
  // once the chosen way has come kWindow / 2 times and the other kTried times.
  double* window = recent[reduces][by_attach];
  uint32_t& n = samples[reduces][by_attach];
  window[n % kWindow] = ns_per_kib_sample;
  if (n < UINT32_MAX) ++n;
  double ring = 0, attach_cost = 0;
  for (int k = 0; k < 2; ++k) {
    const uint32_t chosen = samples[k][attach], other = samples[k][!attach];
    if (chosen >= kWindow / 2 && other >= kTried) {
      ring += typical(k, false, attach ? kTried : kWindow);
      attach_cost += typical(k, true, attach ? kWindow : kTried);
    }
  }
  if (ring <= 0 || attach_cost <= 0) return false;
  const bool want = attach ? !(ring < kSwitchBelow * attach_cost) : attach_cost < kSwitchBelow * ring;
  clear = want == attach && (attach ? ring > kClearAbove * attach_cost : attach_cost > kClearAbove * ring);
  if (want == attach) {
    candidate = false;
    return false;
  }
  // A change needs two tries that both show it: a moment that slowed the chosen way's last frames (a core
  // taken away for a while) would otherwise move it, and the way back waits for the next try.
  if (!candidate) {
    candidate = true;
    candidate_try = tries;
    return false;
  }
  if (tries == candidate_try || tried_samples < kTried) return false;
  attach = want;
  candidate = false;
  return true;
}

double ShmTransport::PathChoice::typical(int reduces, bool by_attach, uint32_t last) const {
  const uint32_t total = samples[reduces][by_attach];
  const uint32_t n = std::min({total, last, kWindow});
  if (n == 0) return 0;
  double v[kWindow];
  for (uint32_t i = 0; i < n; ++i) v[i] = recent[reduces][by_attach][(total - 1 - i) % kWindow];
  std::sort(v, v + n);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void ShmTransport::timed_copy_in(std::atomic<uint32_t>& published, size_t len,
                                 std::chrono::steady_clock::duration took) {
  const double sample = std::chrono::duration<double, std::nano>(took).count() * 1024.0 / static_cast<double>(len);
  published.store(static_cast<uint32_t>(std::min(sample + 1, 1e9)), std::memory_order_relaxed);
}

void ShmTransport::timed_frame(int peer, int lane, int path_cls, bool reduces, bool by_attach, size_t len,
                               uint64_t call_bytes, std::chrono::steady_clock::duration took, bool streamed, bool cold,
                               std::optional<std::chrono::steady_clock::duration> since_wait) {
  double ns = std::chrono::duration<double, std::nano>(took).count();
  // Through the ring and whole when we came, the producer's copy of this frame in (published with the frame's
  // last bytes) adds to ours out, or for an idle sender, which copies its next frame in meanwhile, the slower
  // of the two counts; an exchange's frame costs at least our wait for it (ring_frame_cost).
  if (!by_attach) {
    const double producer = self_->ring(peers_[peer].local).producer_ns_per_kib.load(std::memory_order_relaxed) *
                            static_cast<double>(len) / 1024.0;
    ns = ring_frame_cost(ns, producer, lane, streamed,
                         since_wait ? std::chrono::duration<double, std::nano>(*since_wait).count() : -1.0);
  }
  PathChoice& c = peers_[peer].path[lane][path_cls];
  // The first frame after frames the other way is not timed: it finds the caches set for the other way.
  // Nor are the first kWarmFrames: the rings' lines, the pages of the user's buffers, are still cold.
  const bool transition = c.frames > 0 && c.last_attach != by_attach;
  c.last_attach = by_attach;
  if (c.frames < UINT32_MAX) ++c.frames;
  if (c.warmth.warming(c.frames, len, call_bytes)) return;
  if (transition) {
    if (by_attach != c.attach) {  // a try begins
      ++c.tries;
      c.tried_samples = 0;
    }
    return;
  }
  if (cold) return;  // an attach read of pages read in too few calls yet (ColdPages)
  if (by_attach != c.attach) {
    ++c.tried_samples;
    // A tried frame: what it cost beyond the chosen way's figure holds the next try back kHoldPerExtra times
    // as long (a try of 5 frames of 8 MiB that each took 2 ms more than the rings holds the next 0.5 s).
    const double chosen = c.typical(reduces, c.attach, PathChoice::kWindow) * static_cast<double>(len) / 1024.0;
    if (chosen > 0 && ns > chosen) {
      auto& hold = self_->ring(peers_[peer].local).hold_tries_until[lane][path_cls];
      const int64_t now =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
              .count();
      const int64_t until =
          std::max(hold.load(std::memory_order_relaxed), now) + static_cast<int64_t>(kHoldPerExtra * (ns - chosen));
      hold.store(until, std::memory_order_relaxed);
    }
  }
  const bool changed = c.add(reduces, by_attach, ns * 1024.0 / static_cast<double>(len));
  const uint32_t word =
      (c.attach ? kPathAttach : kPathRing) | (c.clear ? kPathClear : 0) | (c.candidate ? kPathRetry : 0);
  if (word != c.published) {
    self_->ring(peers_[peer].local).path[lane][path_cls].store(word, std::memory_order_relaxed);
    c.published = word;
  }
  if (!changed) return;
  ++waits_.path_switches;
  if (waits_.path_switches <= 16) {
    auto figure = [&](int k, int a) {
      return c.samples[k][a]
                 ? fmt::format("{:.0f}",
                               c.typical(k, a != 0, (a != 0) == c.attach ? PathChoice::kWindow : PathChoice::kTried))
                 : std::string("-");
    };
    static constexpr const char* kClassNames[kSizeClasses] = {"under 1 MiB", "of 1-4 MiB", "of 4-16 MiB",
                                                              "of 16-64 MiB", "from 64 MiB"};
    static constexpr const char* kGroupNames[kPathClasses / kSizeClasses] = {"", "reducing ", "in-place all_reduce ",
                                                                             "in-place reducing "};
    const std::string what = lane == kIdleLane
                                 ? std::string(" from an idle sender")
                                 : fmt::format(" in {}operations {}", kGroupNames[path_cls / kSizeClasses],
                                               kClassNames[path_cls % kSizeClasses]);
    base::log_info(
        "rank {}: rank {}'s large payloads{} now {} (ns per KiB, ring/attach: copied {}/{}, "
        "reduced {}/{}){}",
        rank_, peer, what, c.attach ? "by cross-memory attach" : "through the ring", figure(0, 0), figure(0, 1),
        figure(1, 0), figure(1, 1), waits_.path_switches == 16 ? "; later changes are not logged" : "");
  }
}

// Room in our ring in the peer after stream position head, from the tail last seen; rereads the tail (and so
// touches the consumer's cache line) only when that is less than need.
uint64_t ShmTransport::ring_room(Peer& p, uint64_t head, size_t need) {
  uint64_t room = options_.ring_bytes - (head - p.tail_seen);
  if (room < need) {
    p.tail_seen = p.segment->ring(peers_[rank_].local).tail.load(std::memory_order_acquire);
    room = options_.ring_bytes - (head - p.tail_seen);
  }
  return room;
}

// Before a frame of `frame` bytes (header included) is written at p.head: if that is at least kHotBytes into
// the ring, the frame is small (kHotFrameBytes at most), and the consumer has released everything written so
// far, writes a Pad header over the rest of the lap and moves p.head to the next lap's start. The caller
// publishes the new head with its frame.
void ShmTransport::rewind(Peer& p, char* ring_data, size_t frame) {
  const size_t size = options_.ring_bytes;
  const uint64_t head = p.head;
  const size_t at = static_cast<size_t>(head & (size - 1));
  if (at < kHotBytes || frame > kHotFrameBytes || at % kAlign != 0 || head < p.rewind_after) return;
  const size_t gap = size - at;  // at least one header: `at` is a multiple of kAlign below `size`
  // Only into an empty ring. Until the consumer reaches the pad, the frames after it have only the room the
  // consumer had released of this lap, so going back while it is behind caps how far a producer can run
  // ahead (a broadcast's root): 4-rank shm broadcasts of 8-32 KiB took 2-3 times longer so, even with half
  // of kHotBytes of room required. A consumer found behind is looked at again after kHotBytes / 4 more
  // bytes: each look is a miss on its line, and with a look every 4 KiB 4-rank shm reduces of 2-8 KiB, whose
  // leaves run ahead, took 1.6-2.6 times the time of a build that never went back (every 16 KiB: 0.7-0.8).
  if (ring_room(p, head, size) < size) {
    p.rewind_after = head + kHotBytes / 4;
    return;
  }
  encode_header(ring_data + at, FrameKind::Pad, MessageTag{}, gap - sizeof(FrameHeader), comm_tag_, rank_);
  p.head = head + gap;
  ++waits_.ring_rewinds;
}

// Copies n bytes into a peer's ring for us at stream position pos (wrapping at the ring's end).
void ShmTransport::put_ring(char* data, uint64_t pos, const char* src, size_t n) {
  for_ring_bytes(data, options_.ring_bytes, pos, n,
                 [&](char* dst, size_t len, size_t off) { std::memcpy(dst, src + off, len); });
}

// Writes as much of the peer's queued frames into its ring as fits; returns true if something moved. A frame
// is its header, then either its payload (padded to whole cache lines, written as space frees, so a payload
// larger than the ring streams through it) or, for a single-copy frame, a descriptor written together with
// the header.
bool ShmTransport::write_some(int peer) {
  Peer& p = peers_[peer];
  const int me = peers_[rank_].local;
  Ring& ring = p.segment->ring(me);
  char* data = p.segment->data(me);
  const size_t size = options_.ring_bytes;
  auto put = [&](uint64_t pos, const char* src, size_t n) { put_ring(data, pos, src, n); };
  bool moved = false;
  while (!p.queue.empty()) {
    SendReq& r = p.queue.front();
    const size_t body = r.remote ? kDescriptorBytes : round_up(r.len, kAlign);
    if (r.written == 0) rewind(p, data, sizeof(FrameHeader) + body);
    const uint64_t head = p.head;
    // The room for the rest of the frame (as much as the ring holds) is enough not to look at the tail again.
    uint64_t space = ring_room(p, head, std::min<size_t>(sizeof(FrameHeader) + body - r.written, size));
    size_t wrote = 0;
    if (r.written == 0) {
      const size_t first = sizeof(FrameHeader) + (r.remote ? kDescriptorBytes : 0);
      if (space < first) break;
      put(head, reinterpret_cast<const char*>(&r.header), sizeof(FrameHeader));
      if (r.remote) {
        char block[kDescriptorBytes] = {};
        Descriptor d{reinterpret_cast<uint64_t>(r.data), r.len, static_cast<int32_t>(::getpid()), -1, 0, 0, 0};
        if (r.region) {
          d.region_fd = r.region->fd;
          d.region_id = r.region->id;
          d.region_base = r.region->base;
          d.region_bytes = r.region->bytes;
        }
        std::memcpy(block, &d, sizeof(d));
        put(head + sizeof(FrameHeader), block, kDescriptorBytes);
      }
      wrote = first;
      space -= first;
    }
    if (!r.remote) {
      const size_t done = r.written + wrote - sizeof(FrameHeader);  // body bytes already in the ring
      const size_t left = body - done;
      // At most r.piece before the head moves: the consumer copies out one piece while we copy in the next.
      size_t take = std::min<uint64_t>({left, space, r.piece});
      if (take < left) take -= take % kAlign;  // a partial write ends on a cache line
      space -= take;
      if (take > 0) {
        size_t payload = done < r.len ? std::min(take, r.len - done) : 0;  // the rest is padding
        const bool timed = payload && adapt_ && r.len >= options_.single_copy_bytes;
        const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        if (payload) put(head + wrote, r.data + done, payload);
        if (timed) r.copy_in += std::chrono::steady_clock::now() - t0;
        wrote += take;
      }
    }
    if (wrote == 0) break;
    r.written += wrote;
    // Published with the frame's last bytes, so that its consumer reads the figure for this frame.
    if (!r.remote && adapt_ && r.len >= options_.single_copy_bytes && r.written == sizeof(FrameHeader) + body) {
      timed_copy_in(ring.producer_ns_per_kib, r.len, r.copy_in);
    }
    p.head = head + wrote;
    ring.head.store(p.head, std::memory_order_release);
    moved = true;
    if (r.written < sizeof(FrameHeader) + body) {
      if (r.remote || space < kAlign) break;  // the ring is full: the rest goes as space frees
      ring_doorbell(peer);                    // a piece of a streaming frame: its consumer may start on it
      continue;
    }
    p.queue.pop_front();
    ++p.written;
  }
  if (moved) ring_doorbell(peer);
  return moved;
}

bool ShmTransport::write_queued() {
  bool moved = false;
  for (int q : local_) {
    if (q != rank_ && !peers_[q].queue.empty()) moved |= write_some(q);
  }
  return moved;
}

bool ShmTransport::progress() {
  bool pending = false;
  for (int q : local_) {
    if (q == rank_ || peers_[q].queue.empty()) continue;
    write_some(q);
    pending |= !peers_[q].queue.empty();
  }
  return pending;
}

void ShmTransport::wait_send(SendHandle h, const base::Deadline& deadline) {
  Peer& p = peers_[h.peer];
  const Ring& ring = p.segment->ring(peers_[rank_].local);
  // In order, as on every transport: h and every earlier frame written, and every single-copy frame up to h
  // consumed (its payload is read from our memory).
  const uint64_t need_consumed = std::min(h.index + 1, p.last_remote);
  auto done = [&] {
    if (p.written <= h.index) return false;
    if (p.consumed_seen < need_consumed) p.consumed_seen = ring.consumed.load(std::memory_order_acquire);
    return p.consumed_seen >= need_consumed;
  };
  if (done()) return;  // the common case for small frames, written whole by isend
  wait_until(done, deadline, h.peer, "to take our data", nullptr);
}

void ShmTransport::flush(const base::Deadline& deadline) {
  for (int q : local_) {
    const Peer& p = peers_[q];
    // Nothing to wait for (every frame written, every single-copy payload read) is settled from our own
    // bookkeeping, without a call.
    if (q != rank_ && (p.written < p.posted || p.consumed_seen < p.last_remote)) {
      wait_send(SendHandle{q, p.posted - 1}, deadline);
    }
  }
}

// ---------------------------------------------------------------- receiving

// Receives the next frame from `peer`: on_bytes(src, n, offset) is called on payload bytes as they arrive in
// the ring (at most two pieces per arrival, each a whole number of elements), or once on the whole payload
// where it lies in the sender's registered memory (mapped here); on_remote(pid, address, len) once for any
// other single-copy frame.
template <class OnBytes, class OnRemote>
void ShmTransport::receive(int peer, const MessageTag& tag, size_t len, const base::Deadline& deadline, bool reduces,
                           OnBytes&& on_bytes, OnRemote&& on_remote) {
  check_usable();
  if (peers_[peer].severed) throw_peer_failure(peer);
  const int from = peers_[peer].local;
  Ring& ring = self_->ring(from);
  char* data = self_->data(from);
  const size_t size = options_.ring_bytes;
  uint64_t tail = ring.tail.load(std::memory_order_relaxed);
  uint64_t& head_seen = peers_[peer].head_seen;
  // Bytes published after `tail`; the shared head is loaded only when the last one read does not cover `need`.
  // Waiting for a frame (at_frame), the loads of the frame's lines (its header, and as many payload lines as
  // the peer's last frame had, up to kPrefetchLines) are issued beside the head's: when the producer publishes,
  // the lines cross from its core together instead of one after the other (the header used to be read only
  // once the head covered it, the payload after that). 2-rank all_reduce, all_gather, all_to_all and
  // reduce_scatter of 8-512 B took 0.77-0.94 of their time so, where the cache-line round trip between the
  // cores is ~600 ns (docs/performance.md, "Waiting for a frame: its lines beside the head"). Prefetches never
  // fault; the addresses are wrapped into the ring.
  auto available = [&](uint64_t need, bool at_frame = false) {
    if (head_seen - tail < need) {
      if (at_frame) {
        for (uint32_t i = 0; i <= peers_[peer].prefetch_lines; ++i) {
          __builtin_prefetch(data + ((tail + i * kAlign) & (size - 1)));
        }
      }
      // Never backwards: a frame taken by its trailer may lie past the head the producer has stored so far.
      head_seen = std::max(head_seen, ring.head.load(std::memory_order_acquire));
    }
    return head_seen - tail;
  };
  auto get = [&](uint64_t pos, char* dst, size_t n) {
    for_ring_bytes(data, size, pos, n, [&](char* src, size_t len, size_t off) { std::memcpy(dst + off, src, len); });
  };
  // A frame of `len` bytes sent at once ends with its trailer word (isend): while waiting for it, poll that
  // word, in the frame's last line, and look at the ring's head, the line the producer stores on every frame,
  // only every 16th poll and at every thorough look (wait_until), which finds any other frame (a padding frame,
  // a queued or larger one, a corrupt one). A trailer that matches shows the whole frame published. Where the
  // ranks outnumber the cores (yield_), every poll yields the core anyway: there frames carry no trailer and
  // every poll looks at the head, as before trailers (4-rank all_reduce of 8-512 B landed in its slower modes
  // more often with them).
  const bool expect_trailer = !yield_ && trailer_eligible(len);
  const size_t trailer_frame = trailer_frame_bytes(len);
  uint32_t polls = 0;
  auto next_header = [&](FrameHeader& h) {
    wait_until(
        [&](bool thorough) {
          if (expect_trailer) {
            if (probe_trailer(data + ((tail + trailer_frame - sizeof(uint64_t)) & (size - 1))) == trailer_word(tail)) {
              if (head_seen - tail < trailer_frame) head_seen = tail + trailer_frame;
              return true;
            }
            if (!thorough && (++polls & 15) != 0) {
              for (uint32_t i = 0; i <= peers_[peer].prefetch_lines; ++i) {
                __builtin_prefetch(data + ((tail + i * kAlign) & (size - 1)));
              }
              return false;
            }
          }
          return available(sizeof(FrameHeader), /*at_frame=*/true) >= sizeof(FrameHeader);
        },
        deadline, peer, "data", &tag);
    get(tail, reinterpret_cast<char*>(&h), sizeof(h));
  };
  // An exchange's large frame is timed from here, the start of our wait for it (kExchangeFrame, below).
  const auto wait_started = adapt_ && len >= options_.single_copy_bytes ? std::chrono::steady_clock::now()
                                                                        : std::chrono::steady_clock::time_point{};
  FrameHeader h;
  next_header(h);
  // The producer went back to the ring's start (see rewind): skip the rest of the lap. The pad and the frame
  // after it were published together.
  while (h.kind == static_cast<uint8_t>(FrameKind::Pad) && header_intact(h) && h.comm_tag == comm_tag_) {
    const uint64_t skip = sizeof(FrameHeader) + h.length;
    if (h.length > size || (tail + skip) % size != 0) {
      throw Error(ErrorCode::Internal,
                  fmt::format("rank {}: a padding frame from rank {} does not end at the ring's end ({} bytes at "
                              "offset {} of {})",
                              rank_, peer, skip, tail % size, size),
                  peer);
    }
    tail += skip;
    next_header(h);
  }
  // One checksum per frame: the integrity check covers the transport's own flag too, and the field checks
  // below look only at the fingerprint's fields.
  if (!header_intact(h)) check_data_frame(h, tag, len, comm_tag_, rank_, peer);  // names the corruption
  check_intact_data_frame(h, tag, len, comm_tag_, rank_, peer);
  const bool remote = (h.flags & kFlagRemote) != 0;
  const int lane = (h.reserved1 & kIdleSenderFrame) ? kIdleLane : kBusyLane;
  if (lane == kIdleLane) ++waits_.idle_sender_frames;
  tail += sizeof(FrameHeader);
  // Adapting (adapt_), a large frame is timed from its header on: by attach the read; through the ring our
  // copy out (plus the producer's copy in, timed_frame), or where it streamed the whole time to its end.
  const bool large = len >= options_.single_copy_bytes;
  const bool timed = adapt_ && large && (h.reserved1 & kPairedFrame) == 0;
  // An exchange's frame costs what we waited for it too (kExchangeFrame): through the rings the peer copies
  // each piece in between its other work (an all_gather's own block: meanwhile we wait), by attach nothing
  // waits for the frame (its descriptor went out first).
  const bool exchange = timed && (h.reserved1 & kExchangeFrame) != 0;
  const auto started = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  std::chrono::steady_clock::duration waited{};  // for the producer, within a frame through the ring
  // After a frame of more payload lines than kPrefetchLines (or a descriptor), the next wait prefetches one.
  const size_t lines = remote ? 1 : round_up(len, kAlign) / kAlign;
  peers_[peer].prefetch_lines = static_cast<uint32_t>(lines <= kPrefetchLines ? lines : 1);

  if (remote) {  // header and descriptor were published together
    Descriptor d;
    get(tail, reinterpret_cast<char*>(&d), sizeof(d));
    if (d.length != len) {
      throw Error(ErrorCode::Internal,
                  fmt::format("rank {}: a single-copy descriptor from rank {} is corrupt", rank_, peer), peer);
    }
    const char* mapped = nullptr;
    if (d.region_id != 0) {
      // Registered memory: read it in place. Should the mapping fail (the probe at creation mapped this peer's
      // memory, so it should not), fall back to cross-memory attach where it works, once noting why.
      std::string why;
      mapped = regions_.translate(static_cast<pid_t>(d.pid),
                                  RegionRef{d.region_id, d.region_fd, d.region_base, d.region_bytes}, d.address, len,
                                  &why);
      if (mapped == nullptr && !cma_) {
        throw Error(ErrorCode::SystemError,
                    fmt::format("rank {}: cannot map rank {}'s registered memory: {}", rank_, peer, why), peer);
      }
      if (mapped == nullptr && !region_warned_) {
        region_warned_ = true;
        base::log_warn("rank {}: cannot map rank {}'s registered memory ({}); reading it by cross-memory attach",
                       rank_, peer, why);
      }
    }
    if (mapped != nullptr) {
      ++waits_.mapped_reads;
      on_bytes(mapped, len, size_t{0});
    } else {
      ++waits_.attach_reads;
      on_remote(static_cast<pid_t>(d.pid), d.address, len);
      if (timed) {  // the header's fingerprint matched `tag`'s, whose class it is
        const auto end = std::chrono::steady_clock::now();
        const bool cold = peers_[peer].attach_sources.read(d.address, len, tag.seq);
        timed_frame(peer, lane, path_class(lane, tag), reduces, true, len, warm_bytes(lane, tag),
                    end - (exchange ? wait_started : started), false, cold);
      }
    }
    tail += kDescriptorBytes;
  } else {
    const size_t body = round_up(len, kAlign);
    size_t done = 0;
    while (done < body) {
      // Usually a small frame's body came with its header. Only the last piece skips the wait (which also
      // moves our own queued sends), so a frame streaming through the ring still overlaps with them.
      if (available(body - done) < body - done) {
        const auto w0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        wait_until([&] { return available(1) > 0; }, deadline, peer, "data", &tag);
        if (timed) waited += std::chrono::steady_clock::now() - w0;
      }
      const size_t got = std::min<uint64_t>(available(body - done), body - done);
      const size_t payload = done < len ? std::min(got, len - done) : 0;
      if (payload > 0) {
        for_ring_bytes(data, size, tail, payload,
                       [&](const char* src, size_t n, size_t off) { on_bytes(src, n, done + off); });
      }
      done += got;
      tail += got;
      if (done < body) {
        // Free the space now: the producer may be waiting for it to write the rest of this frame.
        ring.tail.store(tail, std::memory_order_release);
        ring_doorbell(peer);
      }
    }
  }
  if (!remote && large) {
    ++waits_.ring_large_frames;
    // A frame that streamed (we waited for the producer within it) cost what the two copies took side by side:
    // the time from its header to its end. One that was whole in the ring when we came cost both copies.
    if (timed) {
      const auto end = std::chrono::steady_clock::now();
      const auto wall = end - started;
      const bool streamed = waited > std::chrono::steady_clock::duration::zero();
      // An exchange's frame: our copy out without the waits within it, and the time since our wait began.
      timed_frame(peer, lane, path_class(lane, tag), reduces, false, len, warm_bytes(lane, tag),
                  streamed && !exchange ? wall : wall - waited, streamed, false,
                  exchange ? std::optional(end - wait_started) : std::nullopt);
    }
  }
  if (!remote && (h.reserved1 & kTrailerLine)) tail += kAlign;  // the trailer's own line (isend)
  ring.tail.store(tail, std::memory_order_release);
  // This thread is the ring's only consumer: a plain increment, no locked instruction.
  ring.consumed.store(ring.consumed.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  ring_doorbell(peer);
}

void ShmTransport::recv(int peer, const MessageTag& tag, void* dst, size_t len, const base::Deadline& deadline) {
  char* out = static_cast<char*>(dst);
  receive(
      peer, tag, len, deadline, /*reduces=*/false,
      [&](const char* src, size_t n, size_t off) { std::memcpy(out + off, src, n); },
      [&](pid_t pid, uint64_t address, size_t n) {
        if (!remote_read(pid, out, address, n)) remote_read_failed(peer);
      });
}

void ShmTransport::recv_reduce(int peer, const MessageTag& tag, void* dst, const void* local, size_t len,
                               const Reduction& reduction, const base::Deadline& deadline) {
  char* out = static_cast<char*>(dst);
  const char* in = static_cast<const char*>(local);
  receive(
      peer, tag, len, deadline, /*reduces=*/true,
      // Straight from the ring: one pass over the incoming bytes.
      [&](const char* src, size_t n, size_t off) { reduction.apply(out + off, src, in + off, n); },
      // Single copy into a cache-sized staging piece, reduced as each piece arrives.
      [&](pid_t pid, uint64_t address, size_t n) {
        const size_t piece = 64 * 1024;
        for (size_t off = 0; off < n; off += piece) {
          size_t m = std::min(piece, n - off);
          if (!remote_read(pid, staging_.get(), address + off, m)) remote_read_failed(peer);
          reduction.apply(out + off, staging_.get(), in + off, m);
        }
      });
}

// ---------------------------------------------------------------- failures

void ShmTransport::check_peers() {
  check_usable();
  for (int q : local_) {
    if (q == rank_) continue;
    if (peers_[q].segment->control.failed.load(std::memory_order_acquire) || channel_severed(q)) {
      throw_peer_failure(q);
    }
  }
}

void ShmTransport::send_raw(int peer, std::span<const std::byte> bytes, const base::Deadline& deadline) {
  check_usable();
  Peer& p = peers_[peer];
  if (peer_failed(peer) || p.segment->control.closed.load(std::memory_order_acquire)) throw_peer_failure(peer);
  // In stream order: the frames queued before go into the ring first.
  wait_until([&] { return p.queue.empty(); }, deadline, peer, "to take our data", nullptr);
  const int me = peers_[rank_].local;
  Ring& ring = p.segment->ring(me);
  char* data = p.segment->data(me);
  const size_t size = options_.ring_bytes;
  size_t off = 0;
  while (off < bytes.size()) {
    const uint64_t head = p.head;
    const uint64_t space = size - (head - ring.tail.load(std::memory_order_acquire));
    if (space == 0) {
      auto has_room = [&] { return p.head - ring.tail.load(std::memory_order_acquire) < size; };
      wait_until(has_room, deadline, peer, "to take our data", nullptr);
      continue;
    }
    const size_t n = std::min<uint64_t>(space, bytes.size() - off);
    const char* src = reinterpret_cast<const char*>(bytes.data()) + off;
    for_ring_bytes(data, size, head, n, [&](char* dst, size_t len, size_t o) { std::memcpy(dst, src + o, len); });
    p.head = head + n;
    ring.head.store(p.head, std::memory_order_release);
    ring_doorbell(peer);
    off += n;
  }
}

void ShmTransport::sever(int peer) {
  Peer& p = peers_[peer];
  if (p.severed) return;
  p.severed = true;
  p.queue.clear();  // never written: lost with the connection
  self_->ring(p.local).severed.store(1, std::memory_order_release);
  p.segment->ring(peers_[rank_].local).severed.store(1, std::memory_order_release);
  ring_doorbell(peer);
}

void ShmTransport::fail(const Error& error) noexcept {
  if (failed_ || closed_) return;
  failed_.emplace(error);
  if (!self_) return;
  auto& c = self_->control;
  c.fail_code = static_cast<int32_t>(error.code());
  c.fail_culprit = error.peer();
  std::string m = error.message().substr(0, sizeof(c.fail_message) - 1);
  std::memcpy(c.fail_message, m.c_str(), m.size() + 1);
  c.failed.store(1, std::memory_order_release);
  for (int q : local_) {
    if (q != rank_) {
      peers_[q].queue.clear();  // nobody will take them; they must not point into the caller's buffers later
      ring_doorbell(q);
    }
  }
  // Peers that are reading our memory (single copy) finish that read before we return to the caller: a
  // bounded wait for them to notice the failure is not possible without their cooperation, so single-copy
  // frames already handed out stay readable until the buffers' owner frees them.
}

void ShmTransport::abort(const std::string& reason) noexcept {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    abort_reason_ = reason;
  }
  aborted_.store(true, std::memory_order_release);
  if (self_) {
    self_->control.doorbell.fetch_add(1);
    futex(&self_->control.doorbell, FUTEX_WAKE, 1 << 30, nullptr);
  }
}

void ShmTransport::close() noexcept {
  if (closed_ || !self_) return;
  closed_ = true;
  if (!failed_ && !aborted_.load()) {
    try {
      // Single-copy frames point into our memory: they must be consumed before we go.
      flush(base::Deadline::after(std::chrono::seconds(2)));
    } catch (const std::exception& e) {
      base::log_debug("shm close: unflushed sends dropped: {}", e.what());
    }
  }
  self_->control.closed.store(1, std::memory_order_release);
  for (int q : local_) {
    if (q != rank_ && peers_[q].segment) ring_doorbell(q);
  }
}

}  // namespace chorus::transport
