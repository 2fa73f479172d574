// Collective algorithms. Each takes the operation's context and user buffers; core has already validated
// the arguments, copied nothing, and handles the world of one rank.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::algo {

// ring.cc: reduce-scatter + all-gather, pipelined in slices; per-rank traffic 2(N-1)/N x K.
void all_reduce_ring(OpContext& c, const void* send, void* recv, size_t count);
void all_gather_ring(OpContext& c, const void* send, void* recv, size_t count);
void reduce_scatter_ring(OpContext& c, const void* send, void* recv, size_t count);

// binomial.cc: binomial trees rooted at `root`, pipelined in slices.
void broadcast_binomial(OpContext& c, const void* send, void* recv, size_t count, int root);
void reduce_binomial(OpContext& c, const void* send, void* recv, size_t count, int root);

// pairwise.cc: N steps, each rank exchanging one block with one partner per step (in place or not).
void all_to_all_pairwise(OpContext& c, const void* send, void* recv, size_t count);

// linear.cc: the root exchanges a block with every rank.
void gather_linear(OpContext& c, const void* send, void* recv, size_t count, int root);
void scatter_linear(OpContext& c, const void* send, void* recv, size_t count, int root);

// dissemination.cc: ceil(log2 N) rounds of zero-byte messages.
void barrier_dissemination(OpContext& c);

}  // namespace chorus::algo
