#!/usr/bin/env python3
"""Tests of scripts/loopback-probe.py's bound table (the iperf3 probe itself needs a quiet host: not here).

Runs the script with --bytes-per-second on compare.sh-format files written from random times, and checks each
row against a direct computation: the bound 2(N-1) x K / B, the medians over the runs of Chorus's time and the
best peer's, and the verdict on 0.7 x the best peer. Rows of other collectives and sizes under 1 MiB are left
out.
"""
import os
import random
import statistics
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_file import write_tables  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "loopback-probe.py")
PEERS = ["gloo-tcp", "ompi-tcp"]
SIZES = [65536, 1 << 20, 4 << 20, 64 << 20]


def write_run(path, coll, ranks, times):
    with open(path, "w") as f:
        f.write(f"# Thu Dec  3 ../shared/peers/compare.sh -n {ranks} -t tcp -c {coll}  (chorus-perf ...)\n")
        write_tables(f, coll, ranks, "chorus-tcp", PEERS, SIZES, times)


def table_rows(out, ranks):
    """{size label: cells} of the table printed for `ranks`."""
    rows, inside = {}, False
    for line in out.splitlines():
        if line.startswith("tcp all_reduce,"):
            inside = line.startswith(f"tcp all_reduce, {ranks} ranks")
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if inside and len(cells) == 7 and cells[0].endswith("MiB"):
            rows[cells[0]] = cells
    return rows


class LoopbackProbeTest(unittest.TestCase):
    def test_bound_table_matches_a_direct_computation(self):
        rng = random.Random(11)
        bps = 5.0e9
        with tempfile.TemporaryDirectory() as d:
            paths, runs = [], {2: [], 4: []}
            for n in (2, 4):
                for i in range(3):
                    times = {impl: {s: round(2 * (n - 1) * s / bps * 1e6 * rng.uniform(1.0, 3.0), 2) for s in SIZES}
                             for impl in ["chorus-tcp"] + PEERS}
                    paths.append(os.path.join(d, f"ar{n}.{i}.txt"))
                    write_run(paths[-1], "allreduce", n, times)
                    runs[n].append(times)
            # Another collective's file is skipped with a note, not mixed in.
            other = os.path.join(d, "ag.txt")
            write_run(other, "allgather", 4, runs[4][0])
            res = subprocess.run([sys.executable, SCRIPT, "--bytes-per-second", str(bps), other] + paths,
                                 capture_output=True, text=True, check=True)
            self.assertIn("skipped", res.stderr)
            for n in (2, 4):
                rows = table_rows(res.stdout, n)
                self.assertEqual(sorted(rows), sorted(["1 MiB", "4 MiB", "64 MiB"]))
                for s in SIZES[1:]:
                    cells = rows[f"{s >> 20} MiB"]
                    bound = 2 * (n - 1) * s / bps * 1e6
                    chorus = statistics.median(r["chorus-tcp"][s] for r in runs[n])
                    best = statistics.median(min(r[p][s] for p in PEERS) for r in runs[n])
                    self.assertAlmostEqual(float(cells[1]), bound, delta=0.5)
                    self.assertAlmostEqual(float(cells[2]), chorus, delta=0.5)
                    self.assertAlmostEqual(float(cells[3].rstrip("%")), 100 * bound / chorus, delta=0.5)
                    self.assertAlmostEqual(float(cells[4]), best, delta=0.5)
                    self.assertEqual(cells[6].startswith("below"), 0.7 * best < bound)

    def test_a_given_figure_needs_files(self):
        res = subprocess.run([sys.executable, SCRIPT, "--bytes-per-second", "5e9"], capture_output=True, text=True)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("COMPARE_FILE", res.stderr)


if __name__ == "__main__":
    unittest.main()
