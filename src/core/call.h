// A checked operation, as the API thread hands it to the executing thread (synchronous caller, progress
// thread, or a recorded group).
#pragma once

#include <cstddef>
#include <variant>

#include "algo/registry.h"
#include "chorus/types.h"
#include "transport/frame.h"

namespace chorus::core {

// One collective call, its arguments checked and its algorithm chosen.
struct CollCall {
  algo::Collective coll;
  transport::OpKind kind;
  const char* op_name;
  const void* send;
  void* recv;
  size_t count;
  DataType dtype;
  bool has_rop;
  ReduceOp rop;  // when has_rop
  int root;            // -1 when the collective has none
  size_t local_bytes;  // what a world of one copies from send to recv
  // Chosen by resolve():
  const algo::Algorithm* algorithm = nullptr;
  bool forced = false;
  // In place (send and recv as the collective's in-place form), for a collective every rank passes both
  // buffers to (all_reduce, all_gather, reduce_scatter, all_to_all); false for the rooted ones.
  bool in_place = false;
  // The automatic choice used the tables measured with registered buffers (in place when in_place):
  // CallOptions::registered, and this collective has such tables at this world size and transport, from this
  // call's size down.
  bool registered = false;
  // CHORUS_ADAPT is on and the model chose: the executing thread may run a near-tie instead (core/adapt.h).
  bool adaptive = false;
  double estimate = 0;
};

// One point-to-point call, its arguments checked.
struct P2PCall {
  bool is_send;
  const void* send;
  void* recv;
  size_t count;
  DataType dtype;
  int peer;
  size_t bytes;
};

using Op = std::variant<CollCall, P2PCall>;

}  // namespace chorus::core
