#!/usr/bin/env python3
"""Tests of scripts/compare-median.py: medians over repeated compare.sh runs of one row.

The inputs are files in compare.sh's format written here from random times; the reference is computed from
those times directly (each run's best peer and ratio, then the medians), not from the script's parser.
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

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "compare-median.py")
PEERS = ["mpich-shm", "ompi-shm"]
SIZES = [8, 16, 1024, 1 << 20]


def write_run(path, times, note):
    """times: {impl: {size: us}}, as compare.sh prints them (one table per implementation, then the ratios)."""
    with open(path, "w") as f:
        f.write(f"# {note} ../shared/peers/compare.sh -n 2 -t shm -c allreduce\n")
        write_tables(f, "allreduce", 2, "chorus-shm", PEERS, SIZES, times)
        f.write("# CPU time stolen by the hypervisor (steal in /proc/stat) while this comparison ran: 0.0% of 9 ticks\n")
        f.write("# cache-line round trip before: cpus 0,1: round trip min 50 ns\n")
        f.write("# idle CPUs: cpuidle governor haltpoll, guest_halt_poll_ns=0\n")
        f.write("# other runnable tasks before this comparison: 1 (scripts/other-runnable.py)\n")
        f.write("# some other comment the notes leave out\n")


class CompareMedianTest(unittest.TestCase):
    def test_medians_over_runs_match_a_direct_computation(self):
        rng = random.Random(7)
        with tempfile.TemporaryDirectory() as d:
            runs, paths = [], []
            for i in range(5):
                # Two decimals, as compare.sh prints them, so the reference sees the same numbers.
                times = {impl: {s: round(rng.uniform(0.2, 3.0) * (1 + s / 1e4), 2) for s in SIZES}
                         for impl in ["chorus-shm"] + PEERS}
                paths.append(os.path.join(d, f"run.{i + 1}.txt"))
                write_run(paths[-1], times, f"run {i + 1}")
                runs.append(times)
            out = subprocess.run([sys.executable, SCRIPT] + paths, capture_output=True, text=True, check=True).stdout
            rows = {}
            for line in out.splitlines():
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) >= 10 and cells[1] == "5":
                    rows[cells[0]] = cells
            self.assertEqual(sorted(rows), sorted(["8 B", "16 B", "1 KiB", "1 MiB"]))
            met = 0
            for s, label in zip(SIZES, ["8 B", "16 B", "1 KiB", "1 MiB"]):
                chorus = [r["chorus-shm"][s] for r in runs]
                best = [min(r[p][s] for p in PEERS) for r in runs]
                ratios = [round(c / b, 3) for c, b in zip(chorus, best)]  # compare.sh prints three decimals
                cells = rows[label]
                self.assertAlmostEqual(float(cells[2]), statistics.median(chorus), places=6)
                self.assertAlmostEqual(float(cells[3]), statistics.median(best), places=6)
                self.assertEqual(cells[4], f"{statistics.median(ratios):.2f}")
                self.assertEqual(cells[5], f"{min(ratios):.2f}-{max(ratios):.2f}")
                self.assertEqual(cells[6], f"{sum(r <= 1.0 for r in ratios)}/5")
                winners = [min(PEERS, key=lambda p: r[p][s]) for r in runs]
                self.assertEqual(cells[7], max(PEERS, key=lambda p: (winners.count(p), -winners.index(p))))
                for k, p in enumerate(PEERS):  # the columns per peer, in sorted order
                    alone = [r["chorus-shm"][s] / r[p][s] for r in runs]
                    self.assertEqual(cells[8 + k], f"{statistics.median(alone):.2f}")
                met += statistics.median(ratios) <= 1.0
            self.assertIn(f"{met}/4 sizes with a median ratio at or below 1.0.", out)
            # Every run is listed with its first line and its notes.
            for i in range(5):
                self.assertIn(f"run.{i + 1}.txt (4 sizes): run {i + 1} ../shared/peers/compare.sh", out)
            self.assertEqual(out.count("CPU time stolen"), 5)
            self.assertEqual(out.count("cache-line round trip before"), 5)
            self.assertEqual(out.count("idle CPUs: cpuidle governor haltpoll, guest_halt_poll_ns=0"), 5)
            self.assertEqual(out.count("other runnable tasks before this comparison: 1"), 5)
            self.assertNotIn("some other comment", out)

    def test_no_files_is_a_usage_error(self):
        r = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("compare-median.py FILE", r.stderr)


if __name__ == "__main__":
    unittest.main()
