#!/bin/bash
# Out-of-place reducing classes through the rings from 4 MiB (CHORUS_SHM_RING_FIRST_BYTES, the default since the
# fifty-second session: B) against 16 MiB (the default before: A), alternating rounds of one build
# (scripts/env-ab.py), each a sweep from 8 B as compare.sh's (its warm-up at 64 MiB first).
# Usage: docs/data/s52/ring-first-out-ab.sh ROUNDS
set -eu
cd "$(dirname "$0")/../../.."
rounds=${1:-6}
for c in allreduce reducescatter; do
  echo "## $c, 2 ranks, shm, out of place"
  python3 scripts/env-ab.py "$rounds" 2 shm 'CHORUS_SHM_RING_FIRST_BYTES=16777216' 'X=0' \
    -- "$c" -b 8 -e 64M -f 2 -c 0 --rotate 0 -R 0 --iters-by-size --average 3 | tail -n +3
done
