#include "algo/primitives.h"

#include <cstdlib>
#include <new>

namespace chorus::algo {

void Scratch::FreeDeleter::operator()(char* p) const { std::free(p); }

char* Scratch::buffer(size_t bytes) {
  if (bytes > cap_) {
    size_t cap = (std::max<size_t>(bytes, 4096) + 63) & ~size_t{63};
    void* p = std::aligned_alloc(64, cap);
    if (!p) throw std::bad_alloc();
    buf_.reset(static_cast<char*>(p));
    cap_ = cap;
  }
  return buf_.get();
}

std::vector<int> Topology::ranks_on(int h) const {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(host_of.size()); ++r)
    if (host_of[r] == h) out.push_back(r);
  return out;
}

int Topology::local_index(int r) const {
  int i = 0;
  for (int q = 0; q < r; ++q) i += host_of[q] == host_of[r];
  return i;
}

}  // namespace chorus::algo
