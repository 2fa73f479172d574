// Starting test programs as child processes and collecting their output (multi-process tests).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace chorus::testing {

struct Child {
  pid_t pid = -1;
  int out = -1;
  std::string output;
  int status = -1;
};

// Starts argv[0] with `env` (KEY=VALUE) added to this process's environment; its stdout (and stderr when
// merge_stderr) goes to a pipe that wait_all reads.
inline Child spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   bool merge_stderr = false) {
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    if (merge_stderr) ::dup2(fds[1], STDERR_FILENO);
    for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  c.out = fds[0];
  return c;
}

// Reads every child's output until all exit, or kills them after `limit`.
inline void wait_all(std::vector<Child>& children, std::chrono::seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  size_t open = children.size();
  while (open > 0) {
    std::vector<pollfd> fds;
    for (auto& c : children)
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0});
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  end - std::chrono::steady_clock::now())
                                  .count());
    if (ms <= 0) {
      ADD_FAILURE() << "ranks still running after " << limit.count() << " s: killing them";
      for (auto& c : children) ::kill(c.pid, SIGKILL);
      break;
    }
    ::poll(fds.data(), fds.size(), ms);
    for (auto& c : children) {
      if (c.out < 0) continue;
      char buf[4096];
      ssize_t n = ::read(c.out, buf, sizeof(buf));
      if (n > 0) {
        c.output.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        ::close(c.out);
        c.out = -1;
        --open;
      }
    }
  }
  for (auto& c : children) {
    if (c.out >= 0) ::close(c.out);
    ::waitpid(c.pid, &c.status, 0);
  }
}

inline std::string worker_path() { return std::string(CHORUS_BIN_DIR) + "/chorus-test-worker"; }

}  // namespace chorus::testing
