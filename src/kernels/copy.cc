#include "kernels/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/cpu.h"

namespace chorus::kernels {

void stream_copy(void* dst, const void* src, size_t n) noexcept {
#if defined(__x86_64__)
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // Plain copy up to the first 64-byte boundary of the destination, whole lines by streaming stores (SSE2,
  // which every x86-64 has: the write-combining buffers merge the four stores of a line, so wider ones move
  // no more bytes), the rest plain.
  const size_t head = std::min(n, static_cast<size_t>((64 - reinterpret_cast<uintptr_t>(d) % 64) % 64));
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  const size_t body = n & ~size_t{63};
  for (size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + body, s + body, n - body);
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

#if defined(__x86_64__)
namespace {

constexpr size_t kStreamCopyMinBytes = size_t{1} << 20;

}  // namespace
#endif

bool stream_copy_pays(size_t copy_bytes, size_t working_set_bytes, int mode) noexcept {
#if defined(__x86_64__)
  if (copy_bytes < kStreamCopyMinBytes || mode == 0) return false;
  return mode > 0 || working_set_bytes > base::cache_share_bytes() / 2;
#else
  (void)copy_bytes;
  (void)working_set_bytes;
  (void)mode;
  return false;
#endif
}

std::string describe_stream_copy(int mode) {
#if defined(__x86_64__)
  if (mode == 0) return "never streamed (CHORUS_STREAM_COPY=0)";
  if (mode > 0) return "streamed from 1 MiB (CHORUS_STREAM_COPY=1)";
  return "streamed from 1 MiB where the working set passes " + std::to_string((base::cache_share_bytes() / 2) >> 20) +
         " MiB (half the last-level cache" +
         (base::cache_share_bytes() < base::last_level_cache_bytes() ? " this process's cores can count on" : "") + ")";
#else
  (void)mode;
  return "never streamed (no streaming stores on this architecture)";
#endif
}

}  // namespace chorus::kernels
