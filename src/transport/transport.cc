#include "transport/transport.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace chorus::transport {

void check_data_frame(const FrameHeader& h, const MessageTag& expected, size_t expected_len, uint64_t comm_tag,
                      int me, int peer) {
  if (!header_intact(h)) {
    throw Error(ErrorCode::Internal,
                fmt::format("rank {} received a corrupted frame header from rank {} (bad magic or checksum) while "
                            "waiting for {}",
                            me, peer, describe(expected)),
                peer);
  }
  check_intact_data_frame(h, expected, expected_len, comm_tag, me, peer);
}

void throw_frame_mismatch(const FrameHeader& h, const MessageTag& expected, size_t expected_len, uint64_t comm_tag,
                          int me, int peer) {
  if (h.comm_tag != comm_tag) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("rank {} received a frame from rank {} that belongs to another communicator or job "
                            "(tag {:016x}, expected {:016x})",
                            me, peer, h.comm_tag, comm_tag),
                peer);
  }
  MessageTag got = tag_of(h);
  std::string hint;
  if (got.op == expected.op && got.seq == expected.seq && got.count == expected.count &&
      got.algo != expected.algo) {
    hint =
        " (the ranks chose different algorithms: is CHORUS_ALGO set the same everywhere, and do the calls "
        "pass the same CallOptions algorithm and registered flag, with registered calls in place on every rank "
        "or on none?)";
  } else if (got.seq != expected.seq) {
    hint = " (the ranks are at different calls: every rank must call the same collectives in the same order)";
  } else if (got.op == expected.op && got.count == expected.count && h.length != expected_len &&
             same_operation(h, expected)) {
    hint = " (same operation, different slicing: is CHORUS_SLICE_BYTES set the same everywhere?)";
  }
  throw Error(ErrorCode::Mismatch,
              fmt::format("collective mismatch: rank {} is in {} expecting {} bytes from rank {}, but rank {} sent "
                          "{} with {} bytes{}",
                          me, describe(expected), expected_len, peer, peer, describe(got), h.length, hint),
              peer);
}

Error peer_closed_error(int me, int peer, bool said_goodbye, const std::string& detail) {
  if (said_goodbye) {
    return Error(ErrorCode::PeerLost,
                 fmt::format("rank {} closed its communicator while rank {} still needed data from it{}", peer, me,
                             detail.empty() ? "" : " (" + detail + ")"),
                 peer);
  }
  return Error(ErrorCode::PeerLost,
               fmt::format("lost rank {}: its connection closed without a goodbye (the process exited, crashed or "
                           "was killed){}",
                           peer, detail.empty() ? "" : "; " + detail),
               peer);
}

void Transport::send_raw(int peer, std::span<const std::byte> bytes, const base::Deadline& deadline) {
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("raw sends (fault injection: corrupt, foreign, truncate, oversize) are not supported by "
                          "the {} transport",
                          name()));
}

void Transport::sever(int peer) {
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("severing a connection (fault injection: reset, truncate) is not supported by the {} "
                          "transport",
                          name()));
}

bool more_ranks_than_cores(int ranks) noexcept {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return ranks > 0 && static_cast<unsigned>(ranks) > cores;
}

bool cores_contended() noexcept {
  // Opened once and read with pread at offset 0, which makes the kernel format the file afresh.
  static const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  static const long online = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  if (fd < 0) return false;
  char buf[128];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "0.52 0.58 0.59 3/467 12345": the fourth field's numerator.
  const char* p = buf;
  for (int field = 0; field < 3 && p != nullptr; ++field) {
    p = std::strchr(p, ' ');
    if (p != nullptr) ++p;
  }
  if (p == nullptr) return false;
  long running = 0;
  if (std::from_chars(p, buf + n, running).ec != std::errc()) return false;
  return running > online;
}

namespace {
thread_local bool t_background = false;
}  // namespace

void set_background_thread(bool yes) noexcept { t_background = yes; }
bool on_background_thread() noexcept { return t_background; }

}  // namespace chorus::transport
