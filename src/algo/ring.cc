// Ring algorithms (see docs/algorithms.md for the diagrams and costs).
//
// Rank r sends to r+1 and receives from r-1. The data is cut into N segments and every segment into slices
// of at most slice_bytes. In the reduce-scatter phase, step t sends segment r-t-1 and receives segment
// r-t-2, so after N-1 steps rank r holds the full reduction of segment r; the all-gather phase then passes
// the finished segments around. The slice received at step t is the slice sent at step t+1, which is what
// lets the ring run as a pipeline of slices rather than of whole segments.
#include <cstring>

#include "algo/algorithms.h"

namespace chorus::algo {

namespace {

struct Ring {
  int rank, size, left, right;
  explicit Ring(const OpContext& c)
      : rank(c.rank), size(c.size), left(mod(c.rank - 1, c.size)), right(mod(c.rank + 1, c.size)) {}
};

// Calls fn(offset_bytes, bytes) for each slice of a segment.
template <class Fn>
void for_each_slice(size_t seg_off_bytes, size_t seg_bytes, size_t slice_bytes, Fn&& fn) {
  for (size_t off = 0; off < seg_bytes; off += slice_bytes) {
    fn(seg_off_bytes + off, std::min(slice_bytes, seg_bytes - off));
  }
}

}  // namespace

void ring_steps(OpContext& c, const void* send, void* recv, size_t count, int first_step, int end_step) {
  Ring ring(c);
  Prims prims(c);
  const int n = ring.size;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  Partition part{count, n};
  auto seg_off = [&](int s) { return part.offset(s) * c.esize; };
  auto seg_bytes = [&](int s) { return part.size(s) * c.esize; };
  // Which segment step t receives (and step t+1 sends): reduce-scatter steps 0..n-2 end with this rank
  // owning segment r; all-gather steps n-1..2n-3 pass the finished segments on.
  auto received = [&](int t) { return t < n - 1 ? mod(ring.rank - t - 2, n) : mod(ring.rank - (t - (n - 1)) - 1, n); };

  // The first step's send: the input's segment r-1, or (starting with the all-gather) the owned segment r.
  const int first = first_step == 0 ? mod(ring.rank - 1, n) : received(first_step - 1);
  const char* first_src = first_step == 0 ? in : out;
  for_each_slice(seg_off(first), seg_bytes(first), c.slice_bytes,
                 [&](size_t off, size_t len) { prims.send(ring.right, first_src + off, len); });

  for (int t = first_step; t < end_step; ++t) {
    bool reducing = t < n - 1;
    int seg = received(t);
    bool last_reduce = t == n - 2;
    bool forward = t + 1 < end_step;
    for_each_slice(seg_off(seg), seg_bytes(seg), c.slice_bytes, [&](size_t off, size_t len) {
      if (reducing) {
        prims.recv_reduce(ring.left, out + off, in + off, len, last_reduce);
      } else {
        prims.recv(ring.left, out + off, len);
      }
      if (forward) prims.send(ring.right, out + off, len);
    });
  }
  prims.flush();
}

void all_reduce_ring(OpContext& c, const void* send, void* recv, size_t count) {
  ring_steps(c, send, recv, count, 0, 2 * (c.size - 1));
}

void all_gather_ring(OpContext& c, const void* send, void* recv, size_t count) {
  Ring ring(c);
  Prims prims(c);
  const int n = ring.size;
  const size_t block = count * c.esize;
  auto* out = static_cast<char*>(recv);
  const auto* mine = static_cast<const char*>(send);
  if (mine != out + static_cast<size_t>(ring.rank) * block) {
    local_copy(c, out + static_cast<size_t>(ring.rank) * block, mine, block, block * static_cast<size_t>(n + 1));
  }
  // Step t sends block r-t and receives block r-t-1 straight into place. Every block sent stays as it is until
  // the operation ends (the input's, or a final block of the output), and every rank sends as it receives: an
  // exchange (SenderWork::exchanged).
  for_each_slice(0, block, c.slice_bytes, [&](size_t off, size_t len) {
    prims.send(ring.right, mine + off, len, transport::SenderWork::exchanged());
  });
  for (int t = 0; t < n - 1; ++t) {
    int seg = mod(ring.rank - t - 1, n);
    bool forward = t + 1 < n - 1;
    for_each_slice(static_cast<size_t>(seg) * block, block, c.slice_bytes, [&](size_t off, size_t len) {
      prims.recv(ring.left, out + off, len);
      if (forward) prims.send(ring.right, out + off, len, transport::SenderWork::exchanged());
    });
  }
  prims.flush();
}

void reduce_scatter_ring(OpContext& c, const void* send, void* recv, size_t count) {
  Ring ring(c);
  Prims prims(c);
  const int n = ring.size;
  const size_t block = count * c.esize;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);

  // Partial sums of other ranks' blocks have no home in the output (it holds one block), so they travel
  // through 2K slice-sized slots: the data is processed in rounds of K slices (a chunk), and within a round
  // step t uses the slots of parity t % 2. A slot is rewritten only after its previous send completed, and
  // that send is consumed by the right neighbour one step later, so a rank waits on a slot only while its
  // right neighbour is a step behind: around a ring not every rank can be behind its left neighbour, so
  // the waits cannot form a cycle. Extra memory: 2K slices, whatever the count.
  constexpr int kSlicesPerChunk = 2;
  constexpr int kSlots = 2 * kSlicesPerChunk;
  const size_t chunk = kSlicesPerChunk * c.slice_bytes;
  char* pool = c.scratch->buffer(kSlots * c.slice_bytes);
  transport::SendHandle slot_send[kSlots];
  bool slot_busy[kSlots] = {};

  const int first = mod(ring.rank - 1, n);
  for (size_t chunk_off = 0; chunk_off < block; chunk_off += chunk) {
    const size_t chunk_len = std::min(chunk, block - chunk_off);
    for_each_slice(static_cast<size_t>(first) * block + chunk_off, chunk_len, c.slice_bytes,
                   [&](size_t off, size_t len) { prims.send(ring.right, in + off, len); });
    for (int t = 0; t < n - 1; ++t) {
      const int seg = mod(ring.rank - t - 2, n);
      const bool last = t == n - 2;
      int j = 0;
      for_each_slice(chunk_off, chunk_len, c.slice_bytes, [&](size_t off, size_t len) {
        const char* local = in + static_cast<size_t>(seg) * block + off;
        if (last) {
          prims.recv_reduce(ring.left, out + off, local, len, /*last=*/true);
          return;
        }
        int s = (t % 2) * kSlicesPerChunk + j++;
        if (slot_busy[s]) prims.wait(slot_send[s]);
        char* tmp = pool + static_cast<size_t>(s) * c.slice_bytes;
        prims.recv_reduce(ring.left, tmp, local, len);
        slot_send[s] = prims.send(ring.right, tmp, len);
        slot_busy[s] = true;
      });
    }
  }
  prims.flush();
}

}  // namespace chorus::algo
