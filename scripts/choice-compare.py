#!/usr/bin/env python3
"""Two sets of choices judged on the same runs: the tables a sweep chose from before a change, and after.

For every chorus-perf --algos table in each CHECK directory (scripts/algo-bench.sh output), takes per size the
forced time of the algorithm the check run's own auto column chose ("after"), and of the one the table of the
same name in BEFORE chose ("before": a run made with the old tables, whose auto column names their choice),
each over the fastest forced time of the check run. Both choices are timed in the same run, so the comparison
does not depend on how fast the host was in the hour of either sweep.

  scripts/choice-compare.py BEFORE_DIR CHECK_DIR [CHECK_DIR...]

Prints per table: sizes within 10% of the fastest, the worst ratio and the geometric mean, before and after;
then the totals (within 10% and 25%).
"""
import glob
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module

summary = import_module("algo-summary")


def gmean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    before_dir, checks = sys.argv[1], sys.argv[2:]
    totals = {"before": [], "after": []}
    for check in checks:
        for path in sorted(glob.glob(os.path.join(check, "algos-*ranks.txt"))):
            name = os.path.basename(path)
            old_path = os.path.join(before_dir, name)
            if not os.path.exists(old_path):
                print(f"{path}: no {old_path}, skipped", file=sys.stderr)
                continue
            _, rows = summary.parse(path)
            old_choice = {size: algo for size, _, _, algo in summary.parse(old_path)[1]}
            ratios = {"before": [], "after": []}
            for size, times, _, auto_algo in rows:
                forced = [t for t in times.values() if t > 0]
                if not forced or size not in old_choice:
                    continue
                best = min(forced)
                for key, algo in (("before", old_choice[size]), ("after", auto_algo)):
                    if times.get(algo, 0) > 0:
                        ratios[key].append(times[algo] / best)
            cells = []
            for key in ("before", "after"):
                v = ratios[key]
                totals[key] += v
                cells.append(f"{key}: within 10% {sum(x <= 1.1 for x in v)}/{len(v)}, worst {max(v):.2f}, "
                             f"geometric mean {gmean(v):.3f}" if v else f"{key}: no rows")
            print(f"{os.path.basename(check.rstrip('/'))} {name[len('algos-'):-len('.txt')]}: " + " | ".join(cells))
    for key in ("before", "after"):
        v = totals[key]
        if v:
            print(f"all, {key}: within 10% {sum(x <= 1.1 for x in v)}/{len(v)}, within 25% "
                  f"{sum(x <= 1.25 for x in v)}, geometric mean {gmean(v):.3f}")


if __name__ == "__main__":
    main()
