// Chorus: collective communication for N processes (or threads) over shared memory and TCP.
// This umbrella header includes the whole public API.
#pragma once

#include "chorus/communicator.h"
#include "chorus/error.h"
#include "chorus/export.h"
#include "chorus/memory.h"
#include "chorus/reducer.h"
#include "chorus/store.h"
#include "chorus/trace.h"
#include "chorus/tuning.h"
#include "chorus/types.h"
#include "chorus/version.h"
