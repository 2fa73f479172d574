#!/usr/bin/env bash
# A 2-rank tcp all_reduce on the forty-fourth session's host, Chorus and Open MPI's tcp alternating, round by
# round, each line with its time of day: its times fall into two states several times apart, which change from
# one run to the next. PIN=1 also runs Chorus's ranks pinned either way round (taskset): the state does not
# follow which rank sits on which CPU.
#   ROUNDS=20 MIN=1M MAX=2M [PIN=1] docs/data/s44/tcp-states.sh
cd "$(dirname "$0")/../../.."; export PATH=$PWD/build/bin:$PATH
MIN=${MIN:-1M} MAX=${MAX:-1M}
modes=none; [[ ${PIN:-0} == 1 ]] && modes="same swap none"
bytes() { numfmt --from=iec "$1"; }
for i in $(seq 1 "${ROUNDS:-8}"); do
  for m in $modes; do
    case $m in same) c='taskset -c $CHORUS_RANK' ;; swap) c='taskset -c $((1-CHORUS_RANK))' ;; none) c='' ;; esac
    CHORUS_TRANSPORT=tcp chorus-run -n 2 -- sh -c "exec $c chorus-perf allreduce -b $MIN -e $MAX -f 2 \
      --iters-by-size -c 0 --rotate 0 -R 0 --average 3" 2>&1 | grep -E "^\[0\] +[0-9]" |
      awk -v t="$(date -u +%T)" -v i="$i" -v m="$m" '{print t, "round", i, "chorus-" m, $2, $7}'
  done
  timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2 \
    /tmp/chorus-peers/mpi_coll_ompi allreduce "$(bytes "$MIN")" "$(bytes "$MAX")" | grep -v '^#' |
    awk -v t="$(date -u +%T)" -v i="$i" '{print t, "round", i, "ompi", $1, $2}'
done
