#!/usr/bin/env bash
# Reruns the performance comparison of docs/performance.md in one command, and regenerates its tables and plots.
#
#   scripts/bench.sh [--colls "allreduce allgather ..."] [--ranks "2 4"] [--transports "shm tcp"] [--rotate 0|1]
#                    [--registered 0|1] [--quick] [--no-probes] [--repeat R] [--min BYTES] [--max BYTES]
#                    [--tag NAME]
#
# For every (collective, ranks, transport): ../shared/peers/compare.sh (chorus-perf beside Open MPI, MPICH and,
# for tcp all_reduce, Gloo; 8 B to 64 MiB) -> docs/data/bench/compare-<coll>-<n>ranks-<t>.txt. Then:
#   - the memory-bandwidth probe (../shared/peers/membw.c)          -> docs/data/bench/membw.txt
#   - the floor of a 2-rank all_reduce (bench/allreduce_floor.cc)   -> docs/data/bench/floor.txt
#   - peak resident memory of `chorus-perf allreduce -b 64M -e 64M`  -> docs/data/bench/rss.txt
#   - after the tcp rows: what iperf3 moves over loopback, and the tcp all_reduce rows from 1 MiB beside the
#     bound it sets (scripts/loopback-probe.py)                     -> docs/data/bench/loopback.txt
#   - scripts/plot-bench.py: bus bandwidth against size, per collective and transport -> docs/img/bench-*.png,
#     and the ratio tables (chorus / best peer)                     -> docs/data/bench/summary.md, and the
#     same tables into docs/performance.md (between its bench:begin and bench:end markers)
#   - scripts/targets.py: every target of the performance issue, met or missed, over these rows
#                                                                   -> docs/data/bench/targets.md
# --rotate 0 (default): chorus-perf reuses one buffer slot for every iteration, as the peers' benchmark does, so
# both sides are timed with the same cache state; --rotate 1 moves through the buffers as nccl-tests does
# (sizes that fit in the caches are then timed cold for Chorus only), into compare-...-<t>-rotate1.txt.
# --registered 1: chorus-perf's buffers come from chorus::mem_alloc (-R 1: local peers read them in place; the
# peers' buffers stay plain heap memory), into compare-...-<t>-registered.txt; plot-bench.py leaves these out of
# the generated tables.
# --no-probes: leaves membw.txt, floor.txt, rss.txt and loopback.txt as they are (to time some rows again after
# a full run, whose probes describe the same hour as its tables).
# --repeat R, --min, --max: every comparison R times (round by round: each round visits every row once), over
# sizes MIN to MAX bytes (compare.sh's -b and -e; default 8 B to 64 MiB), into
# docs/data/bench/repeat/compare-<coll>-<n>ranks-<t>[-fromMIN][-toMAX].<i>.txt, and per row the medians over
# the runs (scripts/compare-median.py) into the same name with .md, and the targets over the medians of every
# row run (scripts/targets.py) into docs/data/bench/repeat/targets[-fromMIN][-toMAX][-NAME].md; the tables and
# plots above stay as they are, and so do the probes' files (as with --no-probes). For the sizes whose
# single-run ratio moves from run to run (docs/performance.md, "Where the two virtual CPUs sit").
# --tag NAME: adds -NAME to the repeated runs' file names (compare-...[-toMAX]-NAME.<i>.txt and .md), so that
# another host's or another build's repeated runs of the same rows stand beside the earlier ones.
# Each comparison's file also records the round trip of a cache line between CPUs 0 and 1 before and after it
# (bench/cacheline_pingpong: about 50 ns when the host runs the two virtual CPUs on one core's hyperthreads,
# 230-650 ns on separate cores).
# --quick: all_reduce only, 2 ranks (a few minutes). The full run takes 35-50 minutes on the 2-core machine
# (2026-12-01 03:24-04:10, 2026-12-02 02:00-02:36 UTC): run it on a quiet machine, since every figure is a
# side-by-side ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
COLLS="allreduce allgather reducescatter broadcast reduce alltoall" RANKS="2 4" TRANSPORTS="shm tcp" ROTATE=0 REGISTERED=0 PROBES=1
REPEAT=1 MIN= MAX= TAG=
while [[ $# -gt 0 ]]; do
  case $1 in
    --colls) COLLS=$2; shift 2 ;; --ranks) RANKS=$2; shift 2 ;; --transports) TRANSPORTS=$2; shift 2 ;;
    --rotate) ROTATE=$2; shift 2 ;;
    --registered) REGISTERED=$2; shift 2 ;;
    --quick) COLLS=allreduce RANKS=2; shift ;;
    --no-probes) PROBES=0; shift ;;
    --repeat) REPEAT=$2; shift 2 ;; --min) MIN=$2; shift 2 ;; --max) MAX=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    *) sed -n '/^set -euo/q; 2,$p' "$0"; exit 2 ;;  # the header comment, however long it grows
  esac
done
[[ -z $TAG || $REPEAT -gt 1 || -n $MIN$MAX ]] || { echo "bench.sh: --tag names repeated or partial runs (--repeat, --min, --max)" >&2; exit 2; }
[[ $TAG =~ ^[A-Za-z0-9_.]*$ ]] || { echo "bench.sh: --tag '$TAG': letters, digits, '_' and '.' only" >&2; exit 2; }
# Repeated or partial rows leave the probes' files alone: those describe the hour of the last full run's tables.
[[ $REPEAT == 1 && -z $MIN$MAX ]] || PROBES=0
PEERS=${PEERS:-$(cd .. && pwd)/shared/peers}
OUT=docs/data/bench
mkdir -p "$OUT" docs/img
[[ -x build/bin/chorus-perf ]] || ./scripts/build.sh
[[ -x build/bin/cacheline_pingpong ]] || cmake --build build --target cacheline_pingpong
python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib >/dev/null; }

# The host's CPU ticks (/proc/stat: all of them, and those its hypervisor stole), and the stolen share since a
# reading: on a virtual machine with shared cores it slows every implementation in a run, and it changes from
# minute to minute (docs/performance.md, "CPU time stolen by the hypervisor").
cpu_ticks() { awk '/^cpu /{t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $9}' /proc/stat; }
stolen_since() {
  local t0 s0 t1 s1
  read -r t0 s0 <<<"$1"
  read -r t1 s1 <<<"$(cpu_ticks)"
  awk -v t=$((t1 - t0)) -v s=$((s1 - s0)) 'BEGIN { if (t > 0) printf "%.1f%% of %d ticks\n", 100 * s / t, t; else print "unknown" }'
}
# Five samples of the cache-line round trip between CPUs 0 and 1, 100 ms apart (about half a second).
cacheline() { build/bin/cacheline_pingpong -q -s 5 -i 100 -n 10000 2>&1 || true; }
# How idle CPUs wait (chorus::idle_cpus_description in words; 0 ns: they halt at once and wake late).
idle_cpus() {
  local g=/sys/devices/system/cpu/cpuidle/current_governor_ro p=/sys/module/haltpoll/parameters/guest_halt_poll_ns
  echo "idle CPUs: cpuidle governor $(cat $g 2>/dev/null || echo unknown)$([[ -r $p ]] && echo ", guest_halt_poll_ns=$(cat $p)")"
}

if [[ $PROBES == 1 ]]; then
  echo "== memory bandwidth"
  cc -O2 -o /tmp/chorus-membw "$PEERS/membw.c"
  { date -u; for b in 1048576 16777216 67108864; do /tmp/chorus-membw "$b"; done; } | tee "$OUT/membw.txt"

  echo "== the floor of a 2-rank all_reduce (bench/allreduce_floor.cc: the memory work alone, five ways)"
  [[ -x build/bin/allreduce_floor ]] || cmake --build build --target allreduce_floor
  { date -u; build/bin/allreduce_floor -b 1M -e 64M -t 1; } | tee "$OUT/floor.txt"

  echo "== peak memory of chorus-perf allreduce -b 64M -e 64M"
  {
    date -u
    echo "# user buffers: send + recv + expected (checking) = 3 x 64 MiB = 196608 KiB per rank"
    for t in shm tcp; do
      CHORUS_TRANSPORT=$t build/bin/chorus-run -n 2 -- /usr/bin/time -f "transport $t maxrss_kb %M" \
        build/bin/chorus-perf allreduce -b 64M -e 64M -n 5 -w 1 2>&1 | grep maxrss_kb
    done
  } | tee "$OUT/rss.txt"
fi

# compare.sh runs $CHORUS_PERF: a wrapper that adds --rotate, and times as the peers' harness (mpi_coll.c) does:
# as many iterations per size, after as many untimed calls (--iters-by-size: 3, then 200 up to 64 KiB, 40 up to
# 4 MiB, 10 above; compare.sh's own chorus-perf command line would leave the default 20 everywhere, which lets
# one scheduler hiccup dominate a 1 us figure) and the slowest rank's time (--average 3, as the peers' MPI_MAX). For broadcast it puts the
# in-place block first (--in-place-first), the one compare.sh reads: MPI_Bcast has a single buffer, while an
# out-of-place broadcast also copies send to recv on the root.
PERF_WRAPPER=$(mktemp /tmp/chorus-perf-wrapper.XXXXXX)
printf '#!/bin/sh\nx=; [ "$1" = broadcast ] && x=--in-place-first\nexec %q --rotate %s -R %s --iters-by-size --average 3 $x "$@"\n' \
  "$PWD/build/bin/chorus-perf" "$ROTATE" "$REGISTERED" >"$PERF_WRAPPER"
chmod +x "$PERF_WRAPPER"
export CHORUS_PERF=$PERF_WRAPPER
SUFFIX=; [[ $ROTATE == 1 ]] && SUFFIX=-rotate1
[[ $REGISTERED == 1 ]] && SUFFIX=$SUFFIX-registered

# MPICH over UCX tcp prints its whole table, then hangs in MPI_Finalize (docs/performance.md): a watchdog ends
# any mpi_coll_mpich that has run for MPICH_WATCHDOG_S seconds (default 300), so the sweep goes on (its figures
# are already out). Its output reaches compare.sh only when it ends, so the watchdog cannot tell a hang from a
# slow run: 2-rank runs take under a minute (MPICH_WATCHDOG_S=90 spares repeated tcp rows four minutes each),
# 4-rank ones several (MPICH spins without yielding when ranks outnumber cores).
# (No `cond && kill` as a loop's last command: under set -e a false condition ended the watchdog itself.)
( set +e
  while sleep 10; do
    for pid in $(pgrep -f mpi_coll_mpich); do
      e=$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ')
      if [[ -n $e && $e -gt ${MPICH_WATCHDOG_S:-300} ]]; then kill "$pid" 2>/dev/null; fi
    done
  done ) &
WATCHDOG=$!
trap 'kill $WATCHDOG 2>/dev/null; rm -f "$PERF_WRAPPER"' EXIT

# One comparison: compare.sh for (coll $1, ranks $2, transport $3) into file $4, with the stolen CPU time and
# the cache-line probes around it.
compare() {
  local c=$1 n=$2 t=$3 f=$4 ticks before others
  echo "== $c, $n ranks, $t -> $f"
  others=$(python3 scripts/other-runnable.py)
  [[ $others == 0 ]] || echo "bench.sh: warning: $others other task(s) runnable before this comparison; its times will suffer" >&2
  ticks=$(cpu_ticks)
  before=$(cacheline)
  { echo "# $(date -u) ../shared/peers/compare.sh -n $n -t $t -c $c${MIN:+ -b $MIN}${MAX:+ -e $MAX}  (chorus-perf --rotate $ROTATE -R $REGISTERED --iters-by-size --average 3; broadcast: --in-place-first)"
    "$PEERS/compare.sh" -n "$n" -t "$t" -c "$c" ${MIN:+-b "$MIN"} ${MAX:+-e "$MAX"}; } >"$f" 2>&1 ||
    echo "compare.sh failed: see $f"
  echo "# CPU time stolen by the hypervisor (steal in /proc/stat) while this comparison ran: $(stolen_since "$ticks")" | tee -a "$f"
  echo "# cache-line round trip before: $before" | tee -a "$f"
  echo "# cache-line round trip after: $(cacheline)" | tee -a "$f"
  echo "# $(idle_cpus)" | tee -a "$f"
  echo "# other runnable tasks before this comparison: $others (scripts/other-runnable.py; 1 or more: something else wanted the CPUs)" | tee -a "$f"
  # MPICH over UCX tcp sometimes hangs in MPI_Finalize after printing everything (see docs/performance.md).
  pkill -f mpi_coll_mpich 2>/dev/null || true
}

full_row_file() { echo "$OUT/compare-$1-$2ranks-$3$SUFFIX.txt"; }

# Calls "$@" COLL N T for every row, transports outermost.
each_row() {
  local t n c
  for t in $TRANSPORTS; do
    for n in $RANKS; do
      for c in $COLLS; do "$@" "$c" "$n" "$t"; done
    done
  done
}

if [[ $REPEAT == 1 && -z $MIN$MAX ]]; then
  full_row() { compare "$1" "$2" "$3" "$(full_row_file "$@")"; }
  each_row full_row
else
  mkdir -p "$OUT/repeat"
  RANGE=${MIN:+-from$MIN}${MAX:+-to$MAX}${TAG:+-$TAG}
  row_base() { echo "$OUT/repeat/compare-$1-$2ranks-$3$SUFFIX$RANGE"; }
  repeated_row() { compare "$2" "$3" "$4" "$(row_base "$2" "$3" "$4").$1.txt"; }
  # A row's R files, for its medians and (over every row) the targets.
  row_files() { local i; for ((i = 1; i <= REPEAT; i++)); do echo "$(row_base "$@").$i.txt"; done; }
  medians() {
    local base; base=$(row_base "$@")
    python3 scripts/compare-median.py $(row_files "$@") >"$base.md"
    echo "medians: $base.md"
  }
  for ((i = 1; i <= REPEAT; i++)); do each_row repeated_row "$i"; done
  each_row medians
  python3 scripts/targets.py $(each_row row_files) >"$OUT/repeat/targets$SUFFIX$RANGE.md"
  echo "targets: $OUT/repeat/targets$SUFFIX$RANGE.md"
  exit 0
fi

if [[ $PROBES == 1 && " $TRANSPORTS " == *" tcp "* ]]; then
  echo "== loopback: what iperf3 moves, and the tcp all_reduce rows beside the bound it sets"
  shopt -s nullglob
  # A failed probe (no iperf3 to be had, say) leaves the tables and plots below to be made all the same.
  python3 scripts/loopback-probe.py "$OUT"/compare-allreduce-*ranks-tcp$SUFFIX.txt | tee "$OUT/loopback.txt" ||
    echo "loopback probe failed (its error is above); the tables and plots follow"
  shopt -u nullglob
fi

PY=python3; $PY -c 'import matplotlib' 2>/dev/null || PY=/usr/bin/python3
$PY scripts/plot-bench.py "$OUT" --img docs/img --summary "$OUT/summary.md" --doc docs/performance.md
python3 scripts/targets.py $(each_row full_row_file) >"$OUT/targets$SUFFIX.md"
echo "tables: $OUT/summary.md; plots: docs/img/bench-*.png; targets: $OUT/targets$SUFFIX.md"
