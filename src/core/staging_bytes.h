// Staging storage that the library owns and all-reduces in: the Reducer's buckets and a group's fused
// all_reduces. From kRegisteredBytes it is registered memory (chorus::mem_alloc), which the ranks on a host read
// from each other in place, and the calls over it say so (CallOptions::registered); a group keeps a plain one
// too, for the fused calls that the cost model expects to run faster from heap memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <new>
#include <utility>

#include "chorus/error.h"
#include "chorus/memory.h"

namespace chorus::core {

// 64-byte aligned bytes, never null (even when empty, so that count-0 calls get a pointer). Whether a call over
// them says CallOptions::registered is decided by the size alone (meant_registered), which every rank shares,
// never by whether mem_alloc succeeded here: the ranks must agree on the flag, and a wrong flag costs speed
// only.
class StagingBytes {
 public:
  static constexpr size_t kRegisteredBytes = size_t{64} << 10;
  static bool meant_registered(size_t n) { return n >= kRegisteredBytes; }

  StagingBytes() = default;
  // `registered`: try mem_alloc (falling back to plain memory); else plain memory whatever the size.
  explicit StagingBytes(size_t n, bool registered) : n_(n) {
    if (registered) {
      try {
        p_ = static_cast<std::byte*>(mem_alloc(n));
        registered_ = true;
      } catch (const Error&) {
        // No memfd here: plain memory works the same, with one more copy on the shm transport.
      }
    }
    if (p_ == nullptr) p_ = static_cast<std::byte*>(::operator new (std::max<size_t>(n, 64), std::align_val_t{64}));
  }
  explicit StagingBytes(size_t n) : StagingBytes(n, meant_registered(n)) {}
  StagingBytes(StagingBytes&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)),
        n_(std::exchange(o.n_, 0)),
        registered_(std::exchange(o.registered_, false)) {}
  StagingBytes& operator=(StagingBytes&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    std::swap(registered_, o.registered_);
    return *this;
  }
  StagingBytes(const StagingBytes&) = delete;
  StagingBytes& operator=(const StagingBytes&) = delete;
  ~StagingBytes() {
    if (p_ == nullptr) return;
    if (registered_) {
      mem_free(p_);
    } else {
      ::operator delete (p_, std::align_val_t{64});
    }
  }

  std::byte* data() const { return p_; }
  size_t size() const { return n_; }
  // Whether mem_alloc gave the bytes (false below kRegisteredBytes, or where the kernel refused).
  bool registered() const { return registered_; }

 private:
  std::byte* p_ = nullptr;
  size_t n_ = 0;
  bool registered_ = false;
};

}  // namespace chorus::core
