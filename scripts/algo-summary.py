#!/usr/bin/env python3
"""Summarises the chorus-perf --algos tables written by scripts/algo-bench.sh (docs/data/algos-*.txt).

For every (collective, world size): the fastest algorithm at each size and where the crossovers fall, and
how the automatic choice compares with the best forced algorithm: auto/best is the chosen algorithm's time
(its forced column, measured in the same interleaved rounds) over the fastest forced time.

  scripts/algo-summary.py [--markdown] [--stolen] [FILES...]

--stolen adds how the misses of the automatic choice fall between rows timed while the hypervisor stole more
than 5% of the host's CPU time, rows timed with less, and rows too short to judge. The figures come from the
--json files scripts/algo-bench.sh writes beside each table (chorus-perf judges a row too short to judge alone
by the span of 20 ticks or more up to its end; older files have null there); for tables without them, from the
notes chorus-perf prints under rows above 5% ("#   ^ N% of this host's CPU time was stolen ..."), which cannot
tell quiet rows from short ones.
"""
import glob
import json
import math
import os
import re
import sys


def parse(path):
    algos, rows = [], []
    for line in open(path):
        m = re.match(r"# Algorithms of \w+: (.*)", line)
        if m:
            algos = [a.strip() for a in m.group(1).split(",")]
            continue
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        if len(f) < 5 + len(algos) + 3 or not f[0].isdigit():
            continue
        size = int(f[0])
        times = [float(x) for x in f[5:5 + len(algos)]]
        auto_time = float(f[5 + len(algos)])
        auto_algo = f[6 + len(algos)]
        rows.append((size, dict(zip(algos, times)), auto_time, auto_algo))
    return algos, rows


def stolen_rows(path):
    """size -> the stolen share (%) while that row ran: from the tables' --json files beside it where
    scripts/algo-bench.sh wrote them (None: a row too short to judge), else from the notes chorus-perf prints
    under rows above 5% (rows without a note are then absent)."""
    base = path[:-len(".txt")] if path.endswith(".txt") else path
    # A registered sweep (algo-bench.sh REGISTERED=1) has only the large sizes' file.
    jsons = [j for j in (base + ".small.json", base + ".large.json") if os.path.exists(j)]
    if os.path.exists(base + ".large.json"):
        out = {}
        for j in jsons:
            for row in json.load(open(j))["results"]:
                share = row.get("stolen_share")
                out[row["size"]] = None if share is None else 100 * share
        return out
    out, last = {}, None
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit():
            last = int(f[0])
            continue
        m = re.match(r"#\s+\^ (\d+)% of this host's CPU time was stolen", line)
        if m and last is not None:
            # A note means more than 5% (its figure is rounded): never "quiet", whatever it prints.
            out[last] = max(float(m.group(1)), 5.5)
    return out


def human(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def summarise(path):
    m = re.search(r"algos-(\w+)-(\w+)-(\d+)ranks", path)
    transport, coll, n = m.group(1), m.group(2), int(m.group(3))
    algos, rows = parse(path)
    rows = [r for r in rows if r[0] > 0 and all(t > 0 for t in r[1].values())]
    if not rows:
        return None
    fastest = []
    ratios = []
    for size, times, auto_time, auto_algo in rows:
        best = min(times, key=times.get)
        fastest.append((size, best))
        chosen = times.get(auto_algo, auto_time)
        ratios.append((chosen / times[best], size, auto_algo, best))
    # Crossovers: runs of the same fastest algorithm.
    runs = []
    for size, best in fastest:
        if runs and runs[-1][0] == best:
            runs[-1][2] = size
        else:
            runs.append([best, size, size])
    worst = max(ratios)
    geo = math.exp(sum(math.log(r[0]) for r in ratios) / len(ratios))
    within10 = sum(1 for r in ratios if r[0] <= 1.10)
    return {
        "transport": transport, "coll": coll, "n": n, "runs": runs, "worst": worst, "geo": geo,
        "within10": within10, "total": len(ratios), "ratios": ratios, "stolen": stolen_rows(path),
    }


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    markdown = "--markdown" in sys.argv
    files = args or sorted(glob.glob("docs/data/algos-*.txt"))
    order = {"allreduce": 0, "allgather": 1, "reducescatter": 2, "broadcast": 3, "reduce": 4, "alltoall": 5}
    results = [r for r in (summarise(f) for f in files) if r]
    results.sort(key=lambda r: (r["transport"], order.get(r["coll"], 9), r["n"]))
    if markdown:
        print("| collective | ranks | fastest algorithm by size (crossovers) | auto within 10% | worst auto/best | geo. mean |")
        print("|---|---|---|---|---|---|")
    for r in results:
        runs = " -> ".join(f"{a} ({human(lo)}" + (f"..{human(hi)})" if hi != lo else ")") for a, lo, hi in r["runs"])
        w = r["worst"]
        worst = f"{w[0]:.2f} at {human(w[1])} ({w[2]} vs {w[3]})"
        if markdown:
            print(f"| {r['coll']} | {r['n']} | {runs} | {r['within10']}/{r['total']} | {worst} | {r['geo']:.3f} |")
        else:
            print(f"{r['transport']} {r['coll']} {r['n']} ranks: {runs}\n  auto within 10%: "
                  f"{r['within10']}/{r['total']}; worst {worst}; geometric mean {r['geo']:.3f}")
    if "--stolen" in sys.argv:
        # rows[kind] = [rows, beyond 10%, beyond 25%]
        kinds = {"stolen": "timed with more than 5% stolen", "quiet": "timed with 5% or less stolen",
                 "unknown": "too short to judge, or without a figure (tables without --json: not noted)"}
        rows = {k: [0, 0, 0] for k in kinds}
        for r in results:
            for ratio, size, _, _ in r["ratios"]:
                share = r["stolen"].get(size)
                kind = "unknown" if share is None else ("stolen" if share > 5 else "quiet")
                c = rows[kind]
                c[0] += 1
                c[1] += ratio > 1.10
                c[2] += ratio > 1.25
        for kind, what in kinds.items():
            n, b10, b25 = rows[kind]
            share = f" ({100 * b10 / n:.1f}% / {100 * b25 / n:.1f}%)" if n else ""
            print(f"rows {what}: {n}; auto beyond 10%: {b10}, beyond 25%: {b25}{share}")


if __name__ == "__main__":
    main()
