// Symbol visibility for libchorus. The library is built with hidden visibility; only declarations marked
// CHORUS_API are exported.
#pragma once

#if defined(CHORUS_BUILDING_LIBRARY)
#define CHORUS_API __attribute__((visibility("default")))
#else
#define CHORUS_API
#endif
