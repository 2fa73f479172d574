#!/usr/bin/env bash
# chorus-perf gather/scatter beside Open MPI's and MPICH's MPI_Gather/MPI_Scatter (mpi_gather_scatter.c, timed as
# ../shared/peers/mpi_coll.c times the collectives compare.sh covers), shm, root 0, in one run; prints
# chorus time / best peer time per size as compare.sh does.
#   [IN_PLACE=1] docs/data/s56/gather-scatter-compare.sh NRANKS gather|scatter [MIN] [MAX]
# IN_PLACE=1: the in-place calls (chorus-perf's in-place columns, MPI_IN_PLACE on the peers' root).
set -euo pipefail
N=$1 COLL=$2 MIN=${3:-8} MAX=${4:-$((64 << 20))}
HERE=$(cd "$(dirname "$0")" && pwd)
P=${PEERS_DIR:-/tmp/chorus-peers}
[[ -x $P/mgs_ompi && $P/mgs_ompi -nt $HERE/mpi_gather_scatter.c ]] || mpicc.openmpi -O2 -o "$P/mgs_ompi" "$HERE/mpi_gather_scatter.c"
[[ -x $P/mgs_mpich && $P/mgs_mpich -nt $HERE/mpi_gather_scatter.c ]] || mpicc.mpich -O2 -o "$P/mgs_mpich" "$HERE/mpi_gather_scatter.c"
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
CHORUS_TRANSPORT=shm timeout 900 build/bin/chorus-run -n "$N" -- build/bin/chorus-perf "$COLL" -b "$MIN" -e "$MAX" -f 2 \
  -c 1 -r 0 --rotate 0 -R 0 --iters-by-size --average 3 | sed -E 's/^\[[^]]*\]:? ?//' \
  | awk -v ip="${IN_PLACE:-0}" '!/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ {print $1, ip == 1 ? $10 : $6, ip == 1 ? $13 : $9}' \
  >"$OUT/chorus"
timeout 900 mpirun.openmpi --allow-run-as-root --oversubscribe --mca btl vader,self -np "$N" "$P/mgs_ompi" "$COLL" \
  "$MIN" "$MAX" | awk '!/^#/ {print $1, $2, $5}' >"$OUT/ompi"
timeout 900 mpirun.mpich -np "$N" "$P/mgs_mpich" "$COLL" "$MIN" "$MAX" | awk '!/^#/ {print $1, $2, $5}' >"$OUT/mpich"
echo "# $(date -u) $COLL, $N ranks, shm$([[ ${IN_PLACE:-0} == 1 ]] && echo ", in place"): time_us (wrong elements)"
printf '%10s %14s %14s %14s %8s\n' size chorus ompi mpich ratio
awk 'FILENAME ~ /ompi$/ {o[$1] = $2; ow[$1] = $3; next} FILENAME ~ /mpich$/ {m[$1] = $2; mw[$1] = $3; next}
  ($1 in o) && ($1 in m) {b = o[$1] < m[$1] ? o[$1] : m[$1];
  printf "%10s %9.2f (%2s) %9.2f (%2s) %9.2f (%2s) %8.3f\n", $1, $2, $3, o[$1], ow[$1], m[$1], mw[$1], $2 / b}' \
  "$OUT/ompi" "$OUT/mpich" "$OUT/chorus"
