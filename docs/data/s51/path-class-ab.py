#!/usr/bin/env python3
"""Medians per variant over the rounds of path-class-ab.sh, each over the old build's: path-class-ab.py FILE [0|1]
(0: out-of-place times, 1: in place), then the geometric mean of those ratios per collective."""
import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, w, c, size, oop, ip = line.split()
    d[(c, int(size), w)].append((float(oop), float(ip)))
vs = ["old", "new", "rf0", "ring", "attach"]
col = int(sys.argv[2]) if len(sys.argv) > 2 else 0
keys = sorted({(c, s) for c, s, w in d})
print(f"{'coll':14s} {'size':>9s} {'old':>8s} " + " ".join(f"{v:>6s}" for v in vs[1:]))
geo = collections.defaultdict(list)
for c, s in keys:
    if not d.get((c, s, 'old')): continue
    mo = statistics.median(x[col] for x in d[(c, s, 'old')])
    rs = []
    for v in vs[1:]:
        if d.get((c, s, v)):
            m = statistics.median(x[col] for x in d[(c, s, v)]); rs.append(f"{m/mo:6.2f}"); geo[(c, v)].append(m / mo)
        else: rs.append("     -")
    print(f"{c:14s} {s:>9d} {mo:8.1f} " + " ".join(rs))
import math
for c in sorted({c for c, s in keys}):
    print(f"{c:14s} geomean " + " ".join(f"{v}:{math.exp(sum(map(math.log, geo[(c, v)]))/len(geo[(c, v)])):.3f}" for v in vs[1:] if geo[(c, v)]))
