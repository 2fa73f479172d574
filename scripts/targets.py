#!/usr/bin/env python3
"""Checks the performance issue's targets against compare.sh runs: one table, every target, met or missed.

  scripts/targets.py FILE...          (compare.sh outputs, as scripts/bench.sh writes them)

Files are grouped into rows by the (collective, ranks, transport) in their names
(compare-<coll>-<n>ranks-<t>[...].txt); where a row has several files (scripts/bench.sh --repeat R), each
size's ratio (Chorus / best peer, side by side in one run) is the median over the runs, as
scripts/compare-median.py reports it. Then every target of the issue is counted over the sizes it names:

  shm, 2 ranks, all_reduce:   up to 64 B <= 1.0; 1 KiB to 256 KiB <= 0.8; 1 MiB and up <= 0.5
  shm, 4 ranks, all_reduce:   <= 1.0 at every size
  tcp, 2 and 4 ranks, all_reduce: <= 1.0 at every size, and <= 0.7 from 1 MiB
  every other collective, shm and tcp, 2 and 4 ranks: <= 1.0 at every size

and each miss is listed with its median, its range over the runs and the best peer most often; where that
peer is MPICH on a tcp row, also the median ratio against the peers that use sockets (MPICH's "tcp" between
ranks of one host is its shared memory). (The memory
targets, the share of the bandwidth bound and peak resident memory, come from the full run's probes:
docs/data/bench/membw.txt and rss.txt.)
"""
import collections
import os
import re
import statistics
import sys

from benchfiles import human, parse

# (name, collective or None for "every other", transport, ranks, lowest size, highest size, limit)
TARGETS = [
    ("shm, 2 ranks, all_reduce up to 64 B", "allreduce", "shm", 2, 0, 64, 1.0),
    ("shm, 2 ranks, all_reduce 1 KiB to 256 KiB", "allreduce", "shm", 2, 1 << 10, 256 << 10, 0.8),
    ("shm, 2 ranks, all_reduce 1 MiB and up", "allreduce", "shm", 2, 1 << 20, 1 << 62, 0.5),
    ("shm, 4 ranks, all_reduce", "allreduce", "shm", 4, 0, 1 << 62, 1.0),
    ("tcp, 2 ranks, all_reduce", "allreduce", "tcp", 2, 0, 1 << 62, 1.0),
    ("tcp, 4 ranks, all_reduce", "allreduce", "tcp", 4, 0, 1 << 62, 1.0),
    ("tcp, 2 ranks, all_reduce from 1 MiB", "allreduce", "tcp", 2, 1 << 20, 1 << 62, 0.7),
    ("tcp, 4 ranks, all_reduce from 1 MiB", "allreduce", "tcp", 4, 1 << 20, 1 << 62, 0.7),
]
OTHERS = ["allgather", "reducescatter", "broadcast", "reduce", "alltoall"]


def rows_of(files):
    """(coll, n, t) -> size -> [(ratio, peer, ratio against the peers that use sockets)] over the row's files.
    MPICH's "tcp" between ranks of one host is its shared memory (docs/performance.md), so for tcp rows the
    third figure leaves it out (None where no other peer timed the size)."""
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in files:
        m = re.match(r"compare-(\w+?)-(\d+)ranks-([a-z]+)", os.path.basename(path))
        if not m:
            raise SystemExit(f"{path}: not a compare-<coll>-<n>ranks-<t>... file")
        tables, ratios = parse(path)
        for size, chorus, _, peer, ratio in ratios:
            sockets = [times[size][0] for impl, times in tables.items()
                       if not impl.startswith(("chorus", "mpich")) and size in times and times[size][0] > 0]
            vs_sockets = chorus / min(sockets) if sockets else None
            rows[(m.group(1), int(m.group(2)), m.group(3))][size].append((ratio, peer, vs_sockets))
    return rows


def check(rows, coll, t, n, lo, hi, limit):
    """(sizes looked at, misses [(size, median, lo, hi, runs, peer)]) for one target on one row."""
    sizes = {s: v for s, v in rows.get((coll, n, t), {}).items() if lo <= s <= hi}
    misses = []
    for s in sorted(sizes):
        ratios = [r for r, _, _ in sizes[s]]
        med = statistics.median(ratios)
        if med > limit:
            peer = collections.Counter(p for _, p, _ in sizes[s]).most_common(1)[0][0]
            sockets = [v for _, _, v in sizes[s] if v is not None]
            vs_sockets = statistics.median(sockets) if t == "tcp" and peer.startswith("mpich") and sockets else None
            misses.append((s, med, min(ratios), max(ratios), len(ratios), peer, vs_sockets))
    return len(sizes), misses


def describe(misses):
    return "; ".join(f"{human(s)} {med:.2f}" + (f" ({a:.2f}-{b:.2f})" if k > 1 else "") + f" vs {p}" +
                     (f" (vs the socket peers {v:.2f})" if v is not None else "")
                     for s, med, a, b, k, p, v in misses)


def main():
    files = sys.argv[1:]
    if not files or files[0] in ("-h", "--help"):
        raise SystemExit(__doc__)
    rows = rows_of(files)
    runs = sorted({len(v) for r in rows.values() for v in r.values()})
    print(f"Targets over {len(rows)} rows, {'/'.join(map(str, runs))} run(s) per size "
          "(ratio = Chorus / best peer; the median over the runs where there are several).\n")
    print("| target | sizes met | misses: size, median ratio (range over the runs), best peer most often |")
    print("|---|---|---|")
    for name, coll, t, n, lo, hi, limit in TARGETS:
        total, misses = check(rows, coll, t, n, lo, hi, limit)
        if total:
            print(f"| {name}: <= {limit} | {total - len(misses)} of {total} | {describe(misses) or '-'} |")
    grand_total = grand_met = 0
    for t in ("shm", "tcp"):
        for n in (2, 4):
            for coll in OTHERS:
                total, misses = check(rows, coll, t, n, 0, 1 << 62, 1.0)
                if not total:
                    continue
                grand_total += total
                grand_met += total - len(misses)
                print(f"| {coll}, {n} ranks, {t}: <= 1.0 | {total - len(misses)} of {total} | "
                      f"{describe(misses) or '-'} |")
    if grand_total:
        print(f"| **other collectives, all rows** | **{grand_met} of {grand_total}** | |")


if __name__ == "__main__":
    main()
