// The two locks of a communicator's calls, in one word: API (one thread at a time uses the communicator) and
// EXEC (one thread at a time executes operations). See docs/design.md, "Threads".
//
// A synchronous call takes both with one locked instruction and gives both back with a plain store, where two
// std::mutex would cost four locked instructions per call; on the small-message path each of them waits for
// the cache lines the call's sends just wrote to drain. Waiting for EXEC (the progress thread behind a
// synchronous call, Communicator::abort, traffic()) polls: it is rare, and a lock released by a plain store
// cannot wake a sleeper.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace chorus::core {

class CallGate {
 public:
  static constexpr uint32_t kApi = 1, kExec = 2;

  // API alone (an asynchronous call, a group, recovery). False when another thread holds it.
  bool try_lock_api() noexcept { return (state_.fetch_or(kApi, std::memory_order_acquire) & kApi) == 0; }
  void unlock_api() noexcept { state_.fetch_and(~kApi, std::memory_order_release); }

  // Both, as a synchronous call takes them. False (and nothing held) when another thread holds API; otherwise
  // API is held, and *exec says whether EXEC came with it (not when the progress thread or abort has it).
  bool try_lock_both(bool* exec) noexcept {
    const uint32_t was = state_.fetch_or(kApi | kExec, std::memory_order_acquire);
    if (was & kApi) {
      if (!(was & kExec)) unlock_exec();  // the EXEC bit this call set, though it may not use it
      return false;
    }
    *exec = (was & kExec) == 0;
    return true;
  }
  // Gives both back. Only for a holder of both: then no other thread can change the word (a try on a held bit
  // leaves it as it is), so a plain store does it.
  void unlock_both() noexcept { state_.store(0, std::memory_order_release); }

  bool try_lock_exec() noexcept { return (state_.fetch_or(kExec, std::memory_order_acquire) & kExec) == 0; }
  void lock_exec() noexcept {
    for (int tries = 0; !try_lock_exec(); ++tries) {
      if (tries < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
  void unlock_exec() noexcept { state_.fetch_and(~kExec, std::memory_order_release); }

 private:
  std::atomic<uint32_t> state_{0};
};

// Lockable views of the gate, for std::lock_guard and std::unique_lock.
class ApiMutex {
 public:
  explicit ApiMutex(CallGate& g) : g_(g) {}
  bool try_lock() noexcept { return g_.try_lock_api(); }
  void unlock() noexcept { g_.unlock_api(); }

 private:
  CallGate& g_;
};

class ExecMutex {
 public:
  explicit ExecMutex(CallGate& g) : g_(g) {}
  void lock() noexcept { g_.lock_exec(); }
  bool try_lock() noexcept { return g_.try_lock_exec(); }
  void unlock() noexcept { g_.unlock_exec(); }

 private:
  CallGate& g_;
};

}  // namespace chorus::core
