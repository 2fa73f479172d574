#!/bin/bash
# The adaptive choice (A, as built) against both directions by attach (B: CHORUS_SHM_ADAPT=0, the probe's
# choice) and both through the rings (C: CHORUS_SHM_CMA=0), 2-rank all_gather and all_to_all on shm, one build.
# Usage: docs/data/s53/ways-ab.sh ROUNDS [BIN]   (BIN: a build's bin directory, default build/bin)
set -eu
cd "$(dirname "$0")/../../.."
for c in allgather alltoall; do
  echo "## $c"
  python3 scripts/env-ab.py "${1:-8}" 2 shm 'X=0' 'CHORUS_SHM_ADAPT=0' --c 'CHORUS_SHM_CMA=0' --bin "${2:-build/bin}" \
    -- "$c" -b 256K -e 64M -f 2 -c 0 --rotate 0 -R 0 --iters-by-size --average 3 | tail -n +3
done
