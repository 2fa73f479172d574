#!/bin/bash
# Two builds alternating (BIN_A, BIN_B: their build/bin), rank 0's out-of-place and in-place times, medians per size.
# Usage: [T=tcp] docs/data/s52/two-builds-ab.sh ROUNDS NRANKS BIN_A BIN_B CHORUS_PERF_ARGS...
# usage: ab2.sh ROUNDS NRANKS BIN_A BIN_B args...   alternates builds, prints per-size medians of column 6 and 10
rounds=$1 n=$2 A=$3 B=$4; shift 4
for i in $(seq 1 $rounds); do
  if (( i % 2 )); then order="A B"; else order="B A"; fi
  for w in $order; do
    bin=$A; [ $w = B ] && bin=$B
    CHORUS_TRANSPORT=${T:-shm} $bin/chorus-run -n $n -- $bin/chorus-perf "$@" | awk -v w=$w '$1=="[0]" && $2 ~ /^[0-9]+$/ {print w, $2, $7, $11}'
  done
done | python3 -c '
import sys,statistics,collections
d=collections.defaultdict(list)
for l in sys.stdin:
    w,s,o,i=l.split(); d[(int(s),w)].append((float(o),float(i)))
sizes=sorted({k[0] for k in d})
print("%10s %9s %9s %6s   %9s %9s %6s"%("size","A out","B out","B/A","A in","B in","B/A"))
for s in sizes:
    a=d[(s,"A")]; b=d[(s,"B")]
    ao=statistics.median(x[0] for x in a); bo=statistics.median(x[0] for x in b)
    ai=statistics.median(x[1] for x in a); bi=statistics.median(x[1] for x in b)
    print("%10d %9.2f %9.2f %6.2f   %9.2f %9.2f %6.2f"%(s,ao,bo,bo/ao,ai,bi,bi/ai))
'
