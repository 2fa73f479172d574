// Bruck algorithms: all_gather and all_to_all in ceil(log2 N) rounds for any N, for messages small enough
// that latency (the number of rounds) matters more than bytes. Round k pairs rank r with r - 2^k and
// r + 2^k, so every rank hears, directly or relayed, from every other rank after the last round.
#include <algorithm>
#include <cstring>

#include "algo/algorithms.h"
#include "algo/registry.h"

namespace chorus::algo {

namespace {

// Calls fn(offset, len) for each slice of [off, off + bytes).
template <class Fn>
void for_each_slice(size_t off, size_t bytes, size_t slice_bytes, Fn&& fn) {
  for (size_t o = 0; o < bytes; o += slice_bytes) fn(off + o, std::min(slice_bytes, bytes - o));
}

// Calls fn(offset, len) for each slice of the blocks [first, first + cnt) taken modulo n: at most two
// contiguous pieces, the second one starting again at block 0.
template <class Fn>
void for_each_wrapped_slice(int first, int cnt, int n, size_t block, size_t slice_bytes, Fn&& fn) {
  const int head = std::min(cnt, n - first);
  for_each_slice(static_cast<size_t>(first) * block, static_cast<size_t>(head) * block, slice_bytes, fn);
  for_each_slice(0, static_cast<size_t>(cnt - head) * block, slice_bytes, fn);
}

// Blocks all_gather round k (distance d) moves: the first min(d, N - d) of the d this rank holds.
int all_gather_round_blocks(int d, int n) { return std::min(d, n - d); }

// Indices in [0, n) with bit `bit` set: the blocks all_to_all moves in the round of distance `bit`.
int blocks_with_bit(int bit, int n) {
  int c = 0;
  for (int i = 1; i < n; ++i) c += (i & bit) != 0;
  return c;
}

}  // namespace

void all_gather_bruck(OpContext& c, const void* send, void* recv, size_t count) {
  // Rank r keeps block (r + i) mod N at its real place, so "the first m blocks it holds" is the range of
  // real blocks [r, r + m) modulo N: at most two contiguous pieces, and no final rotation. Round k
  // (d = 2^k) sends the first min(d, N - d) blocks to r - d and receives as many, real blocks
  // [r + d, r + d + m), from r + d; after it rank r holds min(2d, N) blocks. The sender and the receiver of
  // a round cut the same real range into the same slices, and no two rounds share a (sender, receiver)
  // pair, so frames match in order.
  //
  // Deadlock and buffers: the sends of round k are posted before its receives, read only blocks received in
  // earlier rounds, and never wait; received blocks land beyond the ones sent (indices [d, d + m) versus
  // [0, m)), so an outgoing slice is never overwritten while in flight. A rank blocks only in the receives
  // of round k, which its partner posted as soon as it finished round k - 1: by induction on k every rank
  // finishes every round, and flush() completes because every frame has a matching receive.
  Prims prims(c);
  const int n = c.size, r = c.rank;
  const size_t block = count * c.esize;
  auto* out = static_cast<char*>(recv);
  const auto* mine = static_cast<const char*>(send);
  if (block == 0) return;
  const OwnBlock own{out, static_cast<size_t>(r) * block, block, mine};
  if (mine != out + own.off) local_copy(c, out + own.off, mine, block, block * static_cast<size_t>(n + 1));

  for (int d = 1; d < n; d *= 2) {
    const int m = all_gather_round_blocks(d, n);
    const int to = mod(r - d, n), from = mod(r + d, n);
    for_each_wrapped_slice(r, m, n, block, c.slice_bytes, [&](size_t off, size_t len) {
      prims.send(to, own.source(off, len), len, transport::SenderWork::exchanged());
    });
    for_each_wrapped_slice(from, m, n, block, c.slice_bytes,
                           [&](size_t off, size_t len) { prims.recv(from, out + off, len); });
  }
  prims.flush();
}

void all_to_all_bruck(OpContext& c, const void* send, void* recv, size_t count) {
  // The classic Bruck schedule works on a rotated array W: W[i] starts as the block this rank sends to
  // r + i. In round k (d = 2^k) every block whose index has bit k set moves to rank r + d (keeping its
  // index), and the blocks with that index come in from r - d. A block at index i thus travels i ranks in
  // ceil(log2 N) hops and arrives at its destination; afterwards W[i] is the block that rank r - i sent to r.
  // W lives in the output buffer with W[i] at block (r - i) mod N, the place its source's block belongs
  // in, so the final inverse rotation is folded into the addressing. The initial rotation is then
  // out[q] = send[(2r - q) mod N]; that map is an involution, so in place it is one swap per pair of blocks.
  //
  // Memory: a round moves up to floor(N/2) blocks in one packed message (sliced), so that a small call costs
  // ceil(log2 N) messages rather than one per block. Packing the outgoing blocks frees their places for the
  // incoming ones, and the incoming packed message is unpacked after it has arrived: one scratch buffer of
  // 2 x floor(N/2) blocks, about the whole buffer. That is accepted because this algorithm is for small
  // messages; large all_to_alls use pairwise, which needs one slice.
  //
  // Deadlock: the only wait mid-operation is at the start of round k, for this rank's round k - 1 sends
  // (their packed blocks are about to be overwritten). By induction on k: once every rank has finished the
  // receives of round k - 1, every round k - 1 send has been consumed, so every such wait returns, every rank
  // posts its round-k sends, and every round-k receive finds its frames. No wait is on a send of the round
  // being received, so no cycle forms; flush() completes because every frame has a matching receive.
  Prims prims(c);
  const int n = c.size, r = c.rank;
  const size_t block = count * c.esize;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  if (block == 0) return;
  auto at = [&](int q) { return static_cast<size_t>(mod(q, n)) * block; };  // byte offset of real block q

  if (in == out) {
    for (int q = 0; q < n; ++q) {
      const int p = mod(2 * r - q, n);
      if (q < p) std::swap_ranges(out + at(q), out + at(q) + block, out + at(p));
    }
  } else {
    for (int q = 0; q < n; ++q) std::memcpy(out + at(q), in + at(2 * r - q), block);
  }

  int max_blocks = 0;
  for (int d = 1; d < n; d *= 2) max_blocks = std::max(max_blocks, blocks_with_bit(d, n));
  const size_t half = static_cast<size_t>(max_blocks) * block;
  char* outgoing = c.scratch->buffer(2 * half);
  char* incoming = outgoing + half;

  for (int d = 1; d < n; d *= 2) {
    const int to = mod(r + d, n), from = mod(r - d, n);
    const size_t bytes = static_cast<size_t>(blocks_with_bit(d, n)) * block;
    // The previous round's packed blocks may still be read by its receiver. Its sends are the only ones
    // outstanding, so waiting for all of them is flush() (waiting for the last handle is not enough: it may
    // be an eager send that completed while an earlier zero-copy slice is still being read).
    if (d > 1) prims.flush();
    size_t off = 0;
    for (int i = 1; i < n; ++i) {
      if (i & d) {
        std::memcpy(outgoing + off, out + at(r - i), block);
        off += block;
      }
    }
    for_each_slice(0, bytes, c.slice_bytes, [&](size_t o, size_t len) { prims.send(to, outgoing + o, len); });
    for_each_slice(0, bytes, c.slice_bytes, [&](size_t o, size_t len) { prims.recv(from, incoming + o, len); });
    off = 0;
    for (int i = 1; i < n; ++i) {
      if (i & d) {
        std::memcpy(out + at(r - i), incoming + off, block);
        off += block;
      }
    }
  }
  prims.flush();
}

Traffic all_gather_bruck_traffic(const CallShape& s) {
  uint64_t blocks = 0;
  for (int d = 1; d < s.size; d *= 2) blocks += all_gather_round_blocks(d, s.size);
  uint64_t b = blocks * s.count * s.esize;  // N - 1 blocks: every block but its own arrives once
  return {b, b};
}

Traffic all_to_all_bruck_traffic(const CallShape& s) {
  uint64_t blocks = 0;
  for (int d = 1; d < s.size; d *= 2) blocks += blocks_with_bit(d, s.size);
  uint64_t b = blocks * s.count * s.esize;  // sum over i < N of popcount(i) blocks, each way
  return {b, b};
}

}  // namespace chorus::algo
