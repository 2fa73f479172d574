// Fuzzes the tuning-file parser (tune::parse_tuning), which reads CHORUS_TUNING_FILE and chorus-tune's
// output: any text either parses into a tuning whose JSON form parses back to the same tables, or is refused
// with InvalidArgument; nothing else may escape. Lookups in a parsed tuning never fail, and the corrections
// and measurements interpolate to finite numbers.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "chorus/error.h"
#include "tune/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  chorus::tune::Tuning t;
  try {
    t = chorus::tune::parse_tuning(text, "fuzz");
  } catch (const chorus::Error& e) {
    if (e.code() != chorus::ErrorCode::InvalidArgument) __builtin_trap();
    return 0;
  }
  for (const auto& [name, entries] : t.transports) {
    for (int w : {1, 2, 3, 1 << 20}) (void)chorus::tune::entry_for(&t, name, w);
    // What algorithm selection computes from an entry is a number, never NaN or infinite.
    for (const chorus::tune::LinkEntry& e : entries) {
      for (const auto& [key, c] : e.algorithms) {
        for (double bytes : {0.0, 1.0, 7.0, 4096.0, 1e6, 3e9, 1e15}) {
          double r = c.correction(bytes), m = c.measured_time(bytes);
          if (!std::isfinite(r) || !std::isfinite(m)) __builtin_trap();
        }
      }
    }
  }
  std::string json = chorus::tune::tuning_to_json(t);
  chorus::tune::Tuning back = chorus::tune::parse_tuning(json, "round trip");
  if (back.transports.size() != t.transports.size()) __builtin_trap();
  return 0;
}
