#!/bin/bash
# What chorus-tune mends on a host the built-in tables never saw (docs/algorithms.md, "A fifth host: the built-in
# tables out of sample"): tune at 2 and 4 ranks on both transports into one file, then time the choices it
# makes on the forced columns of the check sweeps (docs/data/algos-s49-*-check, -hot-check).
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=docs/data/s49
rm -f $out/tune-s49.json
for t in shm tcp; do
  for n in 2 4; do
    CHORUS_TRANSPORT=$t build/bin/chorus-run -n $n --no-prefix -- build/bin/chorus-tune --no-choices -o $out/tune-s49.json \
      > $out/chorus-tune-$t-$n.log 2>&1
  done
done
for t in shm tcp; do
  for n in 2 4; do
    scripts/algo-consistency.py --shapes $n docs/data/algos-s49-$t-check docs/data/algos-s49-$t-hot-check > /tmp/shapes-$t-$n.txt
    CHORUS_TUNING_FILE=$out/tune-s49.json CHORUS_TRANSPORT=$t build/bin/chorus-run -n $n --no-prefix -- \
      build/bin/chorus-tune --choices-for /tmp/shapes-$t-$n.txt
  done > $out/choices-$t-tuned.txt
  echo "== $t: the built-in tables (the probe's kind), then chorus-tune's file"
  scripts/algo-consistency.py --choices $out/choices-$t-probe.txt docs/data/algos-s49-$t-check docs/data/algos-s49-$t-hot-check | tail -1
  scripts/algo-consistency.py --choices $out/choices-$t-tuned.txt docs/data/algos-s49-$t-check docs/data/algos-s49-$t-hot-check | tail -1
done
