// Small reads of kernel-provided text files (/proc, /sys).
#pragma once

#include <string>

namespace chorus::base {

// The first line of the file at `path`, without its newline; "" when it cannot be read.
std::string read_first_line(const char* path);

}  // namespace chorus::base
