// Pairwise all-to-all. At step k every rank r exchanges one block with partner (k - r) mod N; the pairing
// is symmetric (the partner's partner is r), so each step is N/2 independent exchanges and the schedule
// works in place: the block sent to the partner is the one its block replaces.
#include <cstring>

#include "algo/algorithms.h"

namespace chorus::algo {

void all_to_all_pairwise(OpContext& c, const void* send, void* recv, size_t count) {
  Prims prims(c);
  const size_t block = count * c.esize;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const bool in_place = in == out;
  char* staging = in_place && block > 0 ? c.scratch->buffer(std::min(block, c.slice_bytes)) : nullptr;

  for (int k = 0; k < c.size; ++k) {
    int partner = mod(k - c.rank, c.size);
    size_t base = static_cast<size_t>(partner) * block;
    if (partner == c.rank) {
      if (!in_place && block > 0) std::memcpy(out + base, in + base, block);
      continue;
    }
    for (size_t off = 0; off < block; off += c.slice_bytes) {
      size_t len = std::min(c.slice_bytes, block - off);
      auto h = prims.send(partner, in + base + off, len);
      if (in_place) {
        // The outgoing slice must be gone before the incoming one replaces it.
        prims.recv(partner, staging, len);
        prims.wait(h);
        std::memcpy(out + base + off, staging, len);
      } else {
        prims.recv(partner, out + base + off, len);
      }
    }
  }
  prims.flush();
}

}  // namespace chorus::algo
