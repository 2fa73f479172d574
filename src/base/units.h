// Byte counts written the way people write them.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace chorus::base {

// Parses "512", "64K", "1M", "2G" (binary units; also "64k", "1MiB", "4KB"): the bytes, or nullopt for anything
// else (a sign, a fraction, another unit, trailing characters, more than 2^50 before the unit). The environment's
// sizes (CHORUS_SLICE_BYTES, ...) and sysfs's cache sizes ("32768K") are written this way.
std::optional<size_t> parse_size(std::string_view text);

}  // namespace chorus::base
