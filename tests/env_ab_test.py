#!/usr/bin/env python3
"""Tests of scripts/env-ab.py: alternating two environment settings over real chorus-perf runs.

    env_ab_test.py BIN_DIR   (where chorus-run and chorus-perf were built)

Each side forces a different all_reduce algorithm (CHORUS_ALGO), so that the two sides really differ; every
size must show one time per round on each side, and the medians and the ratio printed for it are checked
against the round times printed beside them.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "env-ab.py")
BIN = None


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300)


class EnvAb(unittest.TestCase):
    def test_rows_medians_and_ratio(self):
        rounds = 3
        out = run(str(rounds), "2", "shm", "CHORUS_ALGO=allreduce:ring", "CHORUS_ALGO=allreduce:recursive_doubling",
                  "--bin", BIN, "--", "allreduce", "-b", "8", "-e", "4K", "-f", "8", "-n", "20", "-w", "2")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        lines = [l for l in out.stdout.splitlines() if l and not l.startswith("#") and l.split()[0].isdigit()]
        self.assertEqual([int(l.split()[0]) for l in lines], [8, 64, 512, 4096])
        for line in lines:
            f = line.split()
            a_med, b_med, ratio = float(f[1]), float(f[2]), float(f[3])
            a_runs, b_runs = line.split(maxsplit=4)[4].split("|")
            a_runs = [float(x) for x in a_runs.split()]
            b_runs = [float(x) for x in b_runs.split()]
            self.assertEqual((len(a_runs), len(b_runs)), (rounds, rounds), line)
            self.assertAlmostEqual(a_med, statistics.median(a_runs), delta=0.01 * a_med + 0.01, msg=line)
            self.assertAlmostEqual(b_med, statistics.median(b_runs), delta=0.01 * b_med + 0.01, msg=line)
            self.assertAlmostEqual(ratio, b_med / a_med, delta=0.01 + 0.01 * ratio, msg=line)

    def test_column_reads_the_algorithm_ran(self):
        # chorus-perf's algorithm column is not a number: the script says so rather than print nonsense.
        out = run("1", "2", "shm", "X=0", "X=1", "--bin", BIN, "--column", "14", "--", "allreduce", "-b", "8",
                  "-e", "8", "-n", "5")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("is not a number", out.stderr)

    def test_only_waits_for_the_placement_asked_for(self):
        # A bin directory whose cache-line probe always reads 100 ns (the two CPUs near): --only near runs every
        # round and groups them under 200 ns; --only far runs none once its wait is spent, and says so.
        with tempfile.TemporaryDirectory() as d:
            for tool in ("chorus-run", "chorus-perf"):
                os.symlink(os.path.join(os.path.abspath(BIN), tool), os.path.join(d, tool))
            probe = os.path.join(d, "cacheline_pingpong")
            with open(probe, "w") as f:
                f.write("#!/bin/sh\necho 'cpus 0,1: round trip min 90 ns, median 100 ns, max 110 ns'\n")
            os.chmod(probe, 0o755)
            args = ["2", "2", "shm", "X=0", "X=1", "--bin", d]
            perf = ["--", "allreduce", "-b", "8", "-e", "64", "-f", "8", "-n", "10", "-w", "1"]
            out = run(*args, "--only", "near", *perf)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertIn("## cache-line round trip under 200 ns: 2 rounds", out.stdout)
            self.assertEqual([l.split()[0] for l in out.stdout.splitlines() if l and l.split()[0].isdigit()],
                             ["8", "64"])
            out = run(*args, "--only", "far", "--wait-s", "0", *perf)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertIn("waited 0 s for the CPUs to sit far: 0 rounds run", out.stderr)
            self.assertNotIn("## cache-line round trip", out.stdout)

    def test_bad_setting_and_failing_run(self):
        out = run("1", "2", "shm", "X", "Y=1", "--bin", BIN, "--", "allreduce")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("'X' is not NAME=VALUE", out.stderr)
        out = run("1", "2", "shm", "X=0", "X=1", "--bin", BIN, "--", "allreduce", "--no-such-option")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("failed", out.stderr)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
