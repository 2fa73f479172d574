#pragma once

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0

#include "chorus/export.h"

namespace chorus {
// The version of the library actually loaded, "major.minor.patch".
CHORUS_API const char* version_string() noexcept;
}  // namespace chorus
