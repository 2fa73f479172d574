#!/usr/bin/env bash
# Measures the cost model's tuning on this machine (chorus-tune over tcp and over shared memory at 2, 3, 4 and
# 8 ranks) and writes it into src/tune/builtin_tuning.cc, the tuning Chorus uses without CHORUS_TUNING_FILE.
# Rebuild afterwards, then put the measured tables back with scripts/fit-measured.py (chorus-tune writes fresh
# entries, without them).
#   scripts/tune-builtin.sh [OUT_JSON]
# The entries of other kinds of host in OUT_JSON stay: chorus-tune replaces only those of this host's kind
# (copy rates within a factor of 2; docs/algorithms.md, "Tables per kind of host"). FRESH=1 starts from an
# empty file; TRANSPORTS="shm" (or "tcp") measures only that transport.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/data/builtin-tuning.json}
BIN=build/bin
if [ "${FRESH:-0}" = 1 ]; then rm -f "$OUT"; fi
for t in ${TRANSPORTS:-tcp shm}; do
  for n in 2 3 4 8; do
    echo "== chorus-tune, $t, $n ranks"
    CHORUS_TRANSPORT=$t "$BIN/chorus-run" -n "$n" -- "$BIN/chorus-tune" -o "$OUT" --no-choices | grep -v '^\[[1-9]'
  done
done
python3 - "$OUT" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
# Keep the in-process entry generic: it cannot be measured through chorus-run.
data["transports"]["inproc"] = [{"world_size": 2, "alpha_us": 6.0, "overhead_us": 1.0, "beta_ns_per_byte": 0.2,
                                 "gamma_ns_per_byte": 0.3, "algorithms": {}}]
text = json.dumps(data, indent=1, sort_keys=True)
src = open("src/tune/builtin_tuning.cc").read()
start = src.index('R"json(') + len('R"json(')
end = src.index(')json"')
open("src/tune/builtin_tuning.cc", "w").write(src[:start] + "\n" + text + "\n" + src[end:])
print("updated src/tune/builtin_tuning.cc from", sys.argv[1])
PY
