// Timelines. With CHORUS_TRACE=<directory> set, every operation of every communicator in this process is
// recorded (queued, started, finished, on the thread that ran it, with its bytes and algorithm), together
// with the spans the application marks with trace_scope(). Each process writes
// <directory>/chorus-trace-rank<R>.json in the Chrome trace event format (open it in https://ui.perfetto.dev
// or chrome://tracing; scripts/plot-trace.py draws a PNG) when its last communicator is destroyed, at exit,
// or at trace_flush(). R is the rank of the first communicator created in the process (with none, the file is
// chorus-trace-pid<P>.json). A CHORUS_TRACE value ending in .json names the file itself; %r in it stands for R.
// Timestamps are realtime microseconds, so the files of ranks on one host line up.
//
// With CHORUS_TRACE unset, recording costs one predictable branch per operation and per scope.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "chorus/export.h"

namespace chorus {

// True when CHORUS_TRACE is set (read once).
CHORUS_API bool trace_enabled() noexcept;

// Records the span from construction to destruction on the calling thread, for example a layer's
// backward compute:  { chorus::TraceScope s("backward layer 7"); compute(); }
class CHORUS_API TraceScope {
 public:
  explicit TraceScope(std::string_view name, std::string_view category = "compute");
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  int64_t start_us_ = -1;  // -1: tracing off
  std::string name_;
  std::string category_;
};

// The same as a TraceScope, as a function: `auto s = chorus::trace_scope("backward layer 12");`
[[nodiscard]] inline TraceScope trace_scope(std::string_view name, std::string_view category = "compute") {
  return TraceScope(name, category);
}

// Records an instant (a marker at this moment) on the calling thread. No-op when tracing is off.
CHORUS_API void trace_instant(std::string_view name, std::string_view category = "marker");

// Writes the trace file now (it is rewritten with everything recorded so far). No-op when tracing is off.
CHORUS_API void trace_flush();

}  // namespace chorus
