#include "chorus/store.h"

#include <charconv>
#include <limits>

#include <fmt/format.h>

#include "base/error.h"
#include "store/store_common.h"

namespace chorus {

Store::~Store() = default;

namespace store {

std::optional<int64_t> checked_add(const std::string* current, int64_t delta, const std::string& key,
                                   std::string& error) {
  int64_t value = 0;
  if (current != nullptr) {
    const char* begin = current->data();
    const char* end = begin + current->size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (current->empty() || ec != std::errc() || ptr != end) {
      error = fmt::format(
          "key {} holds {}, which is not a decimal integer; add() only works on keys that are "
          "missing or were written by add()",
          quote_key(key), quote_key(*current));
      return std::nullopt;
    }
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    error = fmt::format("{} + {} on key {} overflows int64", value, delta, quote_key(key));
    return std::nullopt;
  }
  return sum;
}

int64_t add_to_value(const std::string* current, int64_t delta, std::string_view store, const std::string& key) {
  std::string error;
  auto sum = checked_add(current, delta, key, error);
  if (!sum) base::throw_error(ErrorCode::InvalidArgument, fmt::format("{} add: {}", store, error));
  return *sum;
}

std::string quote_key(std::string_view key) {
  constexpr size_t kShown = 100;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kShown; ++i) {
    auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  out += "'";
  if (key.size() > kShown) out += fmt::format("... ({} bytes)", key.size());
  return out;
}

std::string quote_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += quote_key(keys[i]);
  }
  if (keys.size() > kShown) out += fmt::format(" and {} more", keys.size() - kShown);
  return out;
}

void throw_timeout(std::string_view what, const std::vector<std::string>& missing, std::chrono::milliseconds timeout) {
  base::throw_error(ErrorCode::Timeout,
                    fmt::format("{}: {} {} still missing after {} ms; the rank that should set {} may have failed or "
                                "not started yet (raise the store timeout if it is only slow)",
                                what, missing.size() == 1 ? "key" : "keys", quote_keys(missing), timeout.count(),
                                missing.size() == 1 ? "it" : "them"));
}

}  // namespace store
}  // namespace chorus
