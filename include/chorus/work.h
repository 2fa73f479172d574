// Handles to asynchronous operations.
//
// Every collective and point-to-point call has an `_async` form (Communicator::all_reduce_async, ...) that
// checks its arguments on the calling thread, queues the operation on the communicator's progress thread
// and returns a Work at once. The operation runs in issue order after everything queued before it.
//
// Buffers: from the `_async` call until the Work completes, the buffers it names belong to Chorus. Do not
// free them, write a send buffer or read a recv buffer meanwhile. After completion nothing refers to them.
//
// Errors: invalid arguments throw Error(InvalidArgument) from the `_async` call itself, and nothing is
// queued. An error raised while the operation runs (PeerLost, Mismatch, Timeout, Aborted) is stored and
// rethrown by wait() and test(), with the same code, peer and message a synchronous call would have thrown.
//
// Threads: a Work may be waited on from any thread, by several threads, and any number of times. Dropping
// a Work neither cancels nor waits for its operation; the communicator's destructor waits for every queued
// operation.
#pragma once

#include <chrono>
#include <memory>

#include "chorus/export.h"

namespace chorus {

namespace detail {
struct WorkState;
}  // namespace detail

class CHORUS_API Work {
 public:
  // An empty handle: already complete, nothing to wait for.
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  // Blocks until the operation completes. Rethrows its error. Each queued operation is bounded by the
  // communicator's timeout, so this returns or throws in bounded time.
  void wait();
  // Waits at most `timeout`. Returns true when the operation completed (rethrowing its error if it
  // failed), false if it is still queued or running.
  bool wait(std::chrono::milliseconds timeout);
  // Never blocks: true when complete (rethrowing its error if it failed), false otherwise.
  bool test();
  // True for a handle that refers to an operation (completed or not), false for an empty one.
  bool valid() const noexcept { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace chorus
