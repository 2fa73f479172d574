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

}  // namespace chorus::algo
