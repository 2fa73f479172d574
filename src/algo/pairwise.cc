// Pairwise all-to-all. At step k every rank r exchanges one block with partner (k - r) mod N; the pairing
// is symmetric (the partner's partner is r), so each step is N/2 independent exchanges and the schedule
// works in place: the block sent to the partner is the one its block replaces (copied aside a slice at a
// time first). Out of place all sends are posted first.
//
// Pairwise reduce-scatter: every rank sends each block of its input straight to the block's owner, which
// reduces the N - 1 contributions into its output.
#include <cstring>

#include "algo/algorithms.h"

namespace chorus::algo {

void all_to_all_pairwise(OpContext& c, const void* send, void* recv, size_t count) {
  Prims prims(c);
  const size_t block = count * c.esize;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const bool in_place = in == out;
  if (!in_place) {
    // Out of place every send reads only the input, so all of them are posted before any receive (a
    // transport keeps writing queued sends while a receive waits): a rank's receives then wait only for
    // each peer to have entered the call, not for the peer to finish its earlier steps. Where ranks take
    // turns on the cores, a step-by-step exchange waits at every step for its partner to be scheduled.
    auto each_partner = [&](auto&& fn) {
      for (int k = 0; k < c.size; ++k) {
        const int partner = mod(k - c.rank, c.size);
        if (partner == c.rank) continue;
        const size_t base = static_cast<size_t>(partner) * block;
        for (size_t off = 0; off < block; off += c.slice_bytes) {
          fn(partner, base + off, std::min(c.slice_bytes, block - off));
        }
      }
    };
    each_partner([&](int partner, size_t at, size_t len) {
      prims.send(partner, in + at, len, transport::SenderWork::exchanged());
    });
    const size_t mine = static_cast<size_t>(c.rank) * block;
    if (block > 0) local_copy(c, out + mine, in + mine, block, 2 * block * static_cast<size_t>(c.size));
    each_partner([&](int partner, size_t at, size_t len) { prims.recv(partner, out + at, len); });
    prims.flush();
    return;
  }
  // In place the outgoing bytes must be gone before the incoming ones replace them. Slice by slice (send,
  // receive aside, wait for the send, copy in), every slice waited for the partner to take the one before, and
  // by cross-memory attach, which reads a slice where it lies, the two ranks moved in lockstep. Instead each
  // slice is copied aside first, sent from there and received straight into place, through two slice buffers
  // in turn: a slice's send is waited for only when its buffer is wanted again, a slice later, by which time
  // the partner, which receives in the order we send, has mostly taken it. (Against the lockstep, 1-64 MiB:
  // shm 0.50-0.78 of the time at 2 ranks and 0.55-0.72 at 4, tcp 0.86-1.06 and 0.85-1.00; chunks of 2 or 4
  // slices did as well on shm but up to 1.6 times the lockstep's time on tcp: docs/performance.md, "In-place
  // all_to_all".)
  const size_t slice = std::min(block, c.slice_bytes);
  char* aside = block > 0 ? c.scratch->buffer(2 * slice) : nullptr;
  transport::SendHandle pending[2];
  bool sent[2] = {false, false};
  int turn = 0;
  for (int k = 0; k < c.size; ++k) {
    const int partner = mod(k - c.rank, c.size);
    const size_t base = static_cast<size_t>(partner) * block;
    if (partner == c.rank) continue;  // in place: its own block is where it belongs
    for (size_t off = 0; off < block; off += slice) {
      const size_t len = std::min(slice, block - off);
      char* buf = aside + static_cast<size_t>(turn) * slice;
      if (sent[turn]) prims.wait(pending[turn]);
      std::memcpy(buf, out + base + off, len);
      pending[turn] = prims.send(partner, buf, len);
      sent[turn] = true;
      prims.recv(partner, out + base + off, len);
      turn ^= 1;
    }
  }
  prims.flush();
}

void reduce_scatter_pairwise(OpContext& c, const void* send, void* recv, size_t count) {
  // Every contribution to a block goes straight to its owner: rank r sends input block r + k to rank r + k
  // and reduces the contribution of rank r - k into its output, for k = 1 .. N - 1. Step k pairs r with a
  // distinct peer in each direction, so each ordered pair of ranks carries exactly one block, in slices,
  // and the frames match in order. Unlike the ring, no partial sum is forwarded, so nothing needs a
  // temporary: the output is the accumulator (the first contribution combines with input block r, later
  // ones with the output; the last one divides for Avg). Receives run slice by slice over all peers, so a
  // slice stays in cache while its N - 1 contributions are combined, in the same order for every element.
  //
  // Deadlock and buffers: all sends are posted before any receive, read only input blocks other than r
  // (never written, even in place, where the output is input block r) and are never waited for before the
  // final flush. A rank blocks only in receives whose frames its peer posted before it could block, and
  // flush() completes because every frame has a matching receive.
  Prims prims(c);
  const int n = c.size, r = c.rank;
  const size_t block = count * c.esize;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const char* own = in + static_cast<size_t>(r) * block;  // equals out in place

  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n);
    const char* src = in + static_cast<size_t>(to) * block;
    for (size_t off = 0; off < block; off += c.slice_bytes) {
      prims.send(to, src + off, std::min(c.slice_bytes, block - off), transport::SenderWork::exchanged());
    }
  }
  for (size_t off = 0; off < block; off += c.slice_bytes) {
    const size_t len = std::min(c.slice_bytes, block - off);
    for (int k = 1; k < n; ++k) {
      const char* local = k == 1 ? own + off : out + off;
      prims.recv_reduce(mod(r - k, n), out + off, local, len, /*last=*/k == n - 1);
    }
  }
  prims.flush();
}

}  // namespace chorus::algo
