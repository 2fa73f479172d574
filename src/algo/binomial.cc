// Binomial trees (see docs/algorithms.md). Ranks are renumbered so the root is virtual rank 0; virtual rank
// v's parent is v with its lowest set bit cleared, and its children are v + 2^k for every 2^k below that
// bit. Data flows in slices, so a child forwards slice j while its parent is still sending slice j+1.
#include <cstring>
#include <vector>

#include "algo/algorithms.h"

namespace chorus::algo {

namespace {

struct Tree {
  int parent = -1;            // real rank, -1 at the root
  int children[32];           // real ranks, largest subtree first
  int num_children = 0;
};

// a mod n for a in [-n, 2n): a compare instead of the two divisions of mod(), on every small call's path.
int wrap(int a, int n) { return a < 0 ? a + n : a >= n ? a - n : a; }

Tree binomial_tree(int rank, int size, int root) {
  Tree t;
  int v = wrap(rank - root, size);
  int mask = 1;
  while (mask < size) {
    if (v & mask) {
      t.parent = wrap(v - mask + root, size);
      break;
    }
    mask <<= 1;
  }
  // Children are v + m for m = mask/2, mask/4, ..., 1 (for the root, every power of two below size).
  for (int m = mask >> 1; m > 0; m >>= 1) {
    if (v + m < size) t.children[t.num_children++] = wrap(v + m + root, size);
  }
  return t;
}

}  // namespace

void broadcast_binomial(OpContext& c, const void* send, void* recv, size_t count, int root) {
  Prims prims(c);
  Tree tree = binomial_tree(c.rank, c.size, root);
  const size_t bytes = count * c.esize;
  auto* out = static_cast<char*>(recv);
  const char* src = c.rank == root ? static_cast<const char*>(send) : out;
  const bool stream = src != out && local_streams(c, bytes, 2 * bytes);
  // In place, a root with one child (two ranks) only sends, to one rank: the transport may share the
  // copying with it. Out of place, the root copies each slice into its output right after sending it.
  const auto work = (tree.parent < 0 && tree.num_children == 1 && src == out ? transport::SenderWork::idle(bytes)
                                                                             : transport::SenderWork::busy())
                        .along_tree();
  for (size_t off = 0; off < bytes; off += c.slice_bytes) {
    size_t len = std::min(c.slice_bytes, bytes - off);
    if (tree.parent >= 0) prims.recv(tree.parent, out + off, len);
    for (int i = 0; i < tree.num_children; ++i) prims.send(tree.children[i], src + off, len, work);
    if (src != out) copy_piece(stream, out + off, src + off, len);
  }
  prims.flush();
}

void reduce_binomial(OpContext& c, const void* send, void* recv, size_t count, int root) {
  Prims prims(c);
  Tree tree = binomial_tree(c.rank, c.size, root);
  const size_t bytes = count * c.esize;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);

  if (tree.num_children == 0) {  // a leaf sends its input as it is, with nothing else to do
    const auto work = transport::SenderWork::idle_to_reducer(bytes).along_tree();
    for (size_t off = 0; off < bytes; off += c.slice_bytes) {
      prims.send(tree.parent, in + off, std::min(c.slice_bytes, bytes - off), work);
    }
    prims.flush();
    return;
  }
  // Children with the smallest subtrees finish first, so they are received first.
  constexpr int kSlots = 4;
  const size_t slice = std::min(c.slice_bytes, std::max(bytes, c.esize));
  char* pool = tree.parent >= 0 ? c.scratch->buffer(kSlots * slice) : nullptr;
  transport::SendHandle slot_send[kSlots];
  bool slot_busy[kSlots] = {};
  int next_slot = 0;
  for (size_t off = 0; off < bytes; off += c.slice_bytes) {
    size_t len = std::min(c.slice_bytes, bytes - off);
    char* acc;
    int s = 0;
    if (tree.parent < 0) {
      acc = out + off;  // the root accumulates in place
    } else {
      s = next_slot;
      next_slot = (next_slot + 1) % kSlots;
      if (slot_busy[s]) prims.wait(slot_send[s]);
      acc = pool + static_cast<size_t>(s) * slice;
    }
    const char* local = in + off;
    for (int i = tree.num_children - 1; i >= 0; --i) {
      bool last = tree.parent < 0 && i == 0;
      prims.recv_reduce(tree.children[i], acc, local, len, last);
      local = acc;
    }
    if (tree.parent >= 0) {
      slot_send[s] = prims.send(tree.parent, acc, len);
      slot_busy[s] = true;
    }
  }
  prims.flush();
}

}  // namespace chorus::algo
