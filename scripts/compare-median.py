#!/usr/bin/env python3
"""Summarises repeated compare.sh runs of one row (scripts/bench.sh --repeat R) as medians over the runs.

  scripts/compare-median.py FILE...

On the 2-core test machine a single run's ratio at a size can move by 1.5x or more between back-to-back runs
(docs/performance.md): the host moves its two virtual CPUs between two hyperthreads of one core and two
separate cores from second to second, and steals CPU time now and then. Each run of compare.sh times the
peers and Chorus one after the other, so each run's ratio is side by side; the median over several runs is
the figure to quote. Prints a Markdown table: per size, the runs, Chorus's median time, the median of each
run's best peer time, the median ratio with its range over the runs, how many runs were at or below 1.0, and
the peer that was best most often, and the median ratio against each peer alone (MPICH's "tcp" column is its
shared memory inside a host, docs/performance.md); then each run's first line, its stolen CPU time, its
cache-line probes, how its idle CPUs wait and what else was runnable before it.
"""
import collections
import statistics
import sys

from benchfiles import human, parse


def main():
    files = sys.argv[1:]
    if not files:
        raise SystemExit(__doc__)
    by_size = collections.defaultdict(list)  # size -> [(chorus, best, peer, ratio)]
    per_peer = collections.defaultdict(lambda: collections.defaultdict(list))  # peer -> size -> [chorus / peer]
    notes = []
    for path in files:
        tables, ratios = parse(path)
        for s, c, b, p, r in ratios:
            by_size[s].append((c, b, p, r))
            for impl, rows in tables.items():
                if not impl.startswith("chorus") and s in rows and rows[s][0] > 0:
                    per_peer[impl][s].append(c / rows[s][0])
        lines = open(path).read().splitlines()
        keep = [ln for ln in lines if ln.startswith(("# CPU time stolen", "# cache-line", "# idle CPUs",
                                                     "# other runnable tasks"))]
        notes.append((path, lines[0] if lines else "", len(ratios), keep))
    print(f"Median over {len(files)} runs of compare.sh (ratio = chorus / best peer, below 1 Chorus is faster).")
    print()
    peers = sorted(per_peer)
    print("| size | runs | chorus (us) | best peer (us) | ratio: median | range | runs <= 1.0 | best peer (most often) | " +
          " | ".join(f"vs {k}" for k in peers) + " |")
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(peers))
    met = 0
    for s in sorted(by_size):
        rows = by_size[s]
        ratios = [r[3] for r in rows]
        med = statistics.median(ratios)
        met += med <= 1.0
        peer = collections.Counter(r[2] for r in rows).most_common(1)[0][0]
        print(f"| {human(s)} | {len(rows)} | {statistics.median(r[0] for r in rows):g} | "
              f"{statistics.median(r[1] for r in rows):g} | {med:.2f} | {min(ratios):.2f}-{max(ratios):.2f} | "
              f"{sum(x <= 1.0 for x in ratios)}/{len(rows)} | {peer} | " +
              " | ".join(f"{statistics.median(per_peer[k][s]):.2f}" if per_peer[k][s] else "-" for k in peers) + " |")
    print()
    print(f"{met}/{len(by_size)} sizes with a median ratio at or below 1.0.")
    print()
    print("Runs:")
    for path, first, n, keep in notes:
        print(f"- {path} ({n} sizes): {first.lstrip('# ')}")
        for k in keep:
            print(f"  - {k.lstrip('# ')}")


if __name__ == "__main__":
    main()
