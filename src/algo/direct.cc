// Direct all_reduce (see docs/algorithms.md): rank q owns block q of Partition{count, N}. Every rank sends
// its contribution to each block straight to the owner, the owner reduces the N-1 contributions, and sends
// the reduced block straight to every peer: two latencies whatever N, but N-1 messages per rank and step, so
// it suits small worlds and small messages.
#include <cstring>

#include "algo/algorithms.h"

namespace chorus::algo {

// Order of the frames between a pair (r, q): first r's contribution to block q (slice by slice), then r's
// reduced block r (slice by slice). Each side sends in that order and receives in that order, so the
// per-pair streams always match. Peers are visited as r+1, r+2, ... when sending and r-1, r-2, ... when
// receiving, so the first frame a rank waits for is the first one its sender posted.
//
// Deadlock freedom: all contributions are posted before the first receive, so the reduce step only waits
// for sends that are already queued; a reduced slice is sent as soon as it is complete, and its receivers
// wait for nothing else. In place, a contribution to block q is read from the buffer that q's reduced block
// later overwrites; q only sends that block after it received (consumed) the contribution.
void all_reduce_direct(OpContext& c, const void* send, void* recv, size_t count) {
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const int n = c.size, r = c.rank;
  if (n == 1) {
    if (in != out && count > 0) std::memcpy(out, in, count * c.esize);
    return;
  }
  Prims prims(c);
  Partition part{count, n};
  auto block_off = [&](int q) { return part.offset(q) * c.esize; };
  auto block_bytes = [&](int q) { return part.size(q) * c.esize; };

  for (int k = 1; k < n; ++k) {
    const int q = mod(r + k, n);
    for (size_t o = 0; o < block_bytes(q); o += c.slice_bytes) {
      prims.send(q, in + block_off(q) + o, std::min(c.slice_bytes, block_bytes(q) - o));
    }
  }

  // Reduce my block slice by slice, so each slice is finished (and sent) while the next still arrives.
  const size_t mine = block_off(r), my_bytes = block_bytes(r);
  for (size_t o = 0; o < my_bytes; o += c.slice_bytes) {
    const size_t len = std::min(c.slice_bytes, my_bytes - o);
    char* dst = out + mine + o;
    const char* local = in + mine + o;
    for (int k = 1; k < n; ++k) {
      prims.recv_reduce(mod(r - k, n), dst, local, len, /*last=*/k == n - 1);
      local = dst;
    }
    for (int k = 1; k < n; ++k) prims.send(mod(r + k, n), dst, len);
  }

  for (int k = 1; k < n; ++k) {
    const int q = mod(r - k, n);
    for (size_t o = 0; o < block_bytes(q); o += c.slice_bytes) {
      prims.recv(q, out + block_off(q) + o, std::min(c.slice_bytes, block_bytes(q) - o));
    }
  }
  prims.flush();
}

}  // namespace chorus::algo
