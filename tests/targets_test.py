#!/usr/bin/env python3
"""Tests of scripts/targets.py: the performance issue's targets counted over compare.sh runs.

The inputs are files in compare.sh's format written here from random times, several runs per row; the
reference counts each target from those times directly (each run's ratio against its best peer, the median
over the runs, the target's band of sizes and limit), not from the script's parser.
"""
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_file import write_tables  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "targets.py")
SIZES = [8, 64, 128, 1024, 256 << 10, 512 << 10, 1 << 20, 64 << 20]
PEERS = {"shm": ["mpich-shm", "ompi-shm"], "tcp": ["mpich-tcp", "ompi-tcp"]}
KiB, MiB = 1 << 10, 1 << 20
# The reference: (row, lowest size, highest size, limit) per target line the script prints.
EXPECTED = {
    "shm, 2 ranks, all_reduce up to 64 B: <= 1.0": (("allreduce", 2, "shm"), 0, 64, 1.0),
    "shm, 2 ranks, all_reduce 1 KiB to 256 KiB: <= 0.8": (("allreduce", 2, "shm"), KiB, 256 * KiB, 0.8),
    "shm, 2 ranks, all_reduce 1 MiB and up: <= 0.5": (("allreduce", 2, "shm"), MiB, 1 << 62, 0.5),
    "tcp, 2 ranks, all_reduce: <= 1.0": (("allreduce", 2, "tcp"), 0, 1 << 62, 1.0),
    "tcp, 2 ranks, all_reduce from 1 MiB: <= 0.7": (("allreduce", 2, "tcp"), MiB, 1 << 62, 0.7),
    "broadcast, 4 ranks, tcp: <= 1.0": (("broadcast", 4, "tcp"), 0, 1 << 62, 1.0),
    "alltoall, 2 ranks, shm: <= 1.0": (("alltoall", 2, "shm"), 0, 1 << 62, 1.0),
}
ROWS = [("allreduce", 2, "shm"), ("allreduce", 2, "tcp"), ("broadcast", 4, "tcp"), ("alltoall", 2, "shm")]


def label(s):
    for unit, div in (("MiB", MiB), ("KiB", KiB)):
        if s >= div and s % div == 0:
            return f"{s // div} {unit}"
    return f"{s} B"


class TargetsTest(unittest.TestCase):
    def test_targets_match_a_direct_computation(self):
        rng = random.Random(11)
        runs = {row: [] for row in ROWS}
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for coll, n, t in ROWS:
                for i in range(3):
                    chorus = f"chorus-{t}"
                    # Two decimals, as compare.sh prints times; ratios around the limits, so both sides occur.
                    times = {impl: {s: round(rng.uniform(1.0, 3.0) * (1 + s / 1e4), 2) for s in SIZES}
                             for impl in [chorus] + PEERS[t]}
                    path = os.path.join(d, f"compare-{coll}-{n}ranks-{t}-s46.{i + 1}.txt")
                    with open(path, "w") as f:
                        f.write(f"# run {i + 1}\n")
                        write_tables(f, coll, n, chorus, PEERS[t], SIZES, times)
                    paths.append(path)
                    runs[(coll, n, t)].append(times)
            out = subprocess.run([sys.executable, SCRIPT] + paths, capture_output=True, text=True, check=True).stdout
        lines = {}
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 3:
                lines[cells[0]] = cells
        for name, (row, lo, hi, limit) in EXPECTED.items():
            coll, n, t = row
            chorus = f"chorus-{t}"
            sizes = [s for s in SIZES if lo <= s <= hi]
            misses = {}
            for s in sizes:
                ratios = [round(r[chorus][s] / min(r[p][s] for p in PEERS[t]), 3) for r in runs[row]]
                if statistics.median(ratios) > limit:
                    misses[label(s)] = (statistics.median(ratios), min(ratios), max(ratios))
            self.assertIn(name, lines, out)
            self.assertEqual(lines[name][1], f"{len(sizes) - len(misses)} of {len(sizes)}", name)
            listed = {}
            for m in re.finditer(r"(\d+ (?:B|KiB|MiB)) (\d+\.\d\d) \((\d+\.\d\d)-(\d+\.\d\d)\) vs ([\w-]+)", lines[name][2]):
                listed[m.group(1)] = tuple(float(m.group(k)) for k in (2, 3, 4))
            self.assertEqual(sorted(listed), sorted(misses), name)
            for k, (med, a, b) in misses.items():
                self.assertEqual(listed[k], (round(med, 2), round(a, 2), round(b, 2)), f"{name} {k}")
        # Rows without files print no target line; the other collectives' total adds up their rows.
        self.assertNotIn("shm, 4 ranks, all_reduce: <= 1.0", lines)
        total = sum(int(lines[k][1].split(" of ")[1]) for k in lines if k.startswith(("broadcast", "alltoall")))
        met = sum(int(lines[k][1].split(" of ")[0]) for k in lines if k.startswith(("broadcast", "alltoall")))
        self.assertIn(f"**{met} of {total}**", out)

    def test_a_tcp_miss_against_mpich_names_the_socket_peers_ratio(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "compare-broadcast-4ranks-tcp.txt")
            times = {"chorus-tcp": {8: 10.0}, "mpich-tcp": {8: 5.0}, "ompi-tcp": {8: 8.0}}
            with open(path, "w") as f:
                write_tables(f, "broadcast", 4, "chorus-tcp", ["mpich-tcp", "ompi-tcp"], [8], times)
            out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True, check=True).stdout
        self.assertIn("| broadcast, 4 ranks, tcp: <= 1.0 | 0 of 1 | 8 B 2.00 vs mpich-tcp (vs the socket peers 1.25) |",
                      out)

    def test_no_files_is_a_usage_error(self):
        r = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("targets.py FILE", r.stderr)


if __name__ == "__main__":
    unittest.main()
