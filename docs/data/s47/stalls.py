#!/usr/bin/env python3
"""Stalled rows in tcp-spin-ab.sh-style files (one line per run: SETTING, then time_us per size from 8 B): per
setting, rows of the first N sizes (default 10: 8 B-4 KiB) above twice that size's median over every setting's
runs, and how many of them at 16 B (the second size).
  docs/data/s47/stalls.py FILE [N]"""
import statistics as st
import sys

n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
rows = {}
for line in open(sys.argv[1]):
    v, *xs = line.split()
    if xs:
        rows.setdefault(v, []).append([float(x) for x in xs[:n]])
med = [st.median([r[i] for rs in rows.values() for r in rs]) for i in range(n)]
for v, rs in rows.items():
    stalled = sum(1 for r in rs for i, x in enumerate(r) if x > 2 * med[i])
    second = sum(1 for r in rs if r[1] > 2 * med[1])
    print(f"{v}: runs {len(rs)}, rows above 2x the median {stalled} of {len(rs) * n}, at 16 B {second}")
