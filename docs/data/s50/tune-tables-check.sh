#!/bin/bash
# What chorus-tune --tables mends (docs/algorithms.md, "chorus-tune --tables"): tune at 2 and 4 ranks on both
# transports into one file, then print the choices that file makes for every shape of the 49th session's check
# sweeps (docs/data/algos-s49-*-check, -hot-check), into DIR/{shm,tcp}-RUN.txt, for tune-misses.py.
#   docs/data/s50/tune-tables-check.sh DIR RUN [chorus-tune flags...]
set -euo pipefail
cd "$(dirname "$0")/../../.."
dir=$1 run=$2
shift 2
mkdir -p "$dir"
file=$dir/tune-$run.json
rm -f "$file"
for t in shm tcp; do
  for n in 2 4; do
    start=$SECONDS
    CHORUS_TRANSPORT=$t build/bin/chorus-run -n $n --no-prefix -- \
      build/bin/chorus-tune --no-choices -o "$file" "$@" > "$dir/chorus-tune-$t-$n-$run.log" 2>&1
    echo "$t $n ranks: $((SECONDS - start)) s"
  done
done
for t in shm tcp; do
  for n in 2 4; do
    scripts/algo-consistency.py --shapes $n docs/data/algos-s49-$t-check docs/data/algos-s49-$t-hot-check > /tmp/shapes-$t-$n.txt
    CHORUS_TUNING_FILE=$file CHORUS_TRANSPORT=$t build/bin/chorus-run -n $n --no-prefix -- \
      build/bin/chorus-tune --choices-for /tmp/shapes-$t-$n.txt
  done > "$dir/$t-$run.txt"
done
