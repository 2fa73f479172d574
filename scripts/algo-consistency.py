#!/usr/bin/env python3
"""How well could any fixed algorithm table do? The run-to-run test of the automatic choice's target.

The algorithms issue asks that the automatic choice be within 10% of the best forced algorithm at every
measured size and never beyond 25%. The library's choice is a function of (collective, bytes, world size,
transport): a fixed table. When several sweeps of the same code (scripts/algo-bench.sh) disagree about which
algorithm is fastest at a size, no fixed table can be within 10% in all of them.

For every (collective, world size, size) this script finds the fixed choice that does best across the runs
given: the algorithm whose worst ratio to the fastest forced time, over the runs, is smallest (its "minimax"
ratio m). Then:
  m <= 1.10            a table within 10% in every one of these runs exists (which does not make it right
                       in the next run: see --cross-validate);
  1.10 < m <= 1.25     no fixed table is within 10% in every run;
  m > 1.25             no fixed table is within 25% in every run.
It also counts, per run, the sizes where the automatic choice was beyond 10% and beyond 25% of that run's
fastest, and how many of those fell where a table within 10% of every run exists.

With --cross-validate it also asks how a table fitted to some runs fares in a run it has not seen: each run
in turn is held out, a choice per size is made from the others (by the minimax rule above, and by the
geometric mean of each algorithm's times, which is how scripts/fit-measured.py combines runs), and the
held-out run's ratio for that choice is counted. --smooth W adds the rule scripts/fit-measured.py now fits by:
the geometric mean, then each algorithm's ratio to the fastest smoothed with its ratios at half and twice the
size at weight W (fit-measured.py's smooth_ratios and NEIGHBOUR_WEIGHT).

With --choices it times a given table in every run instead: the automatic choices that chorus-tune prints
for the sweeps' shapes, for example those of the tables built into the library now:

  for n in 2 3 4 8; do
    scripts/algo-consistency.py --shapes $n DIR... > shapes-$n.txt
    CHORUS_TRANSPORT=shm build/bin/chorus-run -n $n --no-prefix -- build/bin/chorus-tune --choices-for shapes-$n.txt
  done > choices-shm.txt
  scripts/algo-consistency.py --choices choices-shm.txt DIR...

  scripts/algo-consistency.py [--detail] [--cross-validate [--smooth W]] [--choices FILE]... DIR DIR [DIR...]
  scripts/algo-consistency.py --shapes N DIR [DIR...]

Each DIR holds one sweep's tables (algos-<transport>-<coll>-<N>ranks.txt) of one transport.
"""
import argparse
import collections
import glob
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module

summary = import_module("algo-summary")
fit = import_module("fit-measured")

COLLS = ["allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall"]


COUNTS = {}  # (coll, n, size) -> element count of that row, as the sweeps ran it


def load(dirs):
    """(transport, coll, n) -> size -> [per run: (forced times dict, auto's algorithm)]."""
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    for d in dirs:
        paths = sorted(glob.glob(os.path.join(d, "algos-*-*-*ranks.txt")))
        if not paths:
            sys.exit(f"no algos-*-*-*ranks.txt tables in {d}")
        for path in paths:
            m = re.search(r"algos-(\w+)-(\w+)-(\d+)ranks", os.path.basename(path))
            for line in open(path):
                f = line.split()
                if len(f) > 1 and f[0].isdigit() and f[1].isdigit():
                    COUNTS[(m.group(2), int(m.group(3)), int(f[0]))] = int(f[1])
            _, rows = summary.parse(path)
            for size, times, _, auto_algo in rows:
                times = {a: t for a, t in times.items() if t > 0}
                if size > 0 and times:  # zero bytes is no call's business (as in algo-summary.py)
                    runs[(m.group(1), m.group(2), int(m.group(3)))][size].append((times, auto_algo))
    return runs


def minimax(per_run):
    """The fixed choice with the smallest worst ratio over the runs: (ratio, algorithm)."""
    algos = set.intersection(*(set(t) for t, _ in per_run))
    return min((max(t[a] / min(t.values()) for t, _ in per_run), a) for a in algos)


def geomean_choice(per_run):
    algos = set.intersection(*(set(t) for t, _ in per_run))
    return min(algos, key=lambda a: sum(math.log(t[a]) for t, _ in per_run))


def smoothed_choice(by_size, size, held, weight):
    """The choice at `size` of tables fitted as scripts/fit-measured.py fits them from the runs but `held`: each
    algorithm's geometric mean over those runs, smoothed across neighbouring sizes at `weight` (smooth_ratios)."""
    per_algo = collections.defaultdict(dict)
    for s in (size // 2, size, size * 2):
        per_run = [t for r, (t, _) in enumerate(by_size.get(s, [])) if r != held]
        if len(by_size.get(s, [])) != len(by_size[size]):
            continue
        for a in set.intersection(*(set(t) for t in per_run)):
            per_algo[a][s] = math.exp(sum(math.log(t[a]) for t in per_run) / len(per_run))
    smoothed = fit.smooth_ratios(per_algo, weight)
    return min((a for a in smoothed if size in smoothed[a]), key=lambda a: smoothed[a][size])


def cross_validate(runs, nruns, smooth=0.0):
    """Held-out misses per rule: {rule: Counter(beyond10, beyond25, points)}."""
    out = {"minimax": collections.Counter(), "geomean": collections.Counter()}
    if smooth > 0:
        out[f"geomean, smoothed at neighbour weight {smooth}"] = collections.Counter()
    for key, by_size in runs.items():
        for size, per_run in by_size.items():
            if len(per_run) != nruns:
                continue
            for held in range(nruns):
                rest = per_run[:held] + per_run[held + 1:]
                times = per_run[held][0]
                rules = [("minimax", minimax(rest)[1]), ("geomean", geomean_choice(rest))]
                if smooth > 0:
                    rules.append((f"geomean, smoothed at neighbour weight {smooth}",
                                  smoothed_choice(by_size, size, held, smooth)))
                for rule, choice in rules:
                    if choice not in times:
                        continue
                    ratio = times[choice] / min(times.values())
                    out[rule].update(points=1, beyond10=ratio > 1.10, beyond25=ratio > 1.25)
    return out


def read_choices(paths):
    """(transport, coll, n, count) -> algorithm, from chorus-tune --choices-for output (prefixes "[r] " allowed)."""
    out = {}
    for path in paths:
        transport = n = None
        for line in open(path):
            line = re.sub(r"^\[\d+\] ", "", line.strip())
            m = re.match(r"# chorus-tune choices: (\w+), (\d+) ranks", line)
            if m:
                transport, n = m.group(1), int(m.group(2))
                continue
            f = line.split()
            if len(f) == 3 and f[1].isdigit() and transport:
                out[(transport, f[0], n, int(f[1]))] = f[2]
    return out


def time_choices(runs, nruns, choices):
    """Per run: how many sizes the given choices put beyond 10% and 25% of the fastest; and sizes looked up."""
    beyond10, beyond25, found = [0] * nruns, [0] * nruns, 0
    for (transport, coll, n), by_size in runs.items():
        for size, per_run in by_size.items():
            algo = choices.get((transport, coll, n, COUNTS.get((coll, n, size))))
            if algo is None or len(per_run) != nruns:
                continue
            found += 1
            for r, (t, _) in enumerate(per_run):
                ratio = t[algo] / min(t.values())
                beyond10[r] += ratio > 1.10
                beyond25[r] += ratio > 1.25
    return beyond10, beyond25, found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--detail", action="store_true", help="list every size where auto missed 10%%")
    ap.add_argument("--smooth", type=float, default=0.0,
                    help="with --cross-validate, also the rule of tables smoothed across neighbouring sizes at "
                         "this weight (scripts/fit-measured.py's smooth_ratios; it uses %g)" % fit.NEIGHBOUR_WEIGHT)
    ap.add_argument("--cross-validate", action="store_true",
                    help="hold each run out in turn and time the other runs' choices in it")
    ap.add_argument("--choices", action="append", metavar="FILE",
                    help="chorus-tune --choices-for output (repeatable): time these choices in every run")
    ap.add_argument("--shapes", type=int, metavar="N",
                    help="print the sweeps' (collective, count) pairs at N ranks, for chorus-tune --choices-for")
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    runs = load(args.dirs)
    nruns = len(args.dirs)
    if args.shapes:
        print(f"# the shapes of {nruns} sweep(s) at {args.shapes} ranks: collective count")
        for coll, n, size in sorted(COUNTS, key=lambda k: (COLLS.index(k[0]), k[2])):
            if n == args.shapes and size > 0:
                print(coll, COUNTS[(coll, n, size)])
        return
    if args.choices:
        beyond10, beyond25, found = time_choices(runs, nruns, read_choices(args.choices))
        if not found:
            sys.exit("no size of the sweeps has a choice in the --choices files")
        print(f"The given choices at {found} sizes, per run: beyond 10% " + ", ".join(map(str, beyond10))
              + "; beyond 25% " + ", ".join(map(str, beyond25)))
        return
    if len(args.dirs) < 2:
        sys.exit("give at least two sweeps of the same code")
    print("| collective | ranks | sizes | a table within 10% of every run exists | within 25% | "
          "auto beyond 10% per run (of them, where such a table exists) | auto beyond 25% per run |")
    print("|---|---|---|---|---|---|---|")
    totals = collections.Counter()
    details = []
    for (transport, coll, n) in sorted(runs, key=lambda k: (k[0], COLLS.index(k[1]), k[2])):
        by_size = runs[(transport, coll, n)]
        sizes = [s for s in sorted(by_size) if len(by_size[s]) == nruns]
        ok10 = ok25 = 0
        miss10 = [0] * nruns
        miss10_fixable = [0] * nruns
        miss25 = [0] * nruns
        for s in sizes:
            m, best_fixed = minimax(by_size[s])
            ok10 += m <= 1.10
            ok25 += m <= 1.25
            for r, (t, auto) in enumerate(by_size[s]):
                if auto not in t:
                    continue
                ratio = t[auto] / min(t.values())
                if ratio > 1.10:
                    miss10[r] += 1
                    miss10_fixable[r] += m <= 1.10
                    details.append((transport, coll, n, s, r, auto, ratio, best_fixed, m))
                miss25[r] += ratio > 1.25
        totals.update(sizes=len(sizes), ok10=ok10, ok25=ok25)
        for r in range(nruns):
            totals[f"miss10_{r}"] += miss10[r]
            totals[f"fix10_{r}"] += miss10_fixable[r]
            totals[f"miss25_{r}"] += miss25[r]
        print(f"| {coll} | {n} | {len(sizes)} | {ok10} | {ok25} | "
              + ", ".join(f"{a} ({b})" for a, b in zip(miss10, miss10_fixable)) + " | "
              + ", ".join(map(str, miss25)) + " |")
    print(f"| all | | {totals['sizes']} | {totals['ok10']} | {totals['ok25']} | "
          + ", ".join(f"{totals[f'miss10_{r}']} ({totals[f'fix10_{r}']})" for r in range(nruns)) + " | "
          + ", ".join(str(totals[f"miss25_{r}"]) for r in range(nruns)) + " |")
    if args.cross_validate:
        print(f"\nEach of the {nruns} runs held out in turn, choices made from the others:")
        for rule, c in cross_validate(runs, nruns, args.smooth).items():
            print(f"  {rule}: {c['points']} held-out (size, run) points, beyond 10%: {c['beyond10']} "
                  f"({100 * c['beyond10'] / c['points']:.1f}%), beyond 25%: {c['beyond25']} "
                  f"({100 * c['beyond25'] / c['points']:.1f}%)")
    if args.detail:
        print("\nauto beyond 10% (run numbers from 0 in the order given):")
        for transport, coll, n, s, r, auto, ratio, best_fixed, m in details:
            verdict = "a table within 10% exists" if m <= 1.10 else "no table within 10% of every run"
            print(f"  {transport} {coll} {n} ranks {s} B run {r}: auto {auto} {ratio:.2f}; "
                  f"best fixed {best_fixed} (worst {m:.2f}): {verdict}")


if __name__ == "__main__":
    main()
