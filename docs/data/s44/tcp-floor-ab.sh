#!/usr/bin/env bash
# Alternating rounds: Chorus's tcp all_reduce, the protocol-free exchange (bench/tcp_floor.cc), Open MPI's tcp.
cd "$(dirname "$0")/../../.."; export PATH=$PWD/build/bin:$PATH
date -u
for i in 1 2 3 4 5 6; do
  echo "## round $i: $(cacheline_pingpong -q -s 1 -i 100 -n 10000 2>&1 | tail -1 | sed 's/;.*//')"
  echo "# chorus (out-of-place time, in-place time; us)"
  CHORUS_TRANSPORT=tcp chorus-run -n 2 -- chorus-perf allreduce -b 256K -e 4M -f 2 -c 0 --rotate 0 -R 0 --iters-by-size --average 3 2>&1 | grep -E "^\[0\] +[0-9]" | awk '{print "chorus", $2, $7, $11, $15}'
  echo "# tcp_floor"
  tcp_floor -b 256K -e 4M -t 0.5 | grep -v "^#" | sed 's/^/floor /'
  echo "# Open MPI tcp"
  timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2 /tmp/chorus-peers/mpi_coll_ompi allreduce 262144 4194304 | grep -v '^#' | sed 's/^/ompi /'
done
date -u
