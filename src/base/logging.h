// Leveled logging, configured by CHORUS_DEBUG (ERROR, WARN (default), INFO, DEBUG, TRACE; OFF or NONE to
// silence) and CHORUS_DEBUG_FILE (a path; %h is replaced by the host name and %p by the pid).
//
// A disabled level costs one relaxed atomic load and a compare: the message is not formatted.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace chorus::base {

enum class LogLevel : int { Off = 0, Error = 1, Warn = 2, Info = 3, Debug = 4, Trace = 5 };

namespace detail {
extern std::atomic<int> g_log_level;
void write_log(LogLevel level, std::string_view message);
}  // namespace detail

// Reads CHORUS_DEBUG and CHORUS_DEBUG_FILE again (done once automatically at load).
void init_logging_from_env();
void set_log_level(LogLevel level);
LogLevel parse_log_level(std::string_view text, LogLevel fallback);

inline bool log_enabled(LogLevel level) {
  return static_cast<int>(level) <= detail::g_log_level.load(std::memory_order_relaxed);
}

// A per-thread tag printed in every log line, e.g. "world r3/8", set while a communicator works on this
// thread. It stores a pointer: the string must outlive the scope. Cheap enough for every operation.
class LogTag {
 public:
  explicit LogTag(const std::string* tag);
  ~LogTag();
  LogTag(const LogTag&) = delete;
  LogTag& operator=(const LogTag&) = delete;

 private:
  const std::string* previous_;
};

template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (!log_enabled(level)) return;
  detail::write_log(level, fmt::format(format, std::forward<Args>(args)...));
}
template <class... Args>
void log_error(fmt::format_string<Args...> f, Args&&... a) { log(LogLevel::Error, f, std::forward<Args>(a)...); }
template <class... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... a) { log(LogLevel::Warn, f, std::forward<Args>(a)...); }
template <class... Args>
void log_info(fmt::format_string<Args...> f, Args&&... a) { log(LogLevel::Info, f, std::forward<Args>(a)...); }
template <class... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... a) { log(LogLevel::Debug, f, std::forward<Args>(a)...); }
template <class... Args>
void log_trace(fmt::format_string<Args...> f, Args&&... a) { log(LogLevel::Trace, f, std::forward<Args>(a)...); }

}  // namespace chorus::base
