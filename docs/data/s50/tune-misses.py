#!/usr/bin/env python3
"""Misses of chorus-tune's choices against the 49th session's check sweeps (docs/data/algos-s49-*-check and
-hot-check, 2 and 4 ranks), broadcast and reduce apart from the rest.

    docs/data/s50/tune-misses.py [--sweeps TAG] DIR...    (each DIR holds {shm,tcp}-RUN.txt:
                                                          tune-tables-check.sh output)
Prints, per transport and DIR, the sizes beyond 10% and 25% of the fastest forced time, per tune run (summed
over the cold and the hot sweep), and the same for the built-in tables' choices (s49/choices-*-probe.txt).
--sweeps s50: against the fiftieth session's tcp check sweeps (docs/data/algos-s50-tcp-check, -hot-check; the
same shapes as the 49th's) instead.
"""
import collections
import glob
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../../scripts"))
ac = importlib.import_module("algo-consistency")


def misses(runs, choices):
    tot = collections.Counter()
    for (tr, coll, n), by_size in runs.items():
        grp = "bcast+reduce" if coll in ("broadcast", "reduce") else "others"
        for size, per_run in by_size.items():
            algo = choices.get((tr, coll, n, ac.COUNTS.get((coll, n, size))))
            if algo is None or len(per_run) != 2:
                continue
            for t, _ in per_run:
                x = t[algo] / min(t.values())
                for g in (grp, "all"):
                    tot[(g, ">10%")] += x > 1.10
                    tot[(g, ">25%")] += x > 1.25
    return tot


def show(label, tot, runs=1):
    cells = [f"{g} {k} {tot[(g, k)] / runs:.1f}" for g in ("all", "bcast+reduce", "others") for k in (">10%", ">25%")]
    print(f"{label:40s}", ", ".join(cells))


args = sys.argv[1:]
tag = "s49"
if args[:1] == ["--sweeps"]:
    tag, args = args[1], args[2:]
for t in ("shm", "tcp"):
    sweeps = [os.path.join(HERE, f"../algos-{tag}-{t}-check"), os.path.join(HERE, f"../algos-{tag}-{t}-hot-check")]
    if not all(os.path.isdir(d) for d in sweeps):
        continue
    runs = ac.load(sweeps)
    show(f"{t} built-in tables", misses(runs, ac.read_choices([os.path.join(HERE, f"../s49/choices-{t}-probe.txt")])))
    for d in args:
        files = sorted(glob.glob(os.path.join(d, f"{t}-*.txt")))
        tot = collections.Counter()
        for f in files:
            tot.update(misses(runs, ac.read_choices([f])))
        if files:
            show(f"{t} {os.path.basename(d.rstrip('/'))} ({len(files)} runs, mean)", tot, len(files))
