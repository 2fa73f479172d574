// Dissemination barrier (Hensgen, Finkel and Manber): in round k every rank signals rank r + 2^k and waits
// for rank r - 2^k. After ceil(log2 N) rounds every rank has heard, directly or not, from every other.
#include "algo/algorithms.h"

namespace chorus::algo {

void barrier_dissemination(OpContext& c) {
  Prims prims(c);
  for (int dist = 1; dist < c.size; dist <<= 1) {
    prims.send(mod(c.rank + dist, c.size), nullptr, 0);
    prims.recv(mod(c.rank - dist, c.size), nullptr, 0);
  }
  prims.flush();
}

}  // namespace chorus::algo
