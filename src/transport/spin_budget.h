// How long a waiting receive polls before it sleeps, adapted to the waits it has seen.
//
// Polling costs the core; sleeping costs a wake-up, which on a virtual machine whose idle CPUs halt at once (the
// guest's haltpoll governor with guest_halt_poll_ns=0, as on the test host) can be slow: in the 2-rank tcp
// all_gather rows of 8 B-1 KiB that took 20-70 us per call instead of 7 (a trace, 2026-12-06), every other
// call of each rank took 134-160 us, the ranks in turn (360-390 us in the second size of full-range rows, in
// another hour). Two ranks that exchange small messages lock into that
// chain: one sleeps and wakes late, so the other's poll (64 polls, about 40 us) runs out and it sleeps too,
// call after call, for a whole benchmark row. A fixed poll count either leaves the chain alone (too short) or
// burns a core on every long wait (too long). So, as the kernel's haltpoll governor does for
// idle CPUs: a wait that had to sleep but got its data within `max` of its start would have been spared the
// sleep by a longer poll, so the budget doubles (up to `max`); a wait that slept far longer than `max` (more
// than kShrinkFactor times it) was for a peer that was busy, where polling only burns the core, so the budget
// halves (down to `min`). Waits in between leave it as it is.
//
// Where other processes want the same cores, a wait ends after the budget plus the time the peer needs to get
// a core, which looks like a short sleep, and a budget grown on it only delays the peer (3-6 times slower
// ping-pongs beside one busy loop, docs/performance.md). So the caller also says whether the host's CPUs were
// contended when the wait went to sleep (transport::cores_contended()), and such a wait counts as a long one.
#pragma once

#include <algorithm>
#include <chrono>

#include "base/time.h"

namespace chorus::transport {

class SpinBudget {
 public:
  static constexpr int kShrinkFactor = 4;

  SpinBudget(std::chrono::nanoseconds min, std::chrono::nanoseconds max)
      : min_(min), max_(std::max(min, max)), budget_(min) {}

  std::chrono::nanoseconds budget() const { return budget_; }
  std::chrono::nanoseconds min() const { return min_; }
  std::chrono::nanoseconds max() const { return max_; }

  // After a wait that polled for the whole budget and then slept: `waited` from its first empty poll until its
  // data came; `contended`: when it went to sleep, more tasks wanted the host's CPUs than it has
  // (cores_contended(), transport.h), so its peer may have been waiting for a core, and polling kept one from it.
  // Such a wait counts as a long one, however soon its data came.
  void after_sleep(std::chrono::nanoseconds waited, bool contended = false) {
    if (contended || waited > max_ * kShrinkFactor) {
      budget_ = std::max(min_, budget_ / 2);
    } else if (waited <= max_) {
      budget_ = std::min(max_, budget_ * 2);
    }
  }

 private:
  std::chrono::nanoseconds min_;
  std::chrono::nanoseconds max_;
  std::chrono::nanoseconds budget_;
};

// One wait that polls for a SpinBudget's time and then sleeps, as tcp's receives and sends wait: poll() at each
// poll that found nothing says whether to poll again (false: sleep now; the first such answer asks
// `contended` once), and done() when what it waited for came teaches the budget how long a wait that slept took
// and starts the next wait afresh.
class TimedWait {
 public:
  TimedWait(SpinBudget& budget, bool (*contended)() noexcept) : budget_(budget), contended_fn_(contended) {}
  bool poll() {
    const auto now = base::Clock::now();
    if (!waiting_) {
      waiting_ = true;
      start_ = now;
    }
    ++polls_;
    const bool more = !slept_ && now - start_ < budget_.budget();
    if (!more && !slept_) {
      slept_ = true;
      contended_ = contended_fn_();
    }
    return more;
  }
  void done() {
    if (slept_) budget_.after_sleep(base::Clock::now() - start_, contended_);
    waiting_ = slept_ = false;
    polls_ = 0;
  }
  // Polls of this wait so far.
  uint32_t polls() const { return polls_; }

 private:
  SpinBudget& budget_;
  bool (*contended_fn_)() noexcept;
  bool waiting_ = false, slept_ = false, contended_ = false;
  uint32_t polls_ = 0;
  base::Clock::time_point start_{};
};

}  // namespace chorus::transport
