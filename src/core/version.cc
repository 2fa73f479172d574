#include "chorus/version.h"

#include "kernels/reduce.h"

#define CHORUS_STR2(x) #x
#define CHORUS_STR(x) CHORUS_STR2(x)

namespace chorus {
const char* version_string() noexcept {
  return CHORUS_STR(CHORUS_VERSION_MAJOR) "." CHORUS_STR(CHORUS_VERSION_MINOR) "." CHORUS_STR(CHORUS_VERSION_PATCH);
}

const char* kernel_isa() noexcept { return kernels::isa_name(kernels::active_isa()); }
}  // namespace chorus
