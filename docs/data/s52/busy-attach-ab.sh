#!/bin/bash
# Mid-sized exchange frames by cross-memory attach (CHORUS_SHM_SINGLE_COPY_BUSY_BYTES, default 8K) against
# the old rule (attach only from 64 KiB: CHORUS_SHM_SINGLE_COPY_BUSY_BYTES=65536), alternating rounds of one
# build (scripts/env-ab.py). Usage: docs/data/s52/busy-attach-ab.sh ROUNDS RANKS [COLUMN] (column 6: out of
# place, 10: in place).
set -eu
cd "$(dirname "$0")/../../.."
rounds=${1:-5} ranks=${2:-2} column=${3:-6}
for c in allgather alltoall allreduce reducescatter reduce broadcast; do
  echo "## $c, $ranks ranks, shm, column $column"
  python3 scripts/env-ab.py "$rounds" "$ranks" shm 'CHORUS_SHM_SINGLE_COPY_BUSY_BYTES=65536' 'X=0' --column "$column" \
    -- "$c" -b 4K -e 1M -f 2 -c 0 --rotate 0 -R 0 --iters-by-size --average 3 | tail -n +3
done
