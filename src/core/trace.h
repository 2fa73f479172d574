// The timeline recorder behind CHORUS_TRACE (see include/chorus/trace.h and docs/design.md, "Trace").
//
// One recorder per process. Events are compact structs appended to one mutex-protected vector (an event every
// few microseconds at most, so the lock is uncontended in practice); JSON is only formatted when the file is
// written. Every function may be called from any thread. With tracing off, callers test enabled() first and
// do nothing else; the recording functions also return at once when it is off.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus::core::trace {

namespace detail {
// 0: not yet decided, 1: off, 2: on. Decided once, from CHORUS_TRACE, at the first enabled() call.
extern std::atomic<int> g_state;
bool decide_enabled() noexcept;
}  // namespace detail

// True when tracing is on. One load and a predictable branch once decided.
inline bool enabled() noexcept {
  int s = detail::g_state.load(std::memory_order_acquire);
  if (s == 0) [[unlikely]]
    return detail::decide_enabled();
  return s == 2;
}

// Steady-clock microseconds (CLOCK_MONOTONIC: one epoch for every process on the host). The file converts
// them to realtime microseconds with the offset measured when tracing started, so ranks line up.
inline int64_t now_us() noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The rank used for the file name and as the trace's pid. The first call in the process wins.
void set_rank(int rank) noexcept;

// Names the calling thread in the trace. Unnamed threads are "thread <n>"; the process's main thread is
// "caller". The last name given wins.
void set_thread_name(std::string name);

// A complete span [start_us, end_us] (now_us() values) on the calling thread. args_json is the text of a
// JSON object (for example {"bytes":4096}) or empty; anything that is not an object is stored as a string.
void record_span(std::string_view name, std::string_view category, int64_t start_us, int64_t end_us,
                 std::string args_json = {});

// A point event now on the calling thread.
void record_instant(std::string_view name, std::string_view category, std::string args_json = {});

// Communicator lifetime: when the last open communicator closes, the file is written. Also written at exit
// (registered when tracing turns on) and by flush().
void communicator_opened() noexcept;
void communicator_closed() noexcept;

// Writes the file with everything recorded so far (replacing it). Failures are logged as warnings, never
// thrown. No-op when tracing is off.
void flush() noexcept;

// The file flush() writes, given the rank set so far ("" when tracing is off).
std::string output_path();

// Tests: turns tracing on with `path` as if CHORUS_TRACE=path (off when empty), and forgets every event,
// the rank and the open-communicator count. Thread names are kept.
void set_output_for_testing(std::string path);
size_t event_count_for_testing();

}  // namespace chorus::core::trace
