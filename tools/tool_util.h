// Small helpers the command-line tools share.
#pragma once

#include <cstdlib>
#include <string>

#include "chorus/communicator.h"

namespace chorus::tools {

// This process's rank for an error message: the communicator's when there is one, else CHORUS_RANK, else "?".
inline std::string rank_label(const Communicator* comm) {
  if (comm != nullptr) return std::to_string(comm->rank());
  const char* env = std::getenv("CHORUS_RANK");
  return env != nullptr ? env : "?";
}

}  // namespace chorus::tools
