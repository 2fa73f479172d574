#!/bin/bash
# The forty-second session's sweeps for this host's (40-kind) tables at 2 and 4 ranks.
cd /work/main
set -e
for t in shm tcp; do
  for hot in 0 1; do
    suffix=""; rot=1; [ $hot = 1 ] && { suffix="-hot"; rot=0; }
    out=docs/data/algos-s42-$t$suffix
    echo "== $t rotate=$rot -> $out $(date -u +%H:%M:%S)"
    ROTATE=$rot RANKS="2 4" COLLS="allreduce allgather reducescatter alltoall" OUT=$out ./scripts/algo-bench.sh $t 5
    ROTATE=$rot AVERAGE=3 RANKS="2 4" COLLS="broadcast reduce" OUT=$out ./scripts/algo-bench.sh $t 5
  done
done
echo "== done $(date -u +%H:%M:%S)"
