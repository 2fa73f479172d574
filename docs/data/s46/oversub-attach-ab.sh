#!/bin/bash
# 4 ranks on 2 cores (oversubscribed), shm, 64 KiB-16 MiB: large payloads through the rings (the default there:
# attach is used only where the probe at creation finds it cheap, and the choice while running is off where the
# ranks outnumber the cores), by cross-memory attach always (B: CHORUS_SHM_CMA=1), and chosen while running
# as with 2 ranks (C). Rounds alternate A and B; --placement splits them by the CPUs' cache-line round trip.
# Usage: ROUNDS=6 docs/data/s46/oversub-attach-ab.sh COLL... > docs/data/s46/oversub-attach-ab.txt
cd "$(dirname "$0")/../../.."
for c in "${@:-reduce alltoall allreduce allgather reducescatter broadcast}"; do
  for coll in $c; do
    echo "### $coll, 4 ranks, shm ($(date -u +%H:%M:%S) UTC)"
    python3 scripts/env-ab.py "${ROUNDS:-6}" 4 shm 'X=0' 'CHORUS_SHM_CMA=1' --c "${C:-CHORUS_SHM_ADAPT_OVERSUB=1}" \
      --placement -- "$coll" -b 64K -e 16M -f 4 -c 0 --rotate 0 -R 0 --iters-by-size --average 3
  done
done
