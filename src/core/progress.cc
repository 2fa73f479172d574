// The progress thread and chorus::Work.
#include "core/progress.h"

#include <chrono>

#include "base/logging.h"
#include "core/trace.h"
#include "transport/transport.h"

namespace chorus {

namespace {
// A short spin before sleeping: an operation that completes within a few microseconds (a small all_reduce
// on shared memory) is picked up without a futex wake-up. Kept short, because on an oversubscribed machine
// the spinning thread takes a core from the thread it waits for.
constexpr auto kSpin = std::chrono::microseconds(20);

template <class Done>
bool spin_until(Done&& done) {
  auto until = std::chrono::steady_clock::now() + kSpin;
  do {
    if (done()) return true;
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  return done();
}
}  // namespace

namespace detail {
void WorkState::complete(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    error = std::move(e);
    done.store(true, std::memory_order_release);
  }
  cv.notify_all();
}
}  // namespace detail

void Work::wait() {
  if (!state_) return;
  if (!spin_until([&] { return state_->done.load(std::memory_order_acquire); })) {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->done.load(std::memory_order_acquire); });
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::wait(std::chrono::milliseconds timeout) {
  if (!state_) return true;
  if (!state_->done.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done.load(std::memory_order_acquire); })) {
      return false;
    }
  }
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

bool Work::test() {
  if (!state_) return true;
  if (!state_->done.load(std::memory_order_acquire)) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

namespace core {

ProgressEngine::ProgressEngine(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void ProgressEngine::submit(std::function<void()> task) {
  pending_.fetch_add(1, std::memory_order_acq_rel);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  work_cv_.notify_one();
}

void ProgressEngine::drain() {
  if (spin_until([&] { return idle(); })) return;
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return idle(); });
}

void ProgressEngine::loop() {
  base::LogTag tag(&name_);
  trace::set_thread_name("progress " + name_);
  transport::set_background_thread(true);  // its waits poll briefly: the caller's thread computes meanwhile
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      lock.unlock();
      spin_until([&] { return !idle(); });
      lock.lock();
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
    }
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    task = nullptr;
    lock.lock();
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) idle_cv_.notify_all();
  }
}

}  // namespace core
}  // namespace chorus
