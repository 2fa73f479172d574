// Double binary tree all_reduce (see docs/algorithms.md).
//
// Tree 0 is the in-order binary tree of the lowest set bits: a rank v > 0 with lowest set bit b has the
// children v - b/2 and the largest v + b/2^k below the world size (when b >= 2), and rank 0 is the root
// with one child, the highest power of two below the size. Odd ranks are its leaves. Tree 1 is tree 0
// shifted by one rank, so those leaves are interior nodes there and each rank's links are busy in at most
// one tree's interior. Tree t reduces up and broadcasts down its half of the elements, pipelined in slices.
#include <bit>
#include <cstring>

#include "algo/algorithms.h"
#include "algo/registry.h"

namespace chorus::algo {

namespace {

int lowest_bit(int v) { return v & -v; }

// Position v's place in tree 0 of `size` ranks, in positions (tree 0 uses ranks as positions).
TreeNode in_order_tree(int v, int size) {
  TreeNode t;
  if (v == 0) {
    if (size > 1) t.child[0] = static_cast<int>(std::bit_floor(static_cast<unsigned>(size - 1)));
    return t;
  }
  const int b = lowest_bit(v);
  if (b >= 2) {
    t.child[0] = v - b / 2;
    // The right subtree loses its top levels when the size cuts it, so the right child is the highest
    // remaining node of it.
    for (int d = b / 2; d >= 1; d /= 2) {
      if (v + d < size) {
        t.child[1] = v + d;
        break;
      }
    }
  }
  // Of v - b and v + b, the parent is the one whose lowest set bit is 2b (v + b exactly when bit 2b of v is
  // clear); if that one is cut off by the size, v is the right child of v - b.
  const bool up_is_parent = (v & (2 * b)) == 0 && v + b < size;
  t.parent = up_is_parent ? v + b : v - b;
  return t;
}

// Tree t's range of elements [first, first + count).
struct Half {
  size_t first;
  size_t count;
};

Half tree_half(int t, size_t count) {
  const size_t split = tree_split(count);
  return t == 0 ? Half{0, split} : Half{split, count - split};
}

}  // namespace

void double_binary_tree(int rank, int size, TreeNode* tree0, TreeNode* tree1) {
  *tree0 = in_order_tree(rank, size);
  // In tree 1 the rank playing position x is x + 1 (mod size).
  TreeNode shifted = in_order_tree(mod(rank - 1, size), size);
  auto real = [&](int x) { return x < 0 ? -1 : mod(x + 1, size); };
  tree1->parent = real(shifted.parent);
  tree1->child[0] = real(shifted.child[0]);
  tree1->child[1] = real(shifted.child[1]);
}

// Tree 0 carries the larger half when the count is odd (all of it for count 1).
size_t tree_split(size_t count) { return count - count / 2; }

// Deadlock freedom. Every rank runs the same sequence of phases: for j = 0, 1, ...: up_0(j), up_1(j),
// down_0(j-1), down_1(j-1). Sends never block, so a rank only waits in a receive, and the frame it waits
// for is sent by a tree neighbour in the same phase: up_t(j) waits for the children's up_t(j) sends, which
// depend on their own children (ending at the leaves, which only send); down_t(j) waits for the parent's
// down_t(j) send, which depends on its parent (ending at the root, which only sends). Within one phase the
// waits follow an acyclic tree, and a rank enters a phase only after finishing the earlier ones, so by
// induction over the phases every receive is matched. Two ranks may be neighbours in both trees; they still
// agree on the order of the frames between them because both list them in this one phase order.
//
// Partial sums live in the output buffer: an interior node reduces slice j into out, sends it up from
// there, and overwrites it with the down phase's result. That result is only sent by the parent after it
// received (consumed) the up-send, so the region is never rewritten while a send still reads it; the same
// holds for a leaf sending from its input when the operation is in place.
void all_reduce_tree(OpContext& c, const void* send, void* recv, size_t count) {
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  if (c.size == 1) {
    if (in != out && count > 0) std::memcpy(out, in, count * c.esize);
    return;
  }
  Prims prims(c);
  TreeNode node[2];
  double_binary_tree(c.rank, c.size, &node[0], &node[1]);
  size_t first[2], bytes[2], slices[2];
  for (int t = 0; t < 2; ++t) {
    Half h = tree_half(t, count);
    first[t] = h.first * c.esize;
    bytes[t] = h.count * c.esize;
    slices[t] = num_slices(bytes[t], c.slice_bytes);
  }
  // The byte range of slice j of tree t, or false when the tree has no such slice.
  auto slice = [&](int t, size_t j, size_t* off, size_t* len) {
    if (j >= slices[t]) return false;
    *off = first[t] + j * c.slice_bytes;
    *len = std::min(c.slice_bytes, bytes[t] - j * c.slice_bytes);
    return true;
  };

  auto up = [&](int t, size_t j) {
    size_t off, len;
    if (!slice(t, j, &off, &len)) return;
    const TreeNode& n = node[t];
    const int children = n.num_children();
    const char* local = in + off;
    for (int i = 0; i < children; ++i) {
      const bool last = n.parent < 0 && i == children - 1;
      prims.recv_reduce(n.child[i], out + off, local, len, last);
      local = out + off;
    }
    if (n.parent >= 0) prims.send(n.parent, local, len);
  };
  auto down = [&](int t, size_t j) {
    size_t off, len;
    if (!slice(t, j, &off, &len)) return;
    const TreeNode& n = node[t];
    if (n.parent >= 0) prims.recv(n.parent, out + off, len);
    for (int i = 0; i < n.num_children(); ++i) prims.send(n.child[i], out + off, len);
  };

  const size_t total = std::max(slices[0], slices[1]);
  for (size_t j = 0; j <= total; ++j) {
    if (j < total) {
      up(0, j);
      up(1, j);
    }
    if (j > 0) {
      down(0, j - 1);
      down(1, j - 1);
    }
  }
  prims.flush();
}

Traffic all_reduce_tree_traffic(const CallShape& s) {
  Traffic traffic;
  if (s.size == 1) return traffic;
  TreeNode node[2];
  double_binary_tree(s.rank, s.size, &node[0], &node[1]);
  for (int t = 0; t < 2; ++t) {
    // Each slice goes up once and comes down once over every tree edge: a rank sends and receives its half
    // once per neighbour (parent and children).
    const uint64_t half = tree_half(t, s.count).count * s.esize;
    const uint64_t links = static_cast<uint64_t>(node[t].num_children() + (node[t].parent >= 0 ? 1 : 0));
    traffic.sent += links * half;
    traffic.received += links * half;
  }
  return traffic;
}

}  // namespace chorus::algo
