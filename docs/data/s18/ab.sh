#!/bin/bash
# usage: ab.sh N TRANSPORT ROUNDS COLL...   A/B of /tmp/old (a03d829) against /work/main builds, alternating order
N=$1; T=$2; R=$3; shift 3
for c in "$@"; do
  x=; [ "$c" = broadcast ] && x=--in-place-first
  for r in $(seq 1 $R); do
    order="old new"; [ $((r % 2)) = 0 ] && order="new old"
    for b in $order; do
      d=/work/main; [ $b = old ] && d=/tmp/old
      CHORUS_TRANSPORT=$T $d/build/bin/chorus-run -n $N -- $d/build/bin/chorus-perf $c -b 8 -e 64M -f 2 -c 1 --rotate 0 -R 0 --iters-by-size --average 3 $x 2>&1 \
        | sed -E 's/^\[[^]]*\] ?//' | awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ {print $1, $6}' > /tmp/ab-$c-$b-$r.txt
    done
  done
  echo "## $c $N ranks $T: size old_us new_us new/old (medians of $R rounds)"
  python3 - "$c" "$R" <<'PY'
import sys, statistics
c, R = sys.argv[1], int(sys.argv[2])
def load(b):
    rows = {}
    for r in range(1, R + 1):
        for line in open(f"/tmp/ab-{c}-{b}-{r}.txt"):
            s, t = line.split(); rows.setdefault(int(s), []).append(float(t))
    return {s: statistics.median(v) for s, v in rows.items()}
o, n = load("old"), load("new")
for s in sorted(o):
    print(f"{s:>10} {o[s]:>10.2f} {n[s]:>10.2f} {n[s]/o[s]:>7.2f}")
PY
done
