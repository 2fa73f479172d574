#!/bin/bash
# A/B of the shm ring-or-attach choice per class of operation (fifty-first session), 2 ranks, 64 KiB-64 MiB:
#   OLD=/tmp/old51 docs/data/s51/path-class-ab.sh ROUNDS OUTFILE COLL...
# OLD is a build of the commit before (git worktree add /tmp/old51 93f2c72; cmake -S . -B build -G Ninja
# -DCMAKE_BUILD_TYPE=Release; cmake --build build --target chorus-perf chorus-run). Each round runs five
# variants in a rotating order: old (the previous build), new (this build), rf0 (CHORUS_SHM_RING_FIRST_BYTES=0),
# ring (CHORUS_SHM_CMA=0: every large payload through the rings) and attach (CHORUS_SHM_CMA=1
# CHORUS_SHM_ADAPT=0: every one by attach). Rows: round variant collective size out-of-place-us in-place-us
# (rank 0's chorus-perf time columns, --average 3: the slowest rank). Summary: path-class-ab.py OUTFILE [0|1].
R=$1; OUT=$2; shift 2
OLD=${OLD:-/tmp/old51}
NEW=$(cd "$(dirname "$0")/../../.." && pwd)
: > "$OUT"
V=("old:X=0" "new:X=0" "rf0:CHORUS_SHM_RING_FIRST_BYTES=0" "ring:CHORUS_SHM_CMA=0" "attach:CHORUS_SHM_CMA=1 CHORUS_SHM_ADAPT=0")
for r in $(seq 1 "$R"); do
  for c in "$@"; do
    for i in 0 1 2 3 4; do
      k=$(( (i + r) % 5 )); v=${V[$k]}; name=${v%%:*}; envs=${v#*:}
      d=$NEW; [ "$name" = old ] && d=$OLD
      env $envs CHORUS_TRANSPORT=shm timeout 300 "$d/build/bin/chorus-run" -n 2 -- "$d/build/bin/chorus-perf" "$c" \
        -b 64K -e 64M -f 2 -c 0 --rotate 0 -R 0 --iters-by-size --average 3 2>&1 | grep "^\[0\] *[0-9]" \
        | awk -v r="$r" -v w="$name" -v c="$c" '{print r, w, c, $2, $7, $11}' >> "$OUT"
    done
  done
done
