// Linear gather and scatter: the root exchanges one block with every other rank. The root's link carries
// (N-1) blocks whatever the algorithm, so a tree would only save latency, not bandwidth.
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
  if (send != mine && block > 0) std::memcpy(mine, send, block);
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
  if (recv != mine && block > 0) std::memcpy(recv, mine, block);
  prims.flush();
}

}  // namespace chorus::algo
