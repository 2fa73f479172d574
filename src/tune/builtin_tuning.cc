// The tuning Chorus uses without CHORUS_TUNING_FILE: chorus-tune's output on the project's development
// machine (2 cores, TCP loopback and in-process), see docs/algorithms.md. Regenerate with
// scripts/tune-builtin.sh.
#include "tune/cost_model.h"

namespace chorus::tune {

namespace {
// clang-format off
const char* kBuiltin = R"json(
{
  "chorus_tuning": 1,
  "transports": {
    "tcp": [
      {"world_size": 2, "alpha_us": 9.0, "overhead_us": 1.5, "beta_ns_per_byte": 0.35, "gamma_ns_per_byte": 0.3, "algorithms": {}}
    ],
    "inproc": [
      {"world_size": 2, "alpha_us": 6.0, "overhead_us": 1.0, "beta_ns_per_byte": 0.2, "gamma_ns_per_byte": 0.3, "algorithms": {}}
    ]
  }
}
)json";
// clang-format on
}  // namespace

const Tuning& builtin_tuning() {
  static const Tuning t = parse_tuning(kBuiltin, "built-in tuning");
  return t;
}

}  // namespace chorus::tune
