#!/bin/bash
# In-place all_to_all, the slice-by-slice lockstep (PREV: a build of 0e0de00, e.g. git worktree add /tmp/prev51
# 0e0de00 and cmake --build build --target chorus-perf chorus-run) against this build (a slice aside, two in
# turn), alternating, ROUNDS rounds, 1-16 MiB (shm 2 ranks to 64 MiB):
#   PREV=/tmp/prev51 docs/data/s51/inplace-alltoall-ab.sh ROUNDS OUTFILE
# Rows: round build transport ranks size in-place-us #wrong (rank 0's chorus-perf columns, --average 3).
R=$1; OUT=$2; PREV=${PREV:-/tmp/prev51}
NEW=$(cd "$(dirname "$0")/../../.." && pwd)
: > "$OUT"
for r in $(seq 1 "$R"); do
  for cfg in "shm 2 64M" "tcp 2 16M" "shm 4 16M" "tcp 4 16M"; do
    set -- $cfg
    for b in prev new; do
      d=$NEW; [ $b = prev ] && d=$PREV
      CHORUS_TRANSPORT=$1 timeout 300 "$d/build/bin/chorus-run" -n "$2" -- "$d/build/bin/chorus-perf" alltoall -b 1M -e "$3" \
        -f 2 -c 1 --rotate 0 -R 0 --iters-by-size --average 3 2>&1 | grep "^\[0\] *[0-9]" \
        | awk -v r="$r" -v b=$b -v t="$1" -v n="$2" '{print r, b, t, n, $2, $11, $14}' >> "$OUT"
    done
  done
done
