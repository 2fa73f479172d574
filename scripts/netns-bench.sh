#!/usr/bin/env bash
# Hierarchical all_reduce against flat ring and tree on the network-namespace rig: 2 hosts x 2 ranks, links
# shaped to RATE, shared memory inside hosts. For each algorithm: time per size and the bytes that crossed
# hosts per call (sent over tcp, all ranks). Needs root.
#   scripts/netns-bench.sh [RATE] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-1gbit} OUT=${2:-docs/data/netns-allreduce-2x2-$RATE.txt}
export CHORUS_RUN=$PWD/build/bin/chorus-run
{
  echo "# scripts/netns-bench.sh $RATE ($(date -u +%F)): 2 hosts x 2 ranks, inter-host links shaped to $RATE (tbf)"
  echo "# algorithm size time_us over_tcp_bytes_per_call"
  for algo in hierarchical ring tree auto; do
    args=(allreduce -b 64K -e 64M -f 4 -n 5 -w 1 -c 1 --traffic)
    [[ $algo == auto ]] || args+=(-a "$algo")
    scripts/netns-cluster.sh -k 2 -m 2 --rate "$RATE" -- build/bin/chorus-perf "${args[@]}" 2>&1 |
      grep '^\[host 0\] \[0\] ' | sed 's/^\[host 0\] \[0\] //' | grep -E '^ +[0-9]' |
      awk -v a="$algo" '{printf "%-13s %10s %10s %12s %s\n", a, $1, $6, $18, $14}'
  done
} | tee "$OUT"
