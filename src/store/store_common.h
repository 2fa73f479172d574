// Helpers shared by the store implementations: the add() arithmetic and the wording of errors, so that
// every store kind fails the same way.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::store {

// Parses the decimal integer held by a key (nullptr: a missing key, counted as 0), adds delta and returns
// the sum. If the value is not an integer or the sum overflows int64, returns nullopt and sets `error`.
std::optional<int64_t> checked_add(const std::string* current, int64_t delta, const std::string& key,
                                   std::string& error);
// checked_add that throws Error(InvalidArgument) with "<store> add: <error>".
int64_t add_to_value(const std::string* current, int64_t delta, std::string_view store, const std::string& key);

// A key quoted for a message, non-printable bytes escaped, long keys shortened.
std::string quote_key(std::string_view key);
// Several keys quoted and joined, long lists shortened.
std::string quote_keys(const std::vector<std::string>& keys);

// Throws Error(Timeout): `what` (e.g. "FileStore /tmp/x: get") found `missing` still absent after timeout.
[[noreturn]] void throw_timeout(std::string_view what, const std::vector<std::string>& missing,
                                std::chrono::milliseconds timeout);

}  // namespace chorus::store
