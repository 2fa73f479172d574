#!/bin/bash
# Check sweeps: the tables smoothed across sizes (built in); their choices and the unsmoothed ones timed on the forced columns, 2 and 4 ranks, cold and hot, both transports.
cd "$(dirname "$0")/../../.."
set -e
# The 40 kind's tables (this host's) in the auto columns, without the copy-rate probe.
export CHORUS_COPY_GBPS=${CHORUS_COPY_GBPS:-40}
for t in shm tcp; do
  for hot in 0 1; do
    suffix="-check"; rot=1; [ $hot = 1 ] && { suffix="-hot-check"; rot=0; }
    out=docs/data/algos-s44-$t$suffix
    echo "== $t rotate=$rot -> $out $(date -u +%H:%M:%S)"
    ROTATE=$rot RANKS="2 4" COLLS="allreduce allgather reducescatter alltoall" OUT=$out ./scripts/algo-bench.sh $t 5
    ROTATE=$rot AVERAGE=3 RANKS="2 4" COLLS="broadcast reduce" OUT=$out ./scripts/algo-bench.sh $t 5
  done
done
echo "== done $(date -u +%H:%M:%S)"
