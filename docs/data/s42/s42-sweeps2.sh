#!/bin/bash
# Second part: 3 and 8 ranks into the first round's directories, then a second round at 2, 3 and 4 ranks.
cd /work/main
set -e
sweep() {  # transport hot ranks out
  local t=$1 hot=$2 ranks=$3 out=$4 rot=1
  [ $hot = 1 ] && rot=0
  echo "== $t rotate=$rot ranks=$ranks -> $out $(date -u +%H:%M:%S)"
  ROTATE=$rot RANKS="$ranks" COLLS="allreduce allgather reducescatter alltoall" OUT=$out ./scripts/algo-bench.sh $t 5
  ROTATE=$rot AVERAGE=3 RANKS="$ranks" COLLS="broadcast reduce" OUT=$out ./scripts/algo-bench.sh $t 5
}
for t in shm tcp; do
  sweep $t 0 "3 8" docs/data/algos-s42-$t
  sweep $t 1 "3 8" docs/data/algos-s42-$t-hot
done
for t in shm tcp; do
  sweep $t 0 "2 3 4" docs/data/algos-s42-${t}2
  sweep $t 1 "2 3 4" docs/data/algos-s42-$t-hot2
done
echo "== done $(date -u +%H:%M:%S)"
