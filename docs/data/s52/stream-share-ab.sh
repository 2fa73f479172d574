#!/bin/bash
# Own-block copies streamed where the working set passes half the cache a process can count on (the kernel's
# figure, at most 16 MiB per usable core: here 16 MiB; B, the default since the fifty-second session) against
# never streaming (CHORUS_STREAM_COPY=0: A; the old rule, half of the kernel's 480 MiB, streamed on this host
# only where the working set passed 240 MiB: the 2-rank all_to_all of 64 MiB). Alternating rounds of one build.
# Usage: docs/data/s52/stream-share-ab.sh ROUNDS RANKS
set -eu
cd "$(dirname "$0")/../../.."
rounds=${1:-8} ranks=${2:-2}
for c in allgather alltoall broadcast; do
  echo "## $c, $ranks ranks, shm, out of place"
  python3 scripts/env-ab.py "$rounds" "$ranks" shm 'CHORUS_STREAM_COPY=0' 'X=0' \
    -- "$c" -b 1M -e 64M -f 2 -c 0 --rotate 0 -R 0 --iters-by-size --average 3 | tail -n +3
done
