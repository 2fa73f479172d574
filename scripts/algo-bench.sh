#!/usr/bin/env bash
# Times every algorithm of every collective (chorus-perf --algos all) at 2, 3, 4 and 8 ranks, 8 B to 64 MiB,
# and writes the tables to docs/data/algos-<transport>-<coll>-<n>ranks.txt.
#   scripts/algo-bench.sh [tcp] [ITERS]
# RANKS="3 8" and COLLS="broadcast allgather" narrow the sweep; OUT (default docs/data) is where the tables go.
# Beside each table, chorus-perf's --json of its two runs (.small.json, .large.json) keeps each row's stolen
# CPU time (stolen_share; null where a row was too short to judge), which scripts/algo-summary.py --stolen reads.
# A row timed while 5% or more of the host's CPU time was stolen is timed again, up to RETRY_STOLEN (default 3)
# more times (chorus-perf --retry-stolen): on a virtual machine with shared cores the tables then hold quiet
# rows wherever the hypervisor allowed one, at the cost of a longer sweep in a noisy hour. RETRY_STOLEN=0: never.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-tcp} ITERS=${2:-20} RETRY=${RETRY_STOLEN:-3}
OUT=${OUT:-docs/data}
mkdir -p "$OUT"
for n in ${RANKS:-2 3 4 8}; do
  for c in ${COLLS:-allreduce allgather reducescatter broadcast reduce alltoall}; do
    out=$OUT/algos-$T-$c-${n}ranks.txt
    echo "== $c, $n ranks -> $out"
    # Small sizes take microseconds: many iterations per round; large ones: ITERS.
    { CHORUS_TRANSPORT=$T build/bin/chorus-run -n "$n" --no-prefix -- build/bin/chorus-perf "$c" -b 8 -e 32K -f 2 \
        --algos all -n 200 --repeats 7 -w 5 -c 1 --retry-stolen "$RETRY" --json "${out%.txt}.small.json" &&
      CHORUS_TRANSPORT=$T build/bin/chorus-run -n "$n" --no-prefix -- build/bin/chorus-perf "$c" -b 64K -e 64M -f 2 \
        --algos all -n "$ITERS" --repeats 5 -w 2 -c 1 --retry-stolen "$RETRY" --json "${out%.txt}.large.json"; } 2>&1 | grep -v '^ *$' >"$out" || { echo "failed: see $out"; exit 1; }
    grep -E '^# auto/best' "$out" || true
  done
done
