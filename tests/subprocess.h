// Starting test programs as child processes and collecting their output (multi-process tests).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::testing {

struct Child {
  pid_t pid = -1;
  int out = -1;
  std::string output;
  int status = -1;
};

// What a child needs to exec, built before fork(): a test process has threads (a store server, say), and
// one of them may hold the allocator's lock at the fork, so the child may only make async-signal-safe
// calls (dup2, execve, _exit) between fork and exec, and must not allocate or touch the environment.
class ExecImage {
 public:
  // argv[0] is the program's path; `env` (KEY=VALUE) is added to this process's environment, replacing a
  // variable of the same name.
  ExecImage(const std::vector<std::string>& argv, const std::vector<std::string>& env) : args_(argv), env_(env) {
    for (std::string& a : args_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
    for (char** e = environ; *e; ++e) {
      const std::string_view kv(*e);
      const std::string_view key = kv.substr(0, kv.find('='));
      bool replaced = false;
      for (const std::string& add : env_) replaced |= add.size() > key.size() && add.compare(0, key.size(), key) == 0 &&
                                                     add[key.size()] == '=';
      if (!replaced) envp_.push_back(*e);
    }
    for (std::string& kv : env_) envp_.push_back(kv.data());
    envp_.push_back(nullptr);
  }
  // In the child: replaces the process, or exits with 127.
  [[noreturn]] void exec() const noexcept {
    ::execve(argv_[0], argv_.data(), envp_.data());
    ::_exit(127);
  }

 private:
  std::vector<std::string> args_, env_;
  std::vector<char*> argv_, envp_;
};

// Starts argv[0] with `env` (KEY=VALUE) added to this process's environment; its stdout (and stderr when
// merge_stderr) goes to a pipe that wait_all reads.
inline Child spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   bool merge_stderr = false) {
  const ExecImage image(argv, env);
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    if (merge_stderr) ::dup2(fds[1], STDERR_FILENO);
    image.exec();
  }
  ::close(fds[1]);
  c.out = fds[0];
  return c;
}

// The stacks of every thread of a running process, through gdb when the machine has it (a hang is then
// reported with where each thread waits); empty otherwise.
inline std::string thread_stacks(pid_t pid) {
  if (::access("/usr/bin/gdb", X_OK) != 0) return {};
  std::string cmd = "/usr/bin/gdb -p " + std::to_string(pid) +
                    " -batch -nx -ex 'set pagination off' -ex 'thread apply all bt' 2>/dev/null";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    ::pclose(f);
  }
  return out;
}

// Reads every child's output until all exit, or, after `limit`, reports the ones still running (with their
// thread stacks) and kills them. Only descriptors that poll marks readable are read, so one silent child
// cannot block the others or the limit.
inline void wait_all(std::vector<Child>& children, std::chrono::seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  size_t open = 0;
  for (auto& c : children) open += c.out >= 0;
  while (open > 0) {
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (auto& c : children)
      if (c.out >= 0) {
        fds.push_back({c.out, POLLIN, 0});
        owners.push_back(&c);
      }
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  end - std::chrono::steady_clock::now())
                                  .count());
    if (ms <= 0) {
      std::string report;
      for (size_t i = 0; i < children.size(); ++i) {
        Child& c = children[i];
        if (c.out < 0) continue;
        report += "\n--- child " + std::to_string(i) + " (pid " + std::to_string(c.pid) + ") output so far:\n" +
                  c.output + "\n--- its threads:\n" + thread_stacks(c.pid);
      }
      ADD_FAILURE() << "ranks still running after " << limit.count() << " s: killing them" << report;
      for (auto& c : children) ::kill(c.pid, SIGKILL);
      break;
    }
    if (::poll(fds.data(), fds.size(), ms) < 0) continue;  // EINTR: poll again
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Child& c = *owners[i];
      char buf[4096];
      ssize_t n = ::read(c.out, buf, sizeof(buf));
      if (n > 0) {
        c.output.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        ::close(c.out);
        c.out = -1;
        --open;
      }
    }
  }
  for (auto& c : children) {
    if (c.out >= 0) {
      ::close(c.out);
      c.out = -1;
    }
    ::waitpid(c.pid, &c.status, 0);
  }
}

inline std::string worker_path() { return std::string(CHORUS_BIN_DIR) + "/chorus-test-worker"; }

}  // namespace chorus::testing
