// Monotonic deadlines. Every wait in Chorus is bounded by one.
#pragma once

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
  static Deadline never() { return Deadline(); }

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  std::chrono::milliseconds remaining() const {
    auto now = Clock::now();
    if (now >= at_) return std::chrono::milliseconds(0);
    if (at_ == Clock::time_point::max()) return std::chrono::milliseconds::max();
    return std::chrono::duration_cast<std::chrono::milliseconds>(at_ - now);
  }
  // A timeout for poll/epoll_wait, in ms, rounded up, capped at cap_ms (never -1).
  int poll_timeout_ms(int cap_ms) const {
    auto now = Clock::now();
    if (now >= at_) return 0;
    if (at_ == Clock::time_point::max()) return cap_ms;
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(at_ - now).count();
    int64_t ms = (us + 999) / 1000;
    return static_cast<int>(std::min<int64_t>(ms, cap_ms));
  }

 private:
  Clock::time_point at_;
};

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace chorus::base
