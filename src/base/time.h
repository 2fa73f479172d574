// Monotonic deadlines. Every wait in Chorus is bounded by one.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace chorus::base {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  Deadline() : at_(Clock::time_point::max()) {}
  explicit Deadline(Clock::time_point at) : at_(at) {}
  static Deadline after(std::chrono::milliseconds d) { return after(d, Clock::now()); }
  // `now` read by the caller, who needs the time anyway (one clock read instead of two on a hot path).
  static Deadline after(std::chrono::milliseconds d, Clock::time_point now) {
    // Saturate instead of overflowing for huge timeouts.
    if (d > std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now)) return Deadline();
    return Deadline(now + d);
  }
  // `d` from the first time anything looks at the deadline (expired, remaining, poll_timeout_ms, at), not from
  // now. Every operation carries one, but a small call that never waits long never looks at it, and a clock
  // read costs 30 to 40 ns in a VM (the hypervisor's clock page), a tenth of a small shm broadcast. A wait
  // looks at it once it stops spinning, so what runs before that (at most one spin phase of each wait, plus
  // work that does not wait) is not counted against the timeout. One thread uses a lazy deadline; a copy made
  // before its first look starts its own clock.
  static Deadline lazy_after(std::chrono::milliseconds d) {
    Deadline x;
    x.pending_ = d;
    return x;
  }
  static Deadline never() { return Deadline(); }

  Clock::time_point at() const {
    start();
    return at_;
  }
  bool expired() const { return Clock::now() >= at(); }
  std::chrono::milliseconds remaining() const {
    const auto at = this->at();
    auto now = Clock::now();
    if (now >= at) return std::chrono::milliseconds(0);
    if (at == Clock::time_point::max()) return std::chrono::milliseconds::max();
    return std::chrono::duration_cast<std::chrono::milliseconds>(at - now);
  }
  // A timeout for poll/epoll_wait, in ms, rounded up, capped at cap_ms (never -1).
  int poll_timeout_ms(int cap_ms) const {
    const auto at = this->at();
    auto now = Clock::now();
    if (now >= at) return 0;
    if (at == Clock::time_point::max()) return cap_ms;
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(at - now).count();
    int64_t ms = (us + 999) / 1000;
    return static_cast<int>(std::min<int64_t>(ms, cap_ms));
  }

 private:
  void start() const {
    if (pending_.count() >= 0) {
      at_ = after(pending_, Clock::now()).at_;
      pending_ = std::chrono::milliseconds(-1);
    }
  }

  mutable Clock::time_point at_;
  mutable std::chrono::milliseconds pending_{-1};  // a lazy deadline's duration until its first look
};

// The monotonic clock (Clock's epoch, CLOCK_MONOTONIC) at the kernel tick's resolution, for a few ns instead
// of Clock::now()'s 30 to 40 in a VM. It lags the precise clock by up to a tick, and by more just after the CPU
// was idle (a tickless kernel updates it late), so it is only for stamps where a few ms do not matter: the
// start of an operation for the stall check. Falls back to Clock::now() where the coarse clock is missing.
inline Clock::time_point coarse_now() {
#ifdef CLOCK_MONOTONIC_COARSE
  timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0) {
    return Clock::time_point(
        std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
  }
#endif
  return Clock::now();
}

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace chorus::base
