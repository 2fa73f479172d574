#!/bin/bash
# bench-config A/B: bab.sh ROUNDS COLL SETTINGS...
R=$1; C=$2; shift 2
cd /work/main
for i in $(seq 1 $R); do for v in "$@"; do
  printf "%-44s" "$v"
  env $v CHORUS_TRANSPORT=tcp ./build/bin/chorus-run -n 2 -- ./build/bin/chorus-perf $C -b 8 -e 64M -f 2 -c 1 --rotate 0 -R 0 --iters-by-size --average 3 2>&1 | awk '$2>=262144 && $2<=4194304 && $2~/^[0-9]+$/{printf "%s ", $7}'; echo
done; done
