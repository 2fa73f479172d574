"""Summaries of the s57 A/B logs: per setting, launches, launches whose 1 MiB row took over 1.3x the fastest
1 MiB row of the file ("slow"), and the median of each size column (256 KiB-4 MiB), also over the first setting's.
    python3 ab-stat.py FILE"""
import collections, re, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    toks = line.split()
    i = next((k for k, t in enumerate(toks) if re.fullmatch(r"[0-9]+\.?[0-9]*", t)), None)
    if i is None: continue
    nums = []
    for t in toks[i:]:
        if re.fullmatch(r"[0-9]+\.?[0-9]*", t): nums.append(float(t))
        else: break
    if len(nums) < 5: continue
    d[" ".join(toks[:i])].append(nums[:5])
keys = list(d); base = d[keys[0]]
fast = min(r[2] for v in d.values() for r in v)
for k in keys:
    v = d[k]
    med = [statistics.median(r[i] for r in v) for i in range(5)]
    rat = [m / statistics.median(r[i] for r in base) for i, m in enumerate(med)]
    slow = sum(1 for r in v if r[2] > 1.3 * fast)
    print(f"{k:44s} n={len(v):2d} slow@1M {slow:2d}  med 256K..4M " + " ".join(f"{m:7.1f}" for m in med)
          + "  vs first " + " ".join(f"{x:.2f}" for x in rat))
