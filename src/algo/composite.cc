// Algorithms built from simpler schedules: all_reduce as reduce + broadcast, broadcast as scatter + ring
// all-gather or as a pipelined chain, reduce as ring reduce-scatter + gather. See docs/algorithms.md.
#include <cstring>

#include "algo/algorithms.h"

namespace chorus::algo {

void all_reduce_reduce_broadcast(OpContext& c, const void* send, void* recv, size_t count) {
  // The textbook definition: the sum lands on rank 0, which sends it back to everyone.
  reduce_binomial(c, send, recv, count, 0);
  broadcast_binomial(c, recv, recv, count, 0);
}

void broadcast_chain(OpContext& c, const void* send, void* recv, size_t count, int root) {
  Prims prims(c);
  const int n = c.size, v = mod(c.rank - root, n);
  const int prev = mod(c.rank - 1, n), next = mod(c.rank + 1, n);
  const bool has_next = v + 1 < n;
  const size_t bytes = count * c.esize;
  auto* out = static_cast<char*>(recv);
  const char* src = v == 0 ? static_cast<const char*>(send) : out;
  const bool stream = src != out && local_streams(c, bytes, 2 * bytes);
  // In place, the root only sends, to one rank, so the transport may share the copying with it. Out of
  // place, it has its own copy to make: it copies each slice into its output right after sending it, while
  // the receiver reads that slice.
  const auto work =
      (v == 0 && src == out ? transport::SenderWork::idle(bytes) : transport::SenderWork::busy()).along_tree();
  for (size_t off = 0; off < bytes; off += c.slice_bytes) {
    size_t len = std::min(c.slice_bytes, bytes - off);
    if (v > 0) prims.recv(prev, out + off, len);
    if (has_next) prims.send(next, src + off, len, work);
    if (src != out) copy_piece(stream, out + off, src + off, len);
  }
  prims.flush();
}

void broadcast_scatter_allgather(OpContext& c, const void* send, void* recv, size_t count, int root) {
  Prims prims(c);
  const int n = c.size, v = mod(c.rank - root, n);
  auto real = [&](int vr) { return mod(vr + root, n); };
  auto* out = static_cast<char*>(recv);
  if (v == 0 && send != recv && count > 0) local_copy(c, out, send, count * c.esize, 2 * count * c.esize);
  // What the root sends of its own data comes from the input, not from the copy just made (see OwnBlock).
  const char* src = v == 0 ? static_cast<const char*>(send) : out;
  // Piece i belongs to virtual rank i.
  Partition pieces{count, n};
  auto piece_off = [&](int i) { return pieces.offset(i) * c.esize; };
  auto range_bytes = [&](int lo, int len) { return piece_off(std::min(lo + len, n)) - piece_off(lo); };

  // Binomial scatter: virtual rank v receives pieces [v, v + subtree) from its parent, then hands each child
  // its subtree's pieces, largest subtree first.
  int mask = 1;
  while (mask < n && !(v & mask)) mask <<= 1;
  if (v != 0) {
    int parent = real(v - mask);
    prims.recv(parent, out + piece_off(v), range_bytes(v, std::min(mask, n - v)));
  }
  for (int m = mask >> 1; m > 0; m >>= 1) {
    int child = v + m;
    if (child >= n) continue;
    int sub = std::min(m, n - child);
    prims.send(real(child), src + piece_off(child), range_bytes(child, sub));
  }

  // Ring all-gather of the pieces: virtual ranks are consecutive around the ring.
  const int left = real(v - 1), right = real(v + 1);
  auto piece_slices = [&](int i, auto&& fn) {
    i = mod(i, n);
    size_t lo = piece_off(i), len = pieces.size(i) * c.esize;
    for (size_t o = 0; o < len; o += c.slice_bytes) fn(lo + o, std::min(c.slice_bytes, len - o));
  };
  piece_slices(v, [&](size_t off, size_t len) { prims.send(right, src + off, len); });
  for (int t = 0; t < n - 1; ++t) {
    bool forward = t + 1 < n - 1;
    piece_slices(v - t - 1, [&](size_t off, size_t len) {
      prims.recv(left, out + off, len);
      if (forward) prims.send(right, out + off, len);
    });
  }
  prims.flush();
}

void reduce_reduce_scatter_gather(OpContext& c, const void* send, void* recv, size_t count, int root) {
  Prims prims(c);
  const int n = c.size, v = mod(c.rank - root, n);
  auto real = [&](int vr) { return mod(vr + root, n); };
  const int left = real(v - 1), right = real(v + 1);
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  // The vector is processed in chunks of N slices: in each, a ring reduce-scatter leaves virtual rank i with
  // the reduction of segment i (at most a slice), which it sends to the root. Partial sums travel through two
  // slots of parity t % 2 (reused only after their send completed, as in reduce_scatter_ring), plus one for
  // the finished segment of a non-root rank: extra memory is three slices whatever the count.
  const size_t chunk = std::max<size_t>(1, c.slice_bytes / c.esize) * static_cast<size_t>(n);
  char* pool = c.scratch->buffer(3 * c.slice_bytes);
  transport::SendHandle slot_send[3];
  bool busy[3] = {};
  auto slot = [&](int s) {
    if (busy[s]) prims.wait(slot_send[s]);
    busy[s] = false;
    return pool + static_cast<size_t>(s) * c.slice_bytes;
  };
  for (size_t off = 0; off < count; off += chunk) {
    Partition p{std::min(chunk, count - off), n};
    auto at = [&](auto* base, int s) { return base + (off + p.offset(mod(s, n))) * c.esize; };
    auto len = [&](int s) { return p.size(mod(s, n)) * c.esize; };
    prims.send(right, at(in, v - 1), len(v - 1));
    for (int t = 0; t < n - 1; ++t) {
      int s = v - t - 2;
      if (t < n - 2) {
        char* tmp = slot(t % 2);
        prims.recv_reduce(left, tmp, at(in, s), len(s));
        slot_send[t % 2] = prims.send(right, tmp, len(s));
        busy[t % 2] = true;
      } else if (v == 0) {
        prims.recv_reduce(left, at(out, 0), at(in, 0), len(0), /*last=*/true);
      } else {
        char* mine = slot(2);
        prims.recv_reduce(left, mine, at(in, v), len(v), /*last=*/true);
        slot_send[2] = prims.send(root, mine, len(v));
        busy[2] = true;
      }
    }
    if (v == 0) {
      for (int q = 1; q < n; ++q) prims.recv(real(q), at(out, q), len(q));
    }
  }
  prims.flush();
}

}  // namespace chorus::algo
