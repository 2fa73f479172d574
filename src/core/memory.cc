// chorus::mem_alloc and friends: the public face of transport/shm/registered_memory.
#include "chorus/memory.h"

#include "transport/shm/registered_memory.h"

namespace chorus {

void* mem_alloc(size_t bytes) { return transport::registered_memory::allocate(bytes); }

void mem_free(void* ptr) { transport::registered_memory::release(ptr); }

bool mem_is_registered(const void* ptr, size_t bytes) noexcept {
  try {
    return transport::registered_memory::find(ptr, bytes).has_value();
  } catch (...) {
    return false;
  }
}

}  // namespace chorus
