#include "base/units.h"

#include <cctype>

namespace chorus::base {

std::optional<size_t> parse_size(std::string_view t) {
  if (t.empty()) return std::nullopt;
  size_t i = 0;
  unsigned long long x = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
    x = x * 10 + static_cast<unsigned>(t[i] - '0');
    if (x > (1ull << 50)) return std::nullopt;
    ++i;
  }
  if (i == 0) return std::nullopt;
  if (i < t.size()) {
    char u = static_cast<char>(std::toupper(static_cast<unsigned char>(t[i])));
    int shift = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : -1;
    if (shift < 0) return std::nullopt;
    x <<= shift;
    ++i;
    if (i < t.size() && (t[i] == 'B' || t[i] == 'b' || t[i] == 'i')) ++i;
    if (i < t.size() && (t[i] == 'B' || t[i] == 'b')) ++i;
  }
  if (i != t.size()) return std::nullopt;
  return static_cast<size_t>(x);
}

}  // namespace chorus::base
