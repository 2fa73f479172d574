#!/usr/bin/env python3
"""Summary of a tcp-spin-ab.sh file: per setting, runs, rows, rows above 12 and 20 us, the mean, and each
size's median over the runs."""
import statistics as st
import sys

rows = {}
for line in open(sys.argv[1]):
    v, *xs = line.split()
    if xs:
        rows.setdefault(v, []).append([float(x) for x in xs])
for v, rs in rows.items():
    allv = [x for r in rs for x in r]
    med = [round(st.median([r[i] for r in rs]), 2) for i in range(len(rs[0]))]
    print(v, 'runs', len(rs), 'rows', len(allv), '>12us', sum(x > 12 for x in allv), '>20us',
          sum(x > 20 for x in allv), 'mean', round(st.mean(allv), 2), 'medians', med)
