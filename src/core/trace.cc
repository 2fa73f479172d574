#include "core/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "chorus/trace.h"
#include "core/config.h"

namespace chorus::core::trace {

namespace detail {
std::atomic<int> g_state{0};
}  // namespace detail

namespace {

// Past this many events (about 100 bytes each plus their strings) new ones are counted, not kept.
constexpr size_t kMaxEvents = size_t{1} << 21;
// Events formatted per hold of the recorder's mutex while writing, so recording threads are not held up.
constexpr size_t kWriteChunk = 4096;

struct Event {
  int64_t start_us;  // steady clock
  int64_t dur_us;    // < 0: an instant event
  int32_t tid;
  std::string name;
  std::string category;
  std::string args;  // JSON object text, or empty
};

struct ThreadInfo {
  std::string name;  // empty: the default
  bool main = false;
};

// Never destroyed: the exit-time flush and threads still recording during exit may use it.
struct Recorder {
  std::mutex mu;
  std::string spec;                       // CHORUS_TRACE's value; guarded by mu
  int64_t realtime_minus_steady_us = 0;   // guarded by mu
  std::vector<Event> events;              // guarded by mu
  size_t dropped = 0;                     // guarded by mu
  std::map<int32_t, ThreadInfo> threads;  // guarded by mu
  int32_t next_tid = 0;                   // guarded by mu
  bool atexit_registered = false;         // guarded by mu
  // Counts changes (events, names), so that a flush with nothing new is skipped; guarded by mu.
  uint64_t changes = 1;
  uint64_t written_changes = 0;  // `changes` when the file at written_path was last written
  std::string written_path;
  std::atomic<int> rank{-1};
  std::atomic<int> open_communicators{0};
  std::mutex write_mu;  // one writer at a time; taken before mu
};

Recorder& recorder() {
  static Recorder* r = new Recorder;
  return *r;
}

thread_local int32_t t_tid = 0;

int32_t this_thread_tid(Recorder& r) {  // r.mu held
  if (t_tid == 0) {
    t_tid = ++r.next_tid;
    r.threads[t_tid].main = ::syscall(SYS_gettid) == ::getpid();
  }
  return t_tid;
}

int64_t realtime_minus_steady_us() {
  auto steady = now_us();
  auto real = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
  return real - steady;
}

void flush_at_exit() { flush(); }

// r.mu held.
void turn_on(Recorder& r, std::string spec) {
  r.spec = std::move(spec);
  r.realtime_minus_steady_us = realtime_minus_steady_us();
  if (!r.atexit_registered) {
    r.atexit_registered = true;
    std::atexit(flush_at_exit);
  }
  detail::g_state.store(2, std::memory_order_release);
}

void append(Event e) {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.events.size() >= kMaxEvents) {
    if (r.dropped++ == 0) {
      base::log_warn("CHORUS_TRACE: {} events recorded; further events are dropped", kMaxEvents);
    }
    return;
  }
  e.tid = this_thread_tid(r);
  r.events.push_back(std::move(e));
  ++r.changes;
}

std::string path_for(const std::string& spec, int rank) {
  const std::string pid = std::to_string(::getpid());
  if (spec.size() >= 5 && spec.compare(spec.size() - 5, 5, ".json") == 0) {
    std::string out;
    for (size_t i = 0; i < spec.size(); ++i) {
      if (spec[i] == '%' && i + 1 < spec.size() && (spec[i + 1] == 'r' || spec[i + 1] == 'p')) {
        out += spec[i + 1] == 'p' ? pid : rank >= 0 ? std::to_string(rank) : "pid" + pid;
        ++i;
      } else {
        out += spec[i];
      }
    }
    return out;
  }
  auto file = rank >= 0 ? fmt::format("chorus-trace-rank{}.json", rank) : fmt::format("chorus-trace-pid{}.json", pid);
  return (std::filesystem::path(spec) / file).string();
}

std::string quote(std::string_view s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string args_object(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) j = nlohmann::json{{"text", text}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void format_event(std::string& out, const Event& e, int pid, int64_t offset_us) {
  fmt::format_to(std::back_inserter(out), ",\n{{\"name\":{},\"cat\":{},\"ph\":\"{}\",\"ts\":{},", quote(e.name),
                 quote(e.category), e.dur_us < 0 ? "i" : "X", e.start_us + offset_us);
  if (e.dur_us < 0) {
    out += "\"s\":\"t\",";
  } else {
    fmt::format_to(std::back_inserter(out), "\"dur\":{},", e.dur_us);
  }
  fmt::format_to(std::back_inserter(out), "\"pid\":{},\"tid\":{}", pid, e.tid);
  if (!e.args.empty()) {
    out += ",\"args\":";
    out += args_object(e.args);
  }
  out += '}';
}

// Writes to a temporary file beside the target, then renames it, so a reader never sees half a file.
void write_file() {
  auto& r = recorder();
  std::lock_guard<std::mutex> write_lock(r.write_mu);
  int64_t offset_us;
  uint64_t changes;
  size_t n, dropped;
  std::map<int32_t, ThreadInfo> threads;
  const int rank = r.rank.load();
  std::string path;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.spec.empty()) return;
    path = path_for(r.spec, rank);
    // The exit-time flush after an explicit one, or after the last communicator closed, has nothing to add.
    std::error_code ec;
    if (r.changes == r.written_changes && path == r.written_path && std::filesystem::exists(path, ec)) return;
    changes = r.changes;
    // Parents before the spans they contain: by start, then longest first.
    std::stable_sort(r.events.begin(), r.events.end(), [](const Event& a, const Event& b) {
      return a.start_us != b.start_us ? a.start_us < b.start_us : a.dur_us > b.dur_us;
    });
    offset_us = r.realtime_minus_steady_us;
    n = r.events.size();
    dropped = r.dropped;
    threads = r.threads;
  }
  const int pid = rank >= 0 ? rank : static_cast<int>(::getpid());
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const std::string tmp = fmt::format("{}.tmp{}", path, ::getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    base::log_warn("CHORUS_TRACE: cannot write the trace {}: {} (set CHORUS_TRACE to a writable directory)", path,
                   std::strerror(errno));
    return;
  }
  std::string out;
  out += "{\"traceEvents\":[\n";
  fmt::format_to(
      std::back_inserter(out),
      "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{\"name\":{1}}}}},\n"
      "{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{\"sort_index\":{0}}}}}",
      pid, quote(rank >= 0 ? fmt::format("rank {}", rank) : fmt::format("pid {}", pid)));
  for (const auto& [tid, info] : threads) {
    std::string name = !info.name.empty() ? info.name : info.main ? "caller" : fmt::format("thread {}", tid);
    fmt::format_to(std::back_inserter(out),
                   ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":{1},\"args\":{{\"name\":{2}}}}}"
                   ",\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":{1},"
                   "\"args\":{{\"sort_index\":{3}}}}}",
                   pid, tid, quote(name), info.main ? 0 : tid);
  }
  bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  for (size_t i = 0; i < n && ok; i += kWriteChunk) {
    out.clear();
    {
      std::lock_guard<std::mutex> lock(r.mu);
      for (size_t j = i; j < std::min(n, i + kWriteChunk); ++j) format_event(out, r.events[j], pid, offset_us);
    }
    ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  }
  out = fmt::format(
      "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{{\"rank\":{},\"clock\":\"realtime us\","
      "\"realtime_minus_steady_us\":{},\"pid\":{},\"dropped_events\":{}}}}}\n",
      rank, offset_us, ::getpid(), dropped);
  ok = ok && std::fwrite(out.data(), 1, out.size(), f) == out.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    base::log_warn("CHORUS_TRACE: writing the trace {} failed: {}", path, std::strerror(errno));
    std::remove(tmp.c_str());
    return;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    base::log_warn("CHORUS_TRACE: cannot rename {} to {}: {}", tmp, path, std::strerror(errno));
    std::remove(tmp.c_str());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.written_changes = changes;
    r.written_path = path;
  }
  base::log_info("CHORUS_TRACE: wrote {} events to {}", n, path);
}

}  // namespace

namespace detail {
bool decide_enabled() noexcept {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  int s = g_state.load(std::memory_order_acquire);
  if (s != 0) return s == 2;
  std::optional<std::string> spec;
  try {
    spec = env_string("CHORUS_TRACE");
  } catch (...) {
  }
  if (spec) {
    turn_on(r, std::move(*spec));
    return true;
  }
  g_state.store(1, std::memory_order_release);
  return false;
}
}  // namespace detail

void set_rank(int rank) noexcept {
  int unset = -1;
  recorder().rank.compare_exchange_strong(unset, rank);
}

void set_thread_name(std::string name) {
  if (!enabled()) return;
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.threads[this_thread_tid(r)].name = std::move(name);
  ++r.changes;
}

void record_span(std::string_view name, std::string_view category, int64_t start_us, int64_t end_us,
                 std::string args_json) {
  if (!enabled()) return;
  append(Event{start_us, std::max<int64_t>(0, end_us - start_us), 0, std::string(name), std::string(category),
               std::move(args_json)});
}

void record_instant(std::string_view name, std::string_view category, std::string args_json) {
  if (!enabled()) return;
  append(Event{now_us(), -1, 0, std::string(name), std::string(category), std::move(args_json)});
}

void communicator_opened() noexcept { recorder().open_communicators.fetch_add(1); }

void communicator_closed() noexcept {
  if (recorder().open_communicators.fetch_sub(1) == 1) flush();
}

void flush() noexcept {
  if (!enabled()) return;
  try {
    write_file();
  } catch (const std::exception& e) {
    base::log_warn("CHORUS_TRACE: writing the trace failed: {}", e.what());
  } catch (...) {
    base::log_warn("CHORUS_TRACE: writing the trace failed");
  }
}

std::string output_path() {
  if (!enabled()) return {};
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  return path_for(r.spec, r.rank.load());
}

void set_output_for_testing(std::string path) {
  auto& r = recorder();
  std::lock_guard<std::mutex> write_lock(r.write_mu);
  std::lock_guard<std::mutex> lock(r.mu);
  r.events.clear();
  r.dropped = 0;
  ++r.changes;
  r.written_path.clear();
  r.rank.store(-1);
  r.open_communicators.store(0);
  if (path.empty()) {
    r.spec.clear();
    detail::g_state.store(1, std::memory_order_release);
  } else {
    turn_on(r, std::move(path));
  }
}

size_t event_count_for_testing() {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.events.size();
}

}  // namespace chorus::core::trace

namespace chorus {

bool trace_enabled() noexcept { return core::trace::enabled(); }

TraceScope::TraceScope(std::string_view name, std::string_view category) {
  if (!core::trace::enabled()) return;
  name_ = name;
  category_ = category;
  start_us_ = core::trace::now_us();
}

TraceScope::~TraceScope() {
  if (start_us_ < 0) return;
  try {
    core::trace::record_span(name_, category_, start_us_, core::trace::now_us());
  } catch (...) {  // out of memory: lose the span rather than terminate
  }
}

void trace_instant(std::string_view name, std::string_view category) {
  if (!core::trace::enabled()) return;
  core::trace::record_instant(name, category);
}

void trace_flush() { core::trace::flush(); }

}  // namespace chorus
