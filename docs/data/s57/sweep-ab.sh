#!/bin/bash
# usage: cw.sh ROUNDS COLL SETTINGS...
R=$1; C=$2; shift 2
cd /work/main
for i in $(seq 1 $R); do for v in "$@"; do
  printf "%-44s" "$v"
  env $v CHORUS_X_TCPINFO=1 CHORUS_TRANSPORT=tcp ./build/bin/chorus-run -n 2 -- sh -c "exec perf stat -x, -e context-switches -o /tmp/ps.\$CHORUS_RANK ./build/bin/chorus-perf $C -b 8 -e 4M -f 2 -c 1" > /tmp/xo.txt 2>&1
  awk '$2>=262144 && $2~/^[0-9]+$/{printf "%s ", $7}' /tmp/xo.txt
  grep XTCP /tmp/xo.txt | awk '{for(i=1;i<=NF;i++) if($i=="cwnd") printf "cwnd=%s ", $(i+1)}'
  for r in 0 1; do awk -F, '/context/{printf "cs=%s ", $1}' /tmp/ps.$r; done; echo
done; done
