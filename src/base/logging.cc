#include "base/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace chorus::base {
namespace detail {
std::atomic<int> g_log_level{static_cast<int>(LogLevel::Warn)};
}  // namespace detail

namespace {

std::mutex g_out_mu;
FILE* g_out = nullptr;  // guarded by g_out_mu; nullptr means stderr
thread_local const std::string* t_tag = nullptr;

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

std::string expand_path(std::string_view pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') { out += host_name(); ++i; continue; }
      if (c == 'p') { out += std::to_string(getpid()); ++i; continue; }
    }
    out += pattern[i];
  }
  return out;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::Error: return "ERROR";
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Debug: return "DEBUG";
    case LogLevel::Trace: return "TRACE";
    default: return "";
  }
}

struct EnvInit {
  EnvInit() { init_logging_from_env(); }
} g_env_init;

}  // namespace

LogLevel parse_log_level(std::string_view t, LogLevel fallback) {
  auto eq = [&](std::string_view w) {
    if (t.size() != w.size()) return false;
    for (size_t i = 0; i < t.size(); ++i)
      if (std::toupper(static_cast<unsigned char>(t[i])) != w[i]) return false;
    return true;
  };
  if (eq("OFF") || eq("NONE") || eq("0")) return LogLevel::Off;
  if (eq("ERROR")) return LogLevel::Error;
  if (eq("WARN") || eq("WARNING") || eq("VERSION")) return LogLevel::Warn;
  if (eq("INFO")) return LogLevel::Info;
  if (eq("DEBUG")) return LogLevel::Debug;
  if (eq("TRACE")) return LogLevel::Trace;
  return fallback;
}

void init_logging_from_env() {
  const char* level = std::getenv("CHORUS_DEBUG");
  set_log_level(level ? parse_log_level(level, LogLevel::Warn) : LogLevel::Warn);
  const char* file = std::getenv("CHORUS_DEBUG_FILE");
  std::lock_guard<std::mutex> lock(g_out_mu);
  if (g_out) {
    std::fclose(g_out);
    g_out = nullptr;
  }
  if (file && *file) {
    std::string path = expand_path(file);
    g_out = std::fopen(path.c_str(), "a");
    if (!g_out) std::fprintf(stderr, "chorus: cannot open CHORUS_DEBUG_FILE %s; logging to stderr\n", path.c_str());
  }
}

void set_log_level(LogLevel level) { detail::g_log_level.store(static_cast<int>(level), std::memory_order_relaxed); }

LogTag::LogTag(const std::string* tag) : previous_(t_tag) { t_tag = tag; }
LogTag::~LogTag() { t_tag = previous_; }

void detail::write_log(LogLevel level, std::string_view message) {
  static const std::string host = host_name();
  std::string line = fmt::format("{}:{}:{} [{}] CHORUS {} {}\n", host, getpid(), static_cast<long>(syscall(SYS_gettid)),
                                 t_tag ? *t_tag : std::string("-"), level_name(level), message);
  std::lock_guard<std::mutex> lock(g_out_mu);
  FILE* out = g_out ? g_out : stderr;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace chorus::base
