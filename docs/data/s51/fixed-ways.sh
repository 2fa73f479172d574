#!/bin/bash
# Every large shm payload by attach (CHORUS_SHM_CMA=1) against every one through the rings (CHORUS_SHM_CMA=0),
# the choice while running off (CHORUS_SHM_ADAPT=0), 2 ranks, 64 KiB-64 MiB, three rounds:
#   docs/data/s51/fixed-ways.sh OUTFILE COLL...   (rows: round way collective size out-of-place-us in-place-us)
OUT=$1; shift; : > "$OUT"
B=$(cd "$(dirname "$0")/../../.." && pwd)/build/bin
for r in 1 2 3; do for c in "$@"; do
  for w in 1 0; do
    name=$([ $w = 1 ] && echo attach || echo ring)
    CHORUS_SHM_ADAPT=0 CHORUS_SHM_CMA=$w CHORUS_TRANSPORT=shm timeout 300 "$B/chorus-run" -n 2 -- "$B/chorus-perf" "$c" \
      -b 64K -e 64M -f 2 -c 0 --rotate 0 -R 0 --iters-by-size --average 3 2>&1 | grep "^\[0\] *[0-9]" \
      | awk -v r=$r -v w=$name -v c="$c" '{print r, w, c, $2, $7, $11}' >> "$OUT"
  done
done; done
