// chorus-run: starts the local ranks of a Chorus job, hosts their rendezvous store, relays their output
// line by line behind a "[rank] " prefix, and stops the whole job as soon as one rank fails.
//
//   chorus-run -n N [options] [--] prog [args...]
//
// One thread does everything: a poll() loop over every rank's stdout and stderr pipes and a signalfd that
// carries SIGCHLD (a rank ended) and SIGINT/SIGTERM/SIGHUP (forwarded to the ranks). Each rank runs in its
// own process group, so stopping a rank also stops whatever it started (a shell's children, for instance).
#include <chorus/chorus.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kUsageError = 2;
constexpr int kLauncherError = 1;
constexpr int kTimedOutStatus = 124;    // as timeout(1)
constexpr int kExecFailedStatus = 127;  // as a shell
// A line longer than this is forwarded in pieces, each with its own prefix, so one rank cannot make the
// launcher buffer without bound.
constexpr size_t kMaxLineBytes = 64 * 1024;
// After SIGKILL, how long to wait for the last output before giving up on it.
constexpr milliseconds kFinalDrain{200};

// The variables chorus-run sets for every rank; -x may not override them.
constexpr const char* kLauncherVariables[] = {"CHORUS_RANK",       "CHORUS_WORLD_SIZE",
                                              "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_WORLD_SIZE",
                                              "CHORUS_STORE_ADDR", "CHORUS_STORE_HOSTED"};

// ---- small helpers ----

// Writes all of data to fd, waiting while a non-blocking fd is full. Returns false if the reader is gone.
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else {
      return false;
    }
  }
  return true;
}

template <typename... Args>
void note(fmt::format_string<Args...> format, Args&&... args) {
  write_all(STDERR_FILENO, "chorus-run: " + fmt::format(format, std::forward<Args>(args)...) + "\n");
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : fmt::format("signal {}", sig);
}

// "exited with status 3", "was killed by signal 9 (SIGKILL)".
std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({}){}", WTERMSIG(status), signal_name(WTERMSIG(status)),
                       WCOREDUMP(status) ? " and dumped core" : "");
  }
  return fmt::format("ended with wait status {:#x}", status);
}

// The exit code that reports a rank's failure as the launcher's own: its status, or 128 + signal.
int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string plural(size_t n, std::string_view word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

// "host:port" with IPv6 literals bracketed.
std::string format_address(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

// Parses "host:port" or "[v6]:port" with a port in 1..65535; nullopt if malformed.
std::optional<std::pair<std::string, uint16_t>> parse_address(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  std::string host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return std::nullopt;
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return std::nullopt;  // an IPv6 literal needs brackets
  }
  std::string port_text = text.substr(colon + 1);
  if (port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  int port = std::stoi(port_text);
  if (port < 1 || port > 65535) return std::nullopt;
  return std::make_pair(host, static_cast<uint16_t>(port));
}

bool valid_variable_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// ---- options ----

// CLI11's Range validators print the whole range of a double; these say what is wanted.
CLI::Validator at_least(double min, std::string name) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        char* end = nullptr;
        double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "";  // not a number: the conversion reports it
        return value >= min ? "" : fmt::format("must be at least {:g}, not {}", min, text);
      },
      name);
}

struct Options {
  int nranks = 0;
  int world_size = 0;  // 0: nranks
  int rank_offset = 0;
  std::string store_host = "127.0.0.1";
  uint16_t store_port = 0;
  std::string store_addr;        // join this store instead of hosting one
  std::vector<std::string> env;  // KEY=VALUE for every rank
  bool prefix = true;
  double timeout_s = 0;  // 0: none
  int64_t grace_ms = 1000;
  double store_linger_s = 300;  // how long a hosted store waits for other hosts' ranks after ours ended
  std::string bind = "none";    // "core": each local rank on one CPU of the launcher's own (--bind)
  std::vector<std::string> command;
};

// Parses and validates the command line. Returns the exit code to leave with, or nullopt to run the job.
std::optional<int> parse_options(int argc, char** argv, Options& o) {
  CLI::App app{
      "Starts ranks of a Chorus job on this host and relays their output.\n"
      "  chorus-run -n N [options] [--] prog [args...]\n"
      "Everything from the first positional argument (or after --) is the program and its own arguments.",
      "chorus-run"};
  app.prefix_command();
  app.add_option("-n,--np", o.nranks, "Number of ranks to start on this host")
      ->required()
      ->check(at_least(1, "POSITIVE"));
  app.add_option("--world-size", o.world_size, "Ranks in the whole job, over all hosts (default: -n)")
      ->check(at_least(1, "POSITIVE"));
  app.add_option("--rank-offset", o.rank_offset, "Global rank of this host's first rank (needs --store-addr if > 0)")
      ->check(at_least(0, "NONNEGATIVE"))
      ->capture_default_str();
  auto* host_opt =
      app.add_option("--store-host", o.store_host, "Address the hosted store binds")->capture_default_str();
  auto* port_opt = app.add_option("--store-port", o.store_port, "Port of the hosted store (0: pick a free one)")
                       ->capture_default_str();
  app.add_option("--store-addr", o.store_addr, "Join the store at HOST:PORT instead of hosting one")
      ->type_name("HOST:PORT")
      ->excludes(host_opt)
      ->excludes(port_opt);
  app.add_option("-x,--env", o.env, "Add KEY=VALUE to every rank's environment (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  bool no_prefix = false;
  app.add_flag("--no-prefix", no_prefix, "Do not prefix output lines with \"[rank] \"");
  app.add_option("--timeout", o.timeout_s, "Stop the whole job after this many seconds and fail")
      ->type_name("SECONDS")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            double value = std::strtod(text.c_str(), &end);
            return end != text.c_str() && *end == '\0' && !(value > 0) ? "must be greater than 0" : "";
          },
          "POSITIVE"));
  app.add_option("--grace-ms", o.grace_ms, "Milliseconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(at_least(0, "NONNEGATIVE"))
      ->capture_default_str();
  app.add_option("--bind", o.bind,
                 "none: the ranks run wherever the scheduler puts them; core: local rank i runs on the i-th of "
                 "the CPUs chorus-run may use (wrapping around when there are more ranks), so that no two share "
                 "a CPU while there are enough (README: what it does beside other busy processes)")
      ->check(CLI::IsMember({"none", "core"}))
      ->capture_default_str();
  app.add_option("--store-linger", o.store_linger_s,
                 "With other hosts in the job: after this host's ranks ended, keep the hosted store up until the "
                 "other hosts' ranks have disconnected from it, for at most this many seconds")
      ->type_name("SECONDS")
      ->check(at_least(0, "NONNEGATIVE"))
      ->capture_default_str();
  app.footer(
      "Each rank gets CHORUS_RANK, CHORUS_WORLD_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_WORLD_SIZE,\n"
      "CHORUS_STORE_ADDR and CHORUS_STORE_HOSTED=1, and CHORUS_AUTH_TOKEN (a fresh random secret that\n"
      "authenticates every connection) unless it is set already or other hosts join the job.\n"
      "If a rank fails, the others get SIGTERM, then SIGKILL\n"
      "after --grace-ms, and chorus-run exits with the failed rank's status (128 + signal if it was killed).\n"
      "Exit codes of chorus-run itself: 2 bad usage, 124 --timeout, 127 program cannot be executed,\n"
      "128 + signal when stopped by SIGINT/SIGTERM/SIGHUP.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  o.prefix = !no_prefix;

  auto usage_error = [](const std::string& message) {
    note("{}\nRun with --help for more information.", message);
    return kUsageError;
  };

  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") {
    o.command.erase(o.command.begin());  // the separator itself (CLI11 keeps it)
  } else if (!o.command.empty() && o.command.front().size() > 1 && o.command.front().front() == '-') {
    return usage_error(
        fmt::format("unknown option '{}' (the program and its arguments come after the options, "
                    "or after --)",
                    o.command.front()));
  }
  if (o.command.empty()) return usage_error("no program given: chorus-run -n N [options] [--] prog [args...]");

  if (o.world_size == 0) o.world_size = o.nranks;
  if (o.world_size < o.nranks) {
    return usage_error(fmt::format("--world-size {} is smaller than -n {}", o.world_size, o.nranks));
  }
  if (static_cast<int64_t>(o.rank_offset) + o.nranks > o.world_size) {
    return usage_error(fmt::format("--rank-offset {} with -n {} would start ranks {}..{}, but --world-size is {}",
                                   o.rank_offset, o.nranks, o.rank_offset, o.rank_offset + o.nranks - 1, o.world_size));
  }
  if (o.rank_offset > 0 && o.store_addr.empty()) {
    return usage_error(fmt::format(
        "--rank-offset {} needs --store-addr HOST:PORT: ranks {}..{} must join the store hosted by the launcher of "
        "rank 0, not host a store of their own",
        o.rank_offset, o.rank_offset, o.rank_offset + o.nranks - 1));
  }
  if (!o.store_addr.empty() && !parse_address(o.store_addr)) {
    return usage_error(
        fmt::format("--store-addr '{}' is not HOST:PORT (IPv6 as [ADDR]:PORT, port 1-65535)", o.store_addr));
  }
  for (const std::string& kv : o.env) {
    size_t eq = kv.find('=');
    std::string key = kv.substr(0, eq);
    if (eq == std::string::npos || !valid_variable_name(key)) {
      return usage_error(fmt::format("-x '{}' is not KEY=VALUE with KEY a variable name", kv));
    }
    for (const char* owned : kLauncherVariables) {
      if (key == owned) {
        return usage_error(
            fmt::format("-x cannot set {}: chorus-run sets it (see -n, --world-size, --rank-offset, "
                        "--store-addr)",
                        key));
      }
    }
  }
  return std::nullopt;
}

// ---- output relay ----

// One of the launcher's own output streams. Once its reader is gone (EPIPE), the relays that feed it close
// their pipes, so a rank writing there gets SIGPIPE as it would in a shell pipeline (`chorus-run ... | head`).
class Sink {
 public:
  explicit Sink(int fd) : fd_(fd) {}
  void write(std::string_view data) {
    if (!broken_ && !data.empty() && !write_all(fd_, data)) broken_ = true;
  }
  bool broken() const { return broken_; }

 private:
  int fd_;
  bool broken_ = false;
};

// The read end of one rank's stdout or stderr pipe. Forwards whole lines only, each behind the prefix, so
// two ranks never share a line.
class LineRelay {
 public:
  LineRelay(int fd, std::string prefix, Sink* sink) : fd_(fd), prefix_(std::move(prefix)), sink_(sink) {}
  ~LineRelay() { close(); }
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }

  // Reads what the pipe holds: one read, or until it is empty when `until_empty`. Closes at end of file.
  void read_available(bool until_empty) {
    char buf[64 * 1024];
    while (open()) {
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {
        finish();
        return;
      }
      forward(std::string_view(buf, static_cast<size_t>(n)));
      if (!until_empty) return;
    }
  }

  // Forwards a last line that has no newline (the newline is added when prefixing) and closes the pipe.
  void finish() {
    if (!partial_.empty()) {
      sink_->write(prefix_.empty() ? partial_ : prefix_ + partial_ + "\n");
      partial_.clear();
    }
    close();
  }

 private:
  void forward(std::string_view data) {
    std::string out;
    size_t nl;
    while ((nl = data.find('\n')) != std::string_view::npos) {
      out += prefix_;
      out += partial_;
      out += data.substr(0, nl + 1);
      partial_.clear();
      data.remove_prefix(nl + 1);
    }
    partial_ += data;
    while (partial_.size() >= kMaxLineBytes) {
      out += prefix_;
      out.append(partial_, 0, kMaxLineBytes);
      if (!prefix_.empty()) out += '\n';
      partial_.erase(0, kMaxLineBytes);
    }
    sink_->write(out);
    if (sink_->broken()) close();
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_;
  std::string prefix_;
  std::string partial_;  // the current line, until its newline arrives
  Sink* sink_;
};

// ---- the job ----

struct Rank {
  int rank = 0;  // global
  int local_rank = 0;
  pid_t pid = -1;  // also the id of its process group
  bool running = false;
  bool exec_failed = false;  // already reported; its exit status 127 is not a second failure
  std::unique_ptr<LineRelay> out, err;

  bool output_open() const { return (out && out->open()) || (err && err->open()); }
};

// What a forked child needs, prepared before fork(): between fork and exec only async-signal-safe calls.
struct ChildSetup {
  char** argv;
  char** envp;
  int stdin_fd, stdout_fd, stderr_fd;
  int report_fd;  // receives errno if exec fails (-errno if --bind does); close-on-exec: EOF means exec succeeded
  pid_t launcher;
  const sigset_t* signal_mask;
  const struct sigaction* sigpipe_action;
  const cpu_set_t* cpus;  // the rank's CPUs (--bind core), or nullptr
};

[[noreturn]] void exec_child(const ChildSetup& s) {
  ::setpgid(0, 0);
  // Die with the launcher. If it already died before prctl, getppid() shows the new parent.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != s.launcher) ::_exit(kLauncherError);
  ::sigaction(SIGPIPE, s.sigpipe_action, nullptr);
  ::sigprocmask(SIG_SETMASK, s.signal_mask, nullptr);
  if (s.cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), s.cpus) != 0) {
    int error = -errno;  // negative: the binding failed, not the exec
    [[maybe_unused]] ssize_t ignored = ::write(s.report_fd, &error, sizeof error);
    ::_exit(kExecFailedStatus);
  }
  ::dup2(s.stdin_fd, STDIN_FILENO);
  ::dup2(s.stdout_fd, STDOUT_FILENO);
  ::dup2(s.stderr_fd, STDERR_FILENO);
  // The launcher's other descriptors (store sockets, other ranks' pipes) must not leak into the rank.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  ::execvpe(s.argv[0], s.argv, s.envp);
  int error = errno;
  [[maybe_unused]] ssize_t ignored = ::write(s.report_fd, &error, sizeof error);
  ::_exit(kExecFailedStatus);
}

class Job {
 public:
  Job(const Options& options, std::string store_addr, int signal_fd, const sigset_t& child_mask,
      const struct sigaction& child_sigpipe)
      : o_(options),
        store_addr_(std::move(store_addr)),
        signal_fd_(signal_fd),
        child_mask_(child_mask),
        child_sigpipe_(child_sigpipe),
        stdout_(STDOUT_FILENO),
        stderr_(STDERR_FILENO) {}

  // Starts the ranks, relays their output until all ended, and returns the launcher's exit code.
  int run() {
    if (o_.timeout_s > 0) {
      double seconds = std::min(o_.timeout_s, 1e9);  // ~30 years; keeps the conversion in range
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    }
    launch_all();
    supervise();
    return exit_code_.value_or(0);
  }

  // Whether the launcher itself was stopped by SIGINT, SIGTERM or SIGHUP.
  bool interrupted() const { return interrupted_; }
  // When --timeout ends the job, if it was given.
  std::optional<Clock::time_point> deadline() const { return deadline_; }

 private:
  void launch_all() {
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
      note("cannot open /dev/null: {}", std::strerror(errno));
      exit_code_ = kLauncherError;
      return;
    }
    std::vector<std::string> base_env = base_environment();
    std::vector<char*> argv;
    for (const std::string& a : o_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    ranks_.resize(static_cast<size_t>(o_.nranks));
    for (int local = 0; local < o_.nranks; ++local) {
      Rank& r = ranks_[static_cast<size_t>(local)];
      r.local_rank = local;
      r.rank = o_.rank_offset + local;
      if (!launch(r, base_env, argv, devnull)) break;
    }
    ::close(devnull);
  }

  // The launcher's environment without the variables it sets, plus -x.
  std::vector<std::string> base_environment() const {
    std::vector<std::string> env;
    auto overridden = [&](std::string_view key) {
      for (const char* v : kLauncherVariables)
        if (key == v) return true;
      for (const std::string& kv : o_.env)
        if (std::string_view(kv).substr(0, kv.find('=')) == key) return true;
      return false;
    };
    for (char** e = environ; *e != nullptr; ++e) {
      std::string_view kv(*e);
      if (!overridden(kv.substr(0, kv.find('=')))) env.emplace_back(kv);
    }
    // A key given twice with -x: the last one wins.
    for (size_t i = 0; i < o_.env.size(); ++i) {
      std::string_view key = std::string_view(o_.env[i]).substr(0, o_.env[i].find('='));
      bool repeated = std::any_of(o_.env.begin() + static_cast<std::ptrdiff_t>(i) + 1, o_.env.end(),
                                  [&](const std::string& later) { return later.substr(0, later.find('=')) == key; });
      if (!repeated) env.push_back(o_.env[i]);
    }
    return env;
  }

  // With --bind core: the one CPU of local rank `local`, the local-th (modulo their number) of the CPUs this
  // launcher may run on. False without --bind core, or where the launcher's own CPUs cannot be read.
  bool bound_cpus(int local, cpu_set_t* set) const {
    if (o_.bind != "core") return false;
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (::sched_getaffinity(0, sizeof mine, &mine) != 0) return false;
    std::vector<int> allowed;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &mine)) allowed.push_back(cpu);
    if (allowed.empty()) return false;
    CPU_ZERO(set);
    CPU_SET(allowed[static_cast<size_t>(local) % allowed.size()], set);
    return true;
  }

  // Starts one rank. Returns false if it could not be started (reported; the job is being stopped).
  bool launch(Rank& r, std::vector<std::string> env, std::vector<char*>& argv, int devnull) {
    env.push_back(fmt::format("CHORUS_RANK={}", r.rank));
    env.push_back(fmt::format("CHORUS_WORLD_SIZE={}", o_.world_size));
    env.push_back(fmt::format("CHORUS_LOCAL_RANK={}", r.local_rank));
    env.push_back(fmt::format("CHORUS_LOCAL_WORLD_SIZE={}", o_.nranks));
    env.push_back(fmt::format("CHORUS_STORE_ADDR={}", store_addr_));
    env.push_back("CHORUS_STORE_HOSTED=1");
    std::vector<char*> envp;
    for (std::string& kv : env) envp.push_back(kv.data());
    envp.push_back(nullptr);

    int out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1};
    auto close_all = [&] {
      for (int fd : {out[0], out[1], err[0], err[1], report[0], report[1]})
        if (fd >= 0) ::close(fd);
    };
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0) {
      int error = errno;
      close_all();
      return launch_failed(r, fmt::format("pipe: {}", std::strerror(error)));
    }
    cpu_set_t cpus;
    const bool bind = bound_cpus(r.local_rank, &cpus);
    ChildSetup setup{argv.data(), envp.data(), devnull,      out[1],          err[1],
                     report[1],   ::getpid(),  &child_mask_, &child_sigpipe_, bind ? &cpus : nullptr};
    pid_t pid = ::fork();
    if (pid < 0) {
      int error = errno;
      close_all();
      return launch_failed(r, fmt::format("fork: {}", std::strerror(error)));
    }
    if (pid == 0) exec_child(setup);

    r.pid = pid;
    r.running = true;
    ++running_;
    ::close(out[1]);
    ::close(err[1]);
    ::close(report[1]);
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    std::string prefix = o_.prefix ? fmt::format("[{}] ", r.rank) : "";
    r.out = std::make_unique<LineRelay>(out[0], prefix, &stdout_);
    r.err = std::make_unique<LineRelay>(err[0], prefix, &stderr_);

    // Wait for exec: the report pipe closes on success and carries errno on failure.
    int exec_errno = 0;
    ssize_t n;
    do {
      n = ::read(report[0], &exec_errno, sizeof exec_errno);
    } while (n < 0 && errno == EINTR);
    ::close(report[0]);
    if (n != static_cast<ssize_t>(sizeof exec_errno)) return true;

    r.exec_failed = true;
    if (exec_errno < 0) {
      note("cannot bind rank {} to its CPU (--bind core): {}", r.rank, std::strerror(-exec_errno));
    } else {
      note("cannot execute '{}': {}", o_.command.front(), std::strerror(exec_errno));
    }
    exit_code_ = kExecFailedStatus;
    stop(SIGTERM);
    return false;
  }

  bool launch_failed(const Rank& r, const std::string& why) {
    note("cannot start rank {}: {}", r.rank, why);
    exit_code_ = kLauncherError;
    stop(SIGTERM);
    return false;
  }

  void supervise() {
    std::optional<Clock::time_point> drain_until;
    std::vector<pollfd> fds;
    std::vector<LineRelay*> relays;
    for (;;) {
      Clock::time_point now = Clock::now();
      if (!stopping_ && running_ > 0 && deadline_ && now >= *deadline_) {
        note("timed out: the job ran longer than --timeout {:g} s; stopping {}", o_.timeout_s,
             plural(running_, "rank"));
        exit_code_ = kTimedOutStatus;
        stop(SIGTERM);
      }
      if (stopping_ && !killed_ && now >= kill_at_) {
        kill_all(fmt::format("still running {} ms after {}", o_.grace_ms, signal_name(stop_signal_)));
      }
      if (running_ == 0) {
        bool output_open = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.output_open(); });
        if (!output_open) break;
        // Every rank ended but something it started still holds its output: give that a moment, then kill it.
        if (!drain_until) {
          drain_until = now + (killed_ ? kFinalDrain : milliseconds(o_.grace_ms));
        } else if (now >= *drain_until) {
          if (killed_) break;
          kill_all("ended, but processes started by the rank still hold its output");
          drain_until = now + kFinalDrain;
        }
      }

      std::optional<Clock::time_point> wake = drain_until;
      auto earliest = [&](Clock::time_point t) { wake = wake ? std::min(*wake, t) : t; };
      if (!stopping_ && running_ > 0 && deadline_) earliest(*deadline_);
      if (stopping_ && !killed_) earliest(kill_at_);
      int timeout_ms = -1;
      if (wake) {
        auto left = std::chrono::ceil<milliseconds>(*wake - now).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 1'000'000));
      }

      fds.clear();
      relays.clear();
      fds.push_back({signal_fd_, POLLIN, 0});
      for (Rank& r : ranks_) {
        for (LineRelay* relay : {r.out.get(), r.err.get()}) {
          if (relay != nullptr && relay->open()) {
            fds.push_back({relay->fd(), POLLIN, 0});
            relays.push_back(relay);
          }
        }
      }
      int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0) {
        if (errno == EINTR) continue;
        note("poll: {}", std::strerror(errno));
        exit_code_ = kLauncherError;
        kill_all("chorus-run itself failed");
        break;
      }
      // Output first: a rank's last words come before the launcher's report of its end.
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) relays[i - 1]->read_available(false);
      }
      if (fds[0].revents != 0) handle_signals();
    }
    for (Rank& r : ranks_) {
      if (r.out) r.out->finish();
      if (r.err) r.err->finish();
    }
    // Ranks that could not be killed (stuck in the kernel) are left to init; say so rather than hang.
    if (running_ > 0) note("{} did not end after SIGKILL; leaving", plural(running_, "rank"));
  }

  void handle_signals() {
    signalfd_siginfo info;
    while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap();
      } else if (!stopping_) {
        note("received {}; forwarding it to {}", signal_name(sig), plural(running_, "rank"));
        interrupted_ = true;
        exit_code_ = 128 + sig;
        stop(sig);
      } else if (!killed_) {
        note("received {} again; killing the ranks now", signal_name(sig));
        kill_all("");
      }
    }
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      auto it = std::find_if(ranks_.begin(), ranks_.end(), [&](const Rank& r) { return r.pid == pid; });
      if (it == ranks_.end() || !it->running) continue;
      it->running = false;
      --running_;
      it->out->read_available(true);
      it->err->read_available(true);
      on_rank_end(*it, status);
    }
  }

  void on_rank_end(const Rank& r, int status) {
    if (r.exec_failed || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) return;
    if (stopping_) return;  // a consequence of the stop already reported
    std::string stopping_others = running_ > 0 ? fmt::format("; stopping the other {}", plural(running_, "rank")) : "";
    note("rank {} (pid {}) {}{}", r.rank, r.pid, describe_status(status), stopping_others);
    exit_code_ = exit_code_of(status);
    stop(SIGTERM);
  }

  // Sends sig to every rank's process group now, and SIGKILL once --grace-ms has passed.
  void stop(int sig) {
    if (!stopping_) {
      stopping_ = true;
      stop_signal_ = sig;
      kill_at_ = Clock::now() + milliseconds(o_.grace_ms);
    }
    signal_all(sig);
  }

  void kill_all(std::string_view why) {
    std::vector<int> still;
    for (const Rank& r : ranks_)
      if (r.running || r.output_open()) still.push_back(r.rank);
    if (!why.empty() && !still.empty()) {
      note("{} {}: {}; sending SIGKILL", still.size() == 1 ? "rank" : "ranks", fmt::join(still, ", "), why);
    }
    killed_ = true;
    signal_all(SIGKILL);
  }

  void signal_all(int sig) {
    for (const Rank& r : ranks_) {
      // A group outlives its leader while something the rank started still holds its pipes.
      if (r.pid <= 0 || !(r.running || r.output_open())) continue;
      if (::kill(-r.pid, sig) != 0 && errno == ESRCH && r.running) ::kill(r.pid, sig);
    }
  }

  const Options& o_;
  const std::string store_addr_;
  const int signal_fd_;
  const sigset_t child_mask_;
  const struct sigaction child_sigpipe_;
  Sink stdout_, stderr_;
  std::vector<Rank> ranks_;
  size_t running_ = 0;
  std::optional<Clock::time_point> deadline_;  // --timeout
  bool stopping_ = false;                      // the ranks were signalled to stop
  int stop_signal_ = 0;                        // with this signal
  Clock::time_point kill_at_;                  // when they get SIGKILL
  bool killed_ = false;                        // SIGKILL was sent
  bool interrupted_ = false;                   // by a signal to the launcher
  std::optional<int> exit_code_;               // set by the first failure
};

// The job's authentication secret: CHORUS_AUTH_TOKEN from -x (the last one) or from the launcher's
// environment; when neither sets it and this launcher hosts the store for the whole job, 32 fresh random bytes
// as hex, added to every rank's environment (as -x would). Empty when the ranks of other hosts could not know it
// (a larger world without a token): then connections are not authenticated. The token is never printed.
std::string job_auth_token(Options& o) {
  const std::string key = "CHORUS_AUTH_TOKEN=";
  for (auto it = o.env.rbegin(); it != o.env.rend(); ++it) {
    if (it->rfind(key, 0) == 0) return it->substr(key.size());
  }
  if (const char* v = std::getenv("CHORUS_AUTH_TOKEN"); v && *v) return v;
  if (!o.store_addr.empty() || o.world_size > o.nranks) {
    note(
        "CHORUS_AUTH_TOKEN is not set: store and rank connections are not authenticated; set it to the same "
        "secret for every launcher of the job");
    return "";
  }
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      note("cannot generate an authentication token (getrandom: {}); connections are not authenticated",
           std::strerror(errno));
      return "";
    }
    got += static_cast<size_t>(n);
  }
  std::string token;
  for (unsigned char b : bytes) token += fmt::format("{:02x}", b);
  o.env.push_back(key + token);
  return token;
}

// Makes sure fds 0-2 are open, so that no pipe of ours ends up as the launcher's own stdout or stderr.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int null_fd = ::open("/dev/null", O_RDWR);
      if (null_fd >= 0 && null_fd != fd) {
        ::dup2(null_fd, fd);
        ::close(null_fd);
      }
    }
  }
}

// The store outlives this host's ranks while other hosts' ranks still hold connections to it: they may still
// need it (a split, a failure record to read) after ours are done, and would otherwise fail with "the store
// closed the connection". Every rank keeps its connection until it exits, so the count of connected clients
// falling to zero means every rank is done. Bounded by --store-linger and by the job's --timeout;
// SIGINT/SIGTERM/SIGHUP end it at once: returns that signal, else 0.
int linger_for_other_hosts(const chorus::TcpStoreServer& server, int signal_fd, double linger_s,
                           std::optional<Clock::time_point> job_deadline) {
  const auto start = Clock::now();
  auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(linger_s, 1e9)));
  const bool timeout_first = job_deadline && *job_deadline < end;
  if (timeout_first) end = *job_deadline;
  bool told = false;
  while (server.clients() > 0) {
    auto now = Clock::now();
    if (now >= end) {
      if (timeout_first) {
        note("closing the rendezvous store with {} still connected: the job's --timeout has passed",
             plural(server.clients(), "client"));
      } else {
        note("closing the rendezvous store with {} still connected after --store-linger {:g} s",
             plural(server.clients(), "client"), linger_s);
      }
      return 0;
    }
    if (!told && now - start >= std::chrono::seconds(2)) {
      note(
          "this host's ranks are done; keeping the rendezvous store up for the {} of other hosts still connected "
          "(at most {:g} s, see --store-linger)",
          plural(server.clients(), "client"), linger_s);
      told = true;
    }
    pollfd pfd{signal_fd, POLLIN, 0};
    if (::poll(&pfd, 1, 20) > 0) {
      signalfd_siginfo info;
      while (::read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig != SIGCHLD) {
          note("received {}; closing the rendezvous store with {} still connected", signal_name(sig),
               plural(server.clients(), "client"));
          return sig;
        }
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (std::optional<int> rc = parse_options(argc, argv, options)) return *rc;
  ensure_standard_fds();

  // Block the signals the launcher handles before any thread (the store server) starts, so they reach
  // the signalfd only; the children get the original mask and SIGPIPE disposition back. A stop signal
  // that was ignored when chorus-run started (nohup, a background job) stays ignored, for the ranks too.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction original_sigpipe {};
  ::sigaction(SIGPIPE, &ignore, &original_sigpipe);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  ::sigaction(SIGCHLD, &default_action, nullptr);  // an ignored SIGCHLD would reap the ranks for us
  sigset_t handled, original_mask;
  sigemptyset(&handled);
  sigaddset(&handled, SIGCHLD);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    ::sigaction(sig, nullptr, &current);
    if (current.sa_handler != SIG_IGN) sigaddset(&handled, sig);
  }
  ::pthread_sigmask(SIG_BLOCK, &handled, &original_mask);
  int signal_fd = ::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0) {
    note("signalfd: {}", std::strerror(errno));
    return kLauncherError;
  }

  std::unique_ptr<chorus::TcpStoreServer> server;
  std::string store_addr = options.store_addr;
  chorus::TcpStoreServerOptions server_options;
  server_options.auth_token = job_auth_token(options);
  if (store_addr.empty()) {
    try {
      server = std::make_unique<chorus::TcpStoreServer>(options.store_host, options.store_port, server_options);
    } catch (const std::exception& e) {
      note("cannot host the rendezvous store on {}: {}", format_address(options.store_host, options.store_port),
           e.what());
      return kLauncherError;
    }
    // Local ranks reach a wildcard-bound store through loopback.
    const std::string& bound = options.store_host;
    bool wildcard = bound.empty() || bound == "0.0.0.0" || bound == "::";
    std::string host = !wildcard ? bound : bound == "::" ? "::1" : "127.0.0.1";
    store_addr = format_address(host, server->port());
    if (options.world_size > options.nranks) {
      // Other hosts will join with --store-addr; say where, and warn about addresses they cannot use.
      if (wildcard) {
        note(
            "hosting the rendezvous store on all interfaces, port {}: start the other hosts' launchers with "
            "--store-addr THIS_HOST:{}. Local ranks reach it at {}; set CHORUS_SOCKET_IFNAME (with -x) so that "
            "their own connections use an interface the other hosts can reach",
            server->port(), server->port(), store_addr);
      } else if (host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost") {
        note(
            "warning: the rendezvous store listens on {}, which other hosts cannot reach; pass --store-host with "
            "an address of this host for a world of {} ranks",
            store_addr, options.world_size);
      } else {
        note("hosting the rendezvous store on {}: start the other hosts' launchers with --store-addr {}", store_addr,
             store_addr);
      }
    }
  }

  Job job(options, store_addr, signal_fd, original_mask, original_sigpipe);
  int rc = job.run();
  if (server && options.world_size > options.nranks && !job.interrupted() && rc != kTimedOutStatus) {
    int sig = linger_for_other_hosts(*server, signal_fd, options.store_linger_s, job.deadline());
    if (sig != 0 && rc == 0) rc = 128 + sig;  // as when a signal stops the job
  }
  server.reset();
  ::close(signal_fd);
  return rc;
}
