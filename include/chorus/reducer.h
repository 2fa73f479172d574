// A gradient-bucketing reducer for data-parallel training, after PyTorch DDP's Reducer.
//
// Usage, on every rank, every step:
//   chorus::Reducer reducer(*comm);                       // once
//   for (auto& p : params) reducer.add_parameter(p.name, p.grad, p.count, DataType::Float32);  // forward order
//   ... backward: as each gradient is computed ...
//   reducer.mark_ready(i);                                // launches a bucket's all_reduce once it is complete
//   reducer.finalize();                                   // waits, averages, copies results back
//
// Buckets: parameters are assigned to buckets in reverse registration order (backward computes the last
// layers first), the first bucket capped at first_bucket_bytes and the others at bucket_cap_bytes; a
// parameter is never split, so one larger than the cap gets a bucket of its own. Parameters of different
// dtypes never share a bucket (each dtype fills its own buckets, its first one capped at first_bucket_bytes).
// Buckets are fixed at the first mark_ready (or gradient()/buckets()).
//
// Launch order is identical on every rank even when the order of mark_ready calls differs between ranks:
// each policy either launches in a fixed order or agrees on the next bucket with the other ranks first.
//
// Threads: one thread calls a Reducer. The Reducer runs its all_reduces on a communicator of its own, split
// from the one passed in (so the caller may keep using that one meanwhile); creating a Reducer is therefore
// collective: every rank of `comm` constructs one, in the same order as other collectives. ReadyOrder
// launches from the caller's thread (all_reduce_async); FrontFirst and LargestFirst start one scheduler
// thread at the first step, which alone uses the Reducer's communicator and sleeps while nothing is ready.
//
// Errors (chorus::Error, InvalidArgument unless noted, naming the parameter and its index): marking a
// parameter twice in one step, an index or name that was never registered, registering after the buckets
// are fixed, finalize() while parameters are still unmarked (it names them). A rank that stops issuing
// makes the others' finalize() throw Timeout or PeerLost naming it, within the communicator's timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/export.h"
#include "chorus/types.h"

namespace chorus {

enum class BucketPolicy {
  ReadyOrder,    // buckets launch in bucket order as they complete (DDP)
  FrontFirst,    // layers nearer the input first: buckets are cut into partitions, and among the partitions
                 // ready on every rank the one nearest the input goes next (ByteScheduler)
  LargestFirst,  // parameters grouped into buckets by size; among the buckets ready on every rank the largest
                 // goes next
};
// "ready_order", "front_first", "largest_first".
CHORUS_API const char* to_string(BucketPolicy policy) noexcept;
// Parses those names (hyphens accepted); throws Error(InvalidArgument) listing them otherwise.
CHORUS_API BucketPolicy parse_bucket_policy(std::string_view name);

struct ReducerOptions {
  size_t bucket_cap_bytes = size_t{25} << 20;
  size_t first_bucket_bytes = size_t{1} << 20;
  // finalize() divides by the world size (true) or leaves sums (false).
  bool average = true;
  // Gradients live inside the bucket buffers: after the first mark_ready/bucket_views call, gradient(i)
  // points into a bucket, the backward pass writes there, and nothing is copied in or out.
  bool gradient_as_bucket_view = false;
  BucketPolicy policy = BucketPolicy::ReadyOrder;
  // FrontFirst: the size of the partitions buckets are cut into, so a late, high-priority bucket can go
  // ahead of the rest of a large one. 0: whole buckets.
  size_t partition_bytes = size_t{4} << 20;
};

struct BucketInfo {
  std::vector<size_t> parameters;  // indices, in the order they sit in the bucket
  size_t bytes = 0;
  DataType dtype = DataType::Float32;
};

class CHORUS_API Reducer {
 public:
  // Collective over `comm` (see above). `comm` must outlive the Reducer.
  explicit Reducer(Communicator& comm, ReducerOptions options = {});
  // Waits for launched all_reduces (bounded by the communicator's timeout); never throws.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Registers a gradient buffer, in forward order. Returns its index (0, 1, ...). `grad` must stay valid
  // for the Reducer's lifetime. Names must be unique (they appear in errors).
  size_t add_parameter(std::string name, void* grad, size_t count, DataType type);

  // Gradient `index` is final for this step. Launches every bucket the policy allows.
  void mark_ready(size_t index);
  void mark_ready(std::string_view name);

  // Waits for every bucket, averages (if configured), copies results into the registered gradient buffers
  // (unless they are bucket views), and resets for the next step. Throws when parameters are unmarked.
  void finalize();

  // Where gradient `index` lives: inside its bucket with gradient_as_bucket_view, else the registered
  // buffer. Fixes the buckets.
  void* gradient(size_t index);
  // The bucket assignment (fixes the buckets).
  const std::vector<BucketInfo>& buckets();
  size_t num_parameters() const noexcept;
  const ReducerOptions& options() const noexcept;

  // Figures of the last finalized step: time from the first launch to the last completion, and the time
  // finalize() spent waiting (the communication that was not hidden).
  struct StepStats {
    std::chrono::nanoseconds comm_span{0};
    std::chrono::nanoseconds finalize_wait{0};
    size_t launches = 0;
  };
  StepStats last_step() const noexcept;
  // The traffic of the Reducer's own communicator (a split of the one it was given): bytes per peer, and on
  // shared memory how many bucket payloads peers read in place (buckets of 64 KiB and more are registered
  // memory, chorus::mem_alloc).
  TrafficCounters traffic() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
