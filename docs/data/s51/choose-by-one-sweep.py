#!/usr/bin/env python3
"""How close can any fixed choice come on the check sweeps, and how close does a choice made from one sweep
come on the other? Against the built-in tables' choices (docs/data/s49/choices-{shm,tcp}-probe.txt).

    docs/data/s51/choose-by-one-sweep.py TAG TRANSPORT     (TAG s49: docs/data/algos-s49-{t}-check and
                                                            -hot-check; s50: the fiftieth session's tcp ones)
Prints, over the sizes both sweeps timed (285 per transport: 2 and 4 ranks, every collective):
  oracle>10 / >25   sizes where even the best algorithm for both sweeps together (chosen knowing both) is
                    beyond 10% / 25% of the fastest in one of them: what no fixed table can meet;
  builtin-any>10/25 sizes where the built-in tables' choice is beyond 10% / 25% in either sweep;
  cross >10 / >25   of the 570 (size, sweep) pairs: the choice made from the other sweep's fastest, scored
                    on this one (a table fitted to one run, held out on the next);
  cross bi>10 / >25 the built-in tables' choice over the same 570 pairs.
"""
import collections
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../../scripts"))
ac = importlib.import_module("algo-consistency")
tag, t = sys.argv[1], sys.argv[2]
runs = ac.load([os.path.join(HERE, f"../algos-{tag}-{t}-check"), os.path.join(HERE, f"../algos-{tag}-{t}-hot-check")])
bi = ac.read_choices([os.path.join(HERE, f"../s49/choices-{t}-probe.txt")])
tot, cross = collections.Counter(), collections.Counter()
for (tr, coll, n), by_size in sorted(runs.items()):
    for size, per_run in sorted(by_size.items()):
        if len(per_run) != 2:
            continue
        algos = set.intersection(*[set(x) for x, _ in per_run])
        worst = {a: max(x[a] / min(x.values()) for x, _ in per_run) for a in algos}
        best = min(worst.values())
        tot["sizes"] += 1
        tot["oracle>10"] += best > 1.10
        tot["oracle>25"] += best > 1.25
        a = bi.get((tr, coll, n, ac.COUNTS.get((coll, n, size))))
        if a in worst:
            tot["builtin-any>10"] += worst[a] > 1.10
            tot["builtin-any>25"] += worst[a] > 1.25
        (x_t, _), (y_t, _) = per_run
        for x, y in ((x_t, y_t), (y_t, x_t)):
            pick = min(x, key=x.get)
            if pick in y:
                r = y[pick] / min(y.values())
                cross[">10"] += r > 1.10
                cross[">25"] += r > 1.25
            if a in y:
                r = y[a] / min(y.values())
                cross["bi>10"] += r > 1.10
                cross["bi>25"] += r > 1.25
print(t, tag, dict(tot))
print("  cross (of 2 x sizes):", dict(cross))
