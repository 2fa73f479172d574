// Collective algorithms. Each takes the operation's context and user buffers; core has already validated
// the arguments and handles the world of one rank. Costs and diagrams: docs/algorithms.md.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::algo {

// ---- all_reduce ----
// ring.cc: reduce-scatter + all-gather, pipelined in slices; per-rank traffic 2(N-1)/N x K.
void all_reduce_ring(OpContext& c, const void* send, void* recv, size_t count);
// ring.cc: steps [first_step, end_step) of the ring all_reduce, so its halves can run apart: steps 0..N-2 are
// the reduce-scatter (this rank ends owning segment `rank` of Partition{count, N}, reduced into recv; the
// last step applies reduce_final), steps N-1..2N-3 the all-gather of the owned segments.
void ring_steps(OpContext& c, const void* send, void* recv, size_t count, int first_step, int end_step);
// hierarchical.cc: ring reduce-scatter inside each host, all_reduce of each rank's segment across hosts
// among the ranks with the same local index (ring or tree, whichever the model finds cheaper), ring
// all-gather inside each host. Needs the same number of ranks on every host.
void all_reduce_hierarchical(OpContext& c, const void* send, void* recv, size_t count);
// hierarchical.cc: the same idea for the other collectives. all_gather: the blocks of each column cross hosts
// once, then each host shares them; reduce_scatter: the mirror, with H blocks of scratch; broadcast: the
// root's column across hosts, then inside each host. Same requirement as all_reduce_hierarchical.
void all_gather_hierarchical(OpContext& c, const void* send, void* recv, size_t count);
void reduce_scatter_hierarchical(OpContext& c, const void* send, void* recv, size_t count);
void broadcast_hierarchical(OpContext& c, const void* send, void* recv, size_t count, int root);
// tree.cc: NCCL-style double binary tree; each tree reduces up and broadcasts down half of the data,
// pipelined in slices.
void all_reduce_tree(OpContext& c, const void* send, void* recv, size_t count);
// recursive.cc: recursive doubling (log2 N exchanges of the whole vector) and Rabenseifner
// (recursive-halving reduce-scatter + recursive-doubling all-gather). Non-powers of two fold the extra ranks
// into partners first and send them the result at the end.
void all_reduce_recursive_doubling(OpContext& c, const void* send, void* recv, size_t count);
void all_reduce_rabenseifner(OpContext& c, const void* send, void* recv, size_t count);
// direct.cc: every rank reduces its 1/N slice from all peers, then sends it to all peers (two steps).
void all_reduce_direct(OpContext& c, const void* send, void* recv, size_t count);
// composite.cc: binomial reduce to rank 0, then binomial broadcast from rank 0.
void all_reduce_reduce_broadcast(OpContext& c, const void* send, void* recv, size_t count);

// ---- all_gather (count = elements per rank) ----
void all_gather_ring(OpContext& c, const void* send, void* recv, size_t count);
void all_gather_recursive_doubling(OpContext& c, const void* send, void* recv, size_t count);  // recursive.cc
void all_gather_bruck(OpContext& c, const void* send, void* recv, size_t count);               // bruck.cc

// ---- reduce_scatter (count = elements each rank receives) ----
void reduce_scatter_ring(OpContext& c, const void* send, void* recv, size_t count);
void reduce_scatter_recursive_halving(OpContext& c, const void* send, void* recv, size_t count);  // recursive.cc
void reduce_scatter_pairwise(OpContext& c, const void* send, void* recv, size_t count);          // pairwise.cc

// ---- broadcast ----
void broadcast_binomial(OpContext& c, const void* send, void* recv, size_t count, int root);
// composite.cc: binomial scatter of N pieces, then ring all-gather of the pieces.
void broadcast_scatter_allgather(OpContext& c, const void* send, void* recv, size_t count, int root);
// composite.cc: root -> root+1 -> ... -> root-1, pipelined in slices.
void broadcast_chain(OpContext& c, const void* send, void* recv, size_t count, int root);

// ---- reduce ----
void reduce_binomial(OpContext& c, const void* send, void* recv, size_t count, int root);
void reduce_linear(OpContext& c, const void* send, void* recv, size_t count, int root);  // linear.cc
// composite.cc: ring reduce-scatter then gather to the root, in chunks of N slices.
void reduce_reduce_scatter_gather(OpContext& c, const void* send, void* recv, size_t count, int root);

// ---- all_to_all (count = elements per peer) ----
void all_to_all_pairwise(OpContext& c, const void* send, void* recv, size_t count);
void all_to_all_bruck(OpContext& c, const void* send, void* recv, size_t count);  // bruck.cc

// ---- gather, scatter (linear.cc), barrier (dissemination.cc) ----
void gather_linear(OpContext& c, const void* send, void* recv, size_t count, int root);
void scatter_linear(OpContext& c, const void* send, void* recv, size_t count, int root);
void barrier_dissemination(OpContext& c);

// ---- structures the traffic model and tests need ----

// One rank's place in a binary tree: its parent (-1 at the root) and up to two children (-1 if absent).
struct TreeNode {
  int parent = -1;
  int child[2] = {-1, -1};
  int num_children() const { return (child[0] >= 0) + (child[1] >= 0); }
};
// tree.cc: the two trees of the double binary tree for `rank` of `size`.
void double_binary_tree(int rank, int size, TreeNode* tree0, TreeNode* tree1);
// tree.cc: how the double binary tree splits `count` elements: tree 0 carries [0, first), tree 1 the rest.
size_t tree_split(size_t count);

}  // namespace chorus::algo
