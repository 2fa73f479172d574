#!/bin/bash
# An exchange goes one way (fifty-third session): two builds alternating, 2 ranks on shm, every collective from
# 1 to 64 MiB, rank 0's out-of-place and in-place medians (docs/data/s52/two-builds-ab.sh).
# Usage: docs/data/s53/pair-ab.sh ROUNDS BIN_A BIN_B   (A: the build before, e.g. e41391e's build/bin; B: after)
set -eu
cd "$(dirname "$0")/../../.."
rounds=${1:-6} a=$2 b=$3
for c in allgather alltoall allreduce reducescatter broadcast; do
  echo "## $c, 2 ranks, shm (A = $a, B = $b)"
  docs/data/s52/two-builds-ab.sh "$rounds" 2 "$a" "$b" "$c" -b 1M -e 64M -f 2 -c 0 --rotate 0 -R 0 \
    --iters-by-size --average 3
done
