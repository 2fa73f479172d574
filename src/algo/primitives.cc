#include "algo/primitives.h"

#include <cstdlib>
#include <new>

#include "chorus/error.h"
#include "transport/shm/registered_memory.h"

namespace chorus::algo {

void ScratchDeleter::operator()(char* p) const {
  if (registered) {
    transport::registered_memory::release(p);
  } else {
    std::free(p);
  }
}

char* Scratch::buffer(size_t bytes) {
  if (bytes > cap_) {
    size_t cap = (std::max<size_t>(bytes, 4096) + 63) & ~size_t{63};
    buf_.reset();
    cap_ = 0;
    if (cap >= kRegisteredScratchBytes) {
      try {
        buf_ = std::unique_ptr<char, ScratchDeleter>(static_cast<char*>(transport::registered_memory::allocate(cap)),
                                                  ScratchDeleter{true});
      } catch (const Error&) {
        // No memfd here (a sandbox without it): plain memory, which peers read by cross-memory attach.
      }
    }
    if (!buf_) {
      void* p = std::aligned_alloc(64, cap);
      if (!p) throw std::bad_alloc();
      buf_ = std::unique_ptr<char, ScratchDeleter>(static_cast<char*>(p), ScratchDeleter{false});
    }
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
