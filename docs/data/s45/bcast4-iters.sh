#!/usr/bin/env bash
# 4-rank tcp broadcast of 8 B timed over windows of 200 to 20000 back-to-back calls, Chorus and Open MPI's tcp
# alternating, as compare.sh times them (the slowest rank's mean; Chorus in place). The peers' harness times 200
# calls at this size; the same harness with its count of calls from $ITERS is built into /tmp.
#   ROUNDS=4 docs/data/s45/bcast4-iters.sh > docs/data/s45/bcast4-iters.txt
cd "$(dirname "$0")/../../.."; export PATH=$PWD/build/bin:$PATH
src=../shared/peers/mpi_coll.c bin=/tmp/mpi_coll_iters
sed 's/int iters = b <= (1 << 16) ? 200 : (b <= (1 << 22) ? 40 : 10);/int iters = getenv("ITERS") ? atoi(getenv("ITERS")) : 200;/' \
  "$src" > "$bin.c"
grep -q 'getenv("ITERS")' "$bin.c" || { echo "mpi_coll.c changed: its iteration line was not found" >&2; exit 1; }
mpicc.openmpi -O2 -o "$bin" "$bin.c"
date -u
for r in $(seq 1 "${ROUNDS:-4}"); do
  for it in 200 1000 5000 20000; do
    c=$(CHORUS_TRANSPORT=tcp chorus-run -n 4 --no-prefix -- chorus-perf broadcast -b 8 -e 8 -c 0 --rotate 0 -R 0 \
      -n "$it" -w 5 --average 3 --in-place-first | grep -E '^ +[0-9]' | awk '{print $6}')
    o=$(ITERS=$it timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe -x ITERS --mca btl tcp,self -np 4 \
      "$bin" broadcast 8 8 | grep -v '^#' | awk '{print $2}')
    echo "round $r calls $it chorus_us $c ompi_tcp_us $o"
  done
done
date -u
