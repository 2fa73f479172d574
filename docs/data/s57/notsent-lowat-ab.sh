#!/bin/bash
# bab2.sh ROUNDS NRANKS COLL SETTINGS... : bench config, 256K-16M out-of-place times + retransmits per launch
R=$1; N=$2; C=$3; shift 3
cd /work/main
for i in $(seq 1 $R); do for v in "$@"; do
  nstat -n
  printf "%-24s" "$v"
  env $v CHORUS_TRANSPORT=tcp ./build/bin/chorus-run -n $N -- ./build/bin/chorus-perf $C -b ${BMIN:-8} -e 64M -f 2 -c 1 --rotate 0 -R 0 --iters-by-size --average 3 2>&1 | awk -v lo=${LO:-262144} '$2>=lo && $2<=16777216 && $2~/^[0-9]+$/{printf "%s ", $7}'
  nstat | awk '/TcpRetransSegs/{printf "retrans=%s ", $2}'; echo
done; done
