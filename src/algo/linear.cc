// Linear gather and scatter: the root exchanges one block with every other rank. The root's link carries
// (N-1) blocks whatever the algorithm, so a tree would only save latency, not bandwidth.
// Linear reduce: every other rank sends its whole input to the root, which reduces them in rank order. One
// hop instead of a binomial tree's log2 N, for (N-1) x K into the root: for small messages, where each hop's
// wake-up costs more than the root's extra receives (oversubscribed hosts above all).
#include <algorithm>
#include <cstring>

#include "algo/algorithms.h"

namespace chorus::algo {

void gather_linear(OpContext& c, const void* send, void* recv, size_t count, int root) {
  Prims prims(c);
  const size_t block = count * c.esize;
  if (c.rank != root) {
    prims.send(root, send, block, transport::SenderWork::idle(block));
    prims.flush();
    return;
  }
  auto* out = static_cast<char*>(recv);
  char* mine = out + static_cast<size_t>(root) * block;
  if (send != mine && block > 0) local_copy(c, mine, send, block, block * static_cast<size_t>(c.size + 1));
  for (int i = 1; i < c.size; ++i) {
    int r = mod(root + i, c.size);
    prims.recv(r, out + static_cast<size_t>(r) * block, block);
  }
}

void scatter_linear(OpContext& c, const void* send, void* recv, size_t count, int root) {
  Prims prims(c);
  const size_t block = count * c.esize;
  if (c.rank != root) {
    prims.recv(root, recv, block);
    return;
  }
  const auto* in = static_cast<const char*>(send);
  for (int i = 1; i < c.size; ++i) {
    int r = mod(root + i, c.size);
    prims.send(r, in + static_cast<size_t>(r) * block, block);
  }
  const char* mine = in + static_cast<size_t>(root) * block;
  if (recv != mine && block > 0) local_copy(c, recv, mine, block, block * static_cast<size_t>(c.size + 1));
  prims.flush();
}

void reduce_linear(OpContext& c, const void* send, void* recv, size_t count, int root) {
  Prims prims(c);
  const size_t bytes = count * c.esize;
  const auto* in = static_cast<const char*>(send);
  if (c.rank != root) {  // the input as it is, in slices, while the root reduces the earlier ones
    const auto work = transport::SenderWork::idle_to_reducer(bytes);
    for (size_t off = 0; off < bytes; off += c.slice_bytes) {
      prims.send(root, in + off, std::min(c.slice_bytes, bytes - off), work);
    }
    prims.flush();
    return;
  }
  auto* out = static_cast<char*>(recv);
  for (size_t off = 0; off < bytes; off += c.slice_bytes) {
    const size_t len = std::min(c.slice_bytes, bytes - off);
    const char* local = in + off;
    for (int i = 1; i < c.size; ++i) {  // root+1, root+2, ...: a fixed order, so results repeat exactly
      prims.recv_reduce(mod(root + i, c.size), out + off, local, len, i == c.size - 1);
      local = out + off;
    }
  }
  prims.flush();
}

}  // namespace chorus::algo
