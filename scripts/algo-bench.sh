#!/usr/bin/env bash
# Times every algorithm of every collective (chorus-perf --algos all) at 2, 3, 4 and 8 ranks, 8 B to 64 MiB,
# and writes the tables to docs/data/algos-<transport>-<coll>-<n>ranks.txt.
#   scripts/algo-bench.sh [tcp] [ITERS]
# RANKS="3 8" and COLLS="broadcast allgather" narrow the sweep; OUT (default docs/data) is where the tables go.
# ROTATE=1 (default): each call works on the next slot of buffers sized for the largest size (chorus-perf
# --rotate 1), so data that would fit in the caches arrives cold; ROTATE=0: the same buffers every call, hot in
# the caches, as MPI benchmarks (and compare.sh's peers) time them and as data just produced by computation
# arrives. Below the caches' size the two can order the algorithms differently (docs/algorithms.md, "Hot and
# cold buffers"); the built-in shm and tcp tables of the earlier host's kind are fitted to both, the other kind's
# shm tables to cold runs.
# Beside each table, chorus-perf's --json of its two runs (.small.json, .large.json) keeps each row's stolen
# CPU time (stolen_share; null where a row could not be judged), which scripts/algo-summary.py --stolen reads.
# A row timed while 5% or more of the host's CPU time was stolen is timed again, up to RETRY_STOLEN (default 3)
# more times (chorus-perf --retry-stolen): on a virtual machine with shared cores the tables then hold quiet
# rows wherever the hypervisor allowed one, at the cost of a longer sweep in a noisy hour. RETRY_STOLEN=0: never.
# A table with more than a quarter of its rows still stolen is timed again after the sweep, and each row keeps
# the quieter of its two runs (scripts/algo-merge.py; LATER=0: never).
# AVERAGE (default 1): the time reported across ranks, as chorus-perf --average: 1 their mean, 3 the slowest
# rank's, as compare.sh times Chorus and the peers. A rooted collective's ranks finish apart (a linear reduce's
# leaves hand their input to the sockets and leave; the root still reduces), and over a few calls the mean
# hides what the root waits for: the reduce and broadcast tables are timed with AVERAGE=3 (docs/algorithms.md,
# "A linear reduce, and algorithms without figures", "Broadcast timed by the slowest rank").
# REGISTERED=1: the buffers come from chorus::mem_alloc (chorus-perf -R 1) and only the large sizes (64 KiB to
# 64 MiB) are timed: below the shm transport's single-copy threshold (64 KiB) registration changes nothing.
# These are the tables the automatic choice uses for calls made with CallOptions::registered.
# IN_PLACE=1 (with REGISTERED=1): the calls are in place (chorus-perf --algos-in-place), for the tables that
# registered in-place calls of the collectives every rank passes both buffers to choose from.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-tcp} ITERS=${2:-20} RETRY=${RETRY_STOLEN:-3} ROTATE=${ROTATE:-1} AVERAGE=${AVERAGE:-1}
REGISTERED=${REGISTERED:-0} IN_PLACE=${IN_PLACE:-0}
[[ $REGISTERED == [01] ]] || { echo "REGISTERED must be 0 or 1" >&2; exit 2; }
[[ $IN_PLACE == 0 || ($IN_PLACE == 1 && $REGISTERED == 1) ]] || { echo "IN_PLACE=1 needs REGISTERED=1" >&2; exit 2; }
IN_PLACE_FLAG=()
[[ $IN_PLACE == 1 ]] && IN_PLACE_FLAG=(--algos-in-place)
OUT=${OUT:-docs/data}
mkdir -p "$OUT"

# One table: the small sizes, then the large ones, into $1 (and its --json files beside it).
table() {
  local out=$1 c=$2 n=$3
  # Small sizes take microseconds: many iterations per round; large ones: ITERS.
  { if [[ $REGISTERED == 0 ]]; then
      CHORUS_TRANSPORT=$T build/bin/chorus-run -n "$n" --no-prefix -- build/bin/chorus-perf "$c" -b 8 -e 32K -f 2 \
        --algos all -n 200 --repeats 7 -w 5 -c 1 --rotate "$ROTATE" --average "$AVERAGE" --retry-stolen "$RETRY" --json "${out%.txt}.small.json"
    fi &&
    CHORUS_TRANSPORT=$T build/bin/chorus-run -n "$n" --no-prefix -- build/bin/chorus-perf "$c" -b 64K -e 64M -f 2 \
      --algos all -n "$ITERS" --repeats 5 -w 2 -c 1 --rotate "$ROTATE" --average "$AVERAGE" -R "$REGISTERED" "${IN_PLACE_FLAG[@]}" --retry-stolen "$RETRY" --json "${out%.txt}.large.json"; } 2>&1 |
    grep -v '^ *$' >"$out" || { echo "failed: see $out"; exit 1; }
}

# Whether more than a quarter of a table's rows were timed with 5% or more stolen (from its --json files).
mostly_stolen() {
  python3 - "$1" <<'PY'
import json, os, sys
base = sys.argv[1][:-len(".txt")]
rows = [r for s in (".small.json", ".large.json") if os.path.exists(base + s)
        for r in json.load(open(base + s))["results"]]
stolen = sum(1 for r in rows if (r.get("stolen_share") or 0) >= 0.05)
sys.exit(0 if 4 * stolen > len(rows) else 1)
PY
}

later=()
for n in ${RANKS:-2 3 4 8}; do
  for c in ${COLLS:-allreduce allgather reducescatter broadcast reduce alltoall}; do
    out=$OUT/algos-$T-$c-${n}ranks.txt
    echo "== $c, $n ranks -> $out"
    table "$out" "$c" "$n"
    grep -E '^# auto/best' "$out" || true
    if [[ ${LATER:-1} != 0 ]] && mostly_stolen "$out"; then later+=("$c $n"); fi
  done
done

# Steal on this kind of machine comes in stretches of minutes, longer than a row's retakes: the tables where
# more than a quarter of the rows stayed stolen are timed once more after the sweep, and each row keeps the
# quieter of its two runs (scripts/algo-merge.py). LATER=0: never.
if ((${#later[@]})); then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for cn in "${later[@]}"; do
    read -r c n <<<"$cn"
    out=$OUT/algos-$T-$c-${n}ranks.txt
    echo "== $c, $n ranks again (more than a quarter of its rows were timed with 5% or more stolen)"
    table "$tmp/algos-$T-$c-${n}ranks.txt" "$c" "$n"
    python3 scripts/algo-merge.py "$out" "$tmp/algos-$T-$c-${n}ranks.txt"
  done
fi
