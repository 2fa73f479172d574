#!/bin/bash
# 4 ranks on 2 cores (oversubscribed), shm, 64 KiB-16 MiB, the choice of rings or attach while running:
# A as built before (off where the ranks outnumber the cores: large payloads through the rings), B on with the
# 2-rank threshold (attach once it reads under 0.75 of the rings per KiB), C on with 0.45. A scratch build read
# CHORUS_SHM_ADAPT_OVERSUB and CHORUS_SHM_SWITCH_BELOW (not kept). --placement splits the rounds by the CPUs'
# cache-line round trip.
# Usage: ROUNDS=10 docs/data/s46/oversub-adapt-ab.sh [COLL...] > docs/data/s46/oversub-adapt-ab.txt
cd "$(dirname "$0")/../../.."
for coll in ${@:-reduce alltoall allreduce allgather reducescatter broadcast}; do
  echo "### $coll, 4 ranks, shm ($(date -u +%H:%M:%S) UTC)"
  python3 scripts/env-ab.py "${ROUNDS:-10}" 4 shm 'X=0' 'CHORUS_SHM_ADAPT_OVERSUB=1 CHORUS_SHM_SWITCH_BELOW=0.75' \
    --c 'CHORUS_SHM_ADAPT_OVERSUB=1' --placement -- "$coll" -b 64K -e 16M -f 4 -c 0 --rotate 0 -R 0 --iters-by-size --average 3
done
