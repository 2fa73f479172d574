#!/bin/bash
# Mid-sized exchanges by attach (default) against the old rule (CHORUS_SHM_SINGLE_COPY_BUSY_BYTES=65536) in the
# steady state: one size per run, 2000 timed calls after 5 warm-up calls, alternating rounds (scripts/env-ab.py).
# Usage: docs/data/s52/busy-attach-steady.sh ROUNDS
set -eu
cd "$(dirname "$0")/../../.."
rounds=${1:-6}
for c in allgather alltoall allreduce reducescatter; do
  for s in 16K 32K 64K; do
    echo "## $c $s, 2 ranks, shm, out of place"
    python3 scripts/env-ab.py "$rounds" 2 shm 'CHORUS_SHM_SINGLE_COPY_BUSY_BYTES=65536' 'X=0' \
      -- "$c" -b $s -e $s -c 0 --rotate 0 -R 0 -n 2000 -w 5 | tail -n 1
  done
done
