#include "base/files.h"

#include <fstream>

namespace chorus::base {

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace chorus::base
