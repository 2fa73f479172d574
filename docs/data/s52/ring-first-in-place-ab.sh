#!/bin/bash
# In-place reducing classes through the rings from 1 MiB (CHORUS_SHM_RING_FIRST_IN_PLACE_BYTES, the default: B)
# against the old rule (16 MiB, as out of place: A), alternating rounds of one build (scripts/env-ab.py), each
# a sweep from 8 B as compare.sh's (its warm-up at 64 MiB first).
# Usage: docs/data/s52/ring-first-in-place-ab.sh ROUNDS COLUMN (6: out of place, 10: in place)
set -eu
cd "$(dirname "$0")/../../.."
rounds=${1:-6} column=${2:-10}
for c in allreduce reducescatter; do
  echo "## $c, 2 ranks, shm, column $column"
  python3 scripts/env-ab.py "$rounds" 2 shm 'CHORUS_SHM_RING_FIRST_IN_PLACE_BYTES=16777216' 'X=0' --column "$column" \
    -- "$c" -b 8 -e 64M -f 2 -c 0 --rotate 0 -R 0 --iters-by-size --average 3 | tail -n +3
done
