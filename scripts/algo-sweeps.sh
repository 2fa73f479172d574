#!/usr/bin/env bash
# One cold and one hot sweep of every algorithm per transport, as the built-in tables are fitted and checked
# (docs/algorithms.md, "The second kind's tables refitted on this host", "Tables smoothed across neighbouring
# sizes"):
#   [RANKS="2 4"] scripts/algo-sweeps.sh TAG [SUFFIX]
# For shm then tcp: scripts/algo-bench.sh with --rotate 1 (cold) into docs/data/algos-TAG-<transport>SUFFIX, then
# --rotate 0 (hot) into docs/data/algos-TAG-<transport>-hotSUFFIX; all_reduce, all_gather, reduce_scatter and
# all_to_all timed by the mean over ranks, broadcast and reduce by the slowest rank (AVERAGE=3). Forced times do
# not depend on the tables; the auto column uses whatever the library chooses (CHORUS_COPY_GBPS pins the kind).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: [RANKS=\"2 4\"] $0 TAG [SUFFIX]" >&2; exit 2; }
tag=$1 suffix=${2:-} ranks=${RANKS:-2 4}
for t in shm tcp; do
  for hot in 0 1; do
    rot=1 out=docs/data/algos-$tag-$t$suffix
    [[ $hot == 1 ]] && { rot=0; out=docs/data/algos-$tag-$t-hot$suffix; }
    echo "== $t rotate=$rot ranks=$ranks -> $out $(date -u +%H:%M:%S)"
    ROTATE=$rot RANKS="$ranks" COLLS="allreduce allgather reducescatter alltoall" OUT=$out ./scripts/algo-bench.sh $t 5
    ROTATE=$rot AVERAGE=3 RANKS="$ranks" COLLS="broadcast reduce" OUT=$out ./scripts/algo-bench.sh $t 5
  done
done
echo "== done $(date -u +%H:%M:%S)"
