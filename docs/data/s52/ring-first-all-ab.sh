#!/bin/bash
# Every reducing class through the rings from 1 MiB (B) against 16 MiB (A, the default before the fifty-second
# session), in and out of place alike, alternating rounds of one build (scripts/env-ab.py). Run at 09:50 UTC on
# commit a7a3835, whose default was then B; the settings below give A and B on later builds too.
# Usage: docs/data/s52/ring-first-all-ab.sh ROUNDS COLUMN (6: out of place, 10: in place)
set -eu
cd "$(dirname "$0")/../../.."
rounds=${1:-6} column=${2:-6}
A='CHORUS_SHM_RING_FIRST_BYTES=16777216 CHORUS_SHM_RING_FIRST_IN_PLACE_BYTES=16777216'
B='CHORUS_SHM_RING_FIRST_BYTES=1048576 CHORUS_SHM_RING_FIRST_IN_PLACE_BYTES=1048576'
for c in allreduce reducescatter reduce; do
  echo "## $c, 2 ranks, shm, column $column"
  python3 scripts/env-ab.py "$rounds" 2 shm "$A" "$B" --column "$column" \
    -- "$c" -b 256K -e 64M -f 2 -c 0 --rotate 0 -R 0 --iters-by-size --average 3 | tail -n +3
done
