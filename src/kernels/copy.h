// Copies of large blocks that will not be read again soon.
#pragma once

#include <cstddef>
#include <string>

namespace chorus::kernels {

// memcpy(dst, src, n) with non-temporal (streaming) stores for the body: the destination's lines are written
// whole without being read first (a plain store reads each line before it writes it) and do not displace the
// caches' contents. Worth it only where the copy's buffers do not fit in the cache anyway (stream_copy_pays);
// below that a plain memcpy is faster. Ends with a store fence, so the bytes are visible to other cores like
// those of a plain copy once it returns. dst and src must not overlap.
void stream_copy(void* dst, const void* src, size_t n) noexcept;

// Whether a copy is better made with stream_copy, given the bytes the whole operation touches on this host
// (every local rank's input and output): at least 1 MiB copied, and a working set past half the last-level
// cache (the rings, the peers' data in flight and whatever else runs share it). On the 2-core development
// host (32 MiB L3), 2-rank shm calls took 0.77-0.94 of their time at 8-16 MiB with the copy streamed, and
// 1.04 with a 1 MiB copy streamed inside a 6 MiB working set (docs/performance.md, "Streaming copies"). The
// cache's size is base::cache_share_bytes (the kernel's figure, glibc's said 320 MiB on a 32 MiB host, at most
// 16 MiB per usable core: on a 2-CPU guest that read 480 MiB, 2-rank all_gather and all_to_all of 16-64 MiB
// took 0.84-0.92 of their time with the copy streamed).
// `mode` is the communicator's CHORUS_STREAM_COPY: -1 (auto) decides as above, 0 never streams, 1 streams
// every copy of at least 1 MiB. Always false where stream_copy has no streaming stores (not x86-64).
bool stream_copy_pays(size_t copy_bytes, size_t working_set_bytes, int mode) noexcept;

// What stream_copy_pays decides under `mode`, in words, for the log ("streamed from 1 MiB where the working set
// passes 16 MiB (half the last-level cache)", "never streamed", ...).
std::string describe_stream_copy(int mode);

}  // namespace chorus::kernels
