// Registered memory: buffers the ranks on one host read directly from each other.
//
// A collective whose send buffer (or, for the all-gather half of an all_reduce, receive buffer) lies in memory
// from mem_alloc moves large payloads on the shared-memory transport without a copy through the kernel: the
// receiving rank maps the region once and then reduces or copies straight from it. Buffers from anywhere
// else work exactly as before (one copy by cross-memory attach, or two through the rings). The same idea as
// NCCL's ncclMemAlloc. Nothing else changes: a region is ordinary read-write memory in this process, and
// peers only ever map it read-only. One difference from heap memory: a region is a shared mapping, so a
// child created by fork() shares its pages with the parent instead of getting a copy on write.
#pragma once

#include <cstddef>

#include "chorus/export.h"

namespace chorus {

// At least `bytes` bytes (rounded up to whole pages), page-aligned and zero-filled. Any thread, any time,
// with or without a communicator. Throws Error(InvalidArgument) for 0 bytes and Error(SystemError) when the
// kernel refuses (the message names the call and errno).
CHORUS_API void* mem_alloc(size_t bytes);

// Frees memory from mem_alloc; nullptr is ignored. Throws Error(InvalidArgument) for a pointer that is not
// the start of a live mem_alloc region. No collective may still be using it. Peers that mapped the region
// keep their read-only mapping, bounded in number, until they need the room.
CHORUS_API void mem_free(void* ptr);

// Whether all of [ptr, ptr + bytes) lies in one live mem_alloc region.
CHORUS_API bool mem_is_registered(const void* ptr, size_t bytes) noexcept;

}  // namespace chorus
