#pragma once

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0

#include "chorus/export.h"

namespace chorus {
// The version of the library actually loaded, "major.minor.patch".
CHORUS_API const char* version_string() noexcept;
// The instruction set of the reduction kernels this process uses: "generic", "avx2" or "avx512" (the best
// the CPU supports, or CHORUS_KERNELS). chorus-perf prints it in its header.
CHORUS_API const char* kernel_isa() noexcept;
}  // namespace chorus
