#!/usr/bin/env python3
"""Misses of chorus-tune's choices against the s49 check sweeps, broadcast and reduce apart from the rest.

    docs/data/s49/tune-misses.py DIR    (DIR holds {shm,tcp}-{old,new}-{1..4}.txt: chorus-tune --choices-for
                                         output of four tune-check.sh runs with each library)
Prints, per transport and library, the sizes beyond 10% and 25% of the fastest forced time per tune run
(summed over the cold and the hot sweep), and the same for the built-in tables' choices (choices-*-probe.txt).
"""
import collections
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../../scripts"))
ac = importlib.import_module("algo-consistency")


def misses(runs, choices):
    tot = collections.Counter()
    for (tr, coll, n), by_size in runs.items():
        grp = "broadcast+reduce" if coll in ("broadcast", "reduce") else "others"
        for size, per_run in by_size.items():
            algo = choices.get((tr, coll, n, ac.COUNTS.get((coll, n, size))))
            if algo is None or len(per_run) != 2:
                continue
            for t, _ in per_run:
                x = t[algo] / min(t.values())
                tot[(grp, ">10%")] += x > 1.10
                tot[(grp, ">25%")] += x > 1.25
    return tot


src = sys.argv[1]
for t in ("shm", "tcp"):
    runs = ac.load([os.path.join(HERE, f"../algos-s49-{t}-check"), os.path.join(HERE, f"../algos-s49-{t}-hot-check")])
    for v in ("old", "new"):
        files = [os.path.join(src, f"{t}-{v}-{i}.txt") for i in range(1, 5)]
        tot = collections.Counter()
        for f in files:
            tot.update(misses(runs, ac.read_choices([f])))
        print(t, v, "chorus-tune, mean per tune run:", {k: round(c / len(files), 1) for k, c in sorted(tot.items())})
    print(t, "built-in tables:", dict(sorted(misses(runs, ac.read_choices([os.path.join(HERE, f"choices-{t}-probe.txt")])).items())))
