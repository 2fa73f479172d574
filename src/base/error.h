// Helpers to build and throw chorus::Error from any layer.
#pragma once

#include <string>

#include "chorus/error.h"

namespace chorus::base {

[[noreturn]] void throw_error(ErrorCode code, const std::string& message, int peer = -1);
// Throws Error(SystemError) with "<what>: <strerror(err)>".
[[noreturn]] void throw_errno(const std::string& what, int err);

}  // namespace chorus::base
