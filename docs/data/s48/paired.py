#!/usr/bin/env python3
"""Paired ratios of tcp-spin-ab.sh files: per size, the median over rounds of (first setting's time / second
setting's time), the two settings of each round side by side (default A over D; or name them).
  docs/data/s48/paired.py [--pair A D] FILE..."""
import statistics as st
import sys

args = sys.argv[1:]
a, b = 'A', 'D'
if args[:1] == ['--pair']:
    a, b, args = args[1], args[2], args[3:]
for f in args:
    runs = {a: [], b: []}
    for line in open(f):
        v, *xs = line.split()
        if v in runs and xs:
            runs[v].append([float(x) for x in xs])
    n = min(len(runs[a]), len(runs[b]))
    ratios = [round(st.median([runs[a][i][k] / runs[b][i][k] for i in range(n)]), 2)
              for k in range(len(runs[a][0]))]
    print(f'{f.split("/")[-1]} ({a}/{b}, {n} rounds):', ratios)
