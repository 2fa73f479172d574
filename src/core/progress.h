// The progress engine: one thread per communicator that runs queued operations in issue order, and the
// shared state behind a chorus::Work. See docs/design.md, "Asynchronous operations, groups and the
// gradient reducer".
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "chorus/work.h"

namespace chorus::detail {

// Completion of one operation (or of one group). Written once by the thread that ran it.
struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::exception_ptr error;  // set before done

  void complete(std::exception_ptr e = nullptr);
};

}  // namespace chorus::detail

namespace chorus::core {

class ProgressEngine {
 public:
  // `name` labels the thread in logs and traces.
  explicit ProgressEngine(std::string name);
  // Runs everything still queued, then joins the thread.
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Queues a task; tasks run one at a time, in submission order, on the engine's thread. A task must not
  // throw (it stores its error in its WorkState).
  void submit(std::function<void()> task);
  // Blocks until every submitted task has finished.
  void drain();
  // True when no task is queued or running.
  bool idle() const noexcept { return pending_.load(std::memory_order_acquire) == 0; }

 private:
  void loop();

  std::string name_;
  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::atomic<size_t> pending_{0};           // queued + running
  std::thread thread_;
};

}  // namespace chorus::core
