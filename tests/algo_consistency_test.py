#!/usr/bin/env python3
"""Tests of scripts/algo-consistency.py: the best fixed choice over several sweeps, and the held-out check.

The references are brute forces over the runs: for the minimax choice, every algorithm's worst ratio to the
fastest forced time of each run; for the geometric-mean choice (scripts/fit-measured.py's rule), the product
of each algorithm's times.
"""
import itertools
import os
import random
import subprocess
import sys
import tempfile
import unittest
from importlib import import_module

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
consistency = import_module("algo-consistency")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "algo-consistency.py")


def brute_minimax(runs, size):
    algos = set.intersection(*(set(a for a, t in run.items() if size in t) for run in runs))
    worst = {a: max(run[a][size] / min(t[size] for t in run.values() if size in t) for run in runs)
             for a in algos}
    best = min(worst.values())
    return {a for a, w in worst.items() if w == best}, best


class Consistency(unittest.TestCase):
    def test_minimax_matches_the_brute_force(self):
        rng = random.Random(11)
        for _ in range(100):
            runs = [{a: {8: rng.uniform(1, 2)} for a in "abc"} for _ in range(3)]
            per_run = [({a: t[8] for a, t in run.items()}, "a") for run in runs]
            m, algo = consistency.minimax(per_run)
            choices, best = brute_minimax(runs, 8)
            self.assertAlmostEqual(m, best)
            self.assertIn(algo, choices)

    def test_reads_sweeps_and_skips_zero_bytes(self):
        header = ("# Algorithms of broadcast: binomial, chain\n"
                  "#   size count type redop root binomial chain auto auto auto/best fastest #wrong\n")
        rows = {  # size: (binomial, chain, auto's algorithm) per run
            0: [(0.1, 0.5, "chain"), (0.1, 0.5, "chain")],
            8: [(1.0, 2.0, "binomial"), (1.0, 0.9, "binomial")],
        }
        dirs = []
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(2):
                d = os.path.join(tmp, f"run{r}")
                os.mkdir(d)
                dirs.append(d)
                with open(os.path.join(d, "algos-shm-broadcast-4ranks.txt"), "w") as f:
                    f.write(header)
                    for size, per in rows.items():
                        b, c, auto = per[r]
                        f.write(f"{size} {size // 4} float none 0 {b} {c} {min(b, c)} {auto} 1.00 x 0\n")
            runs = consistency.load(dirs)
        by_size = runs[("shm", "broadcast", 4)]
        self.assertEqual(sorted(by_size), [8])
        m, algo = consistency.minimax(by_size[8])
        self.assertEqual(algo, "binomial")
        self.assertAlmostEqual(m, 1.0 / 0.9)

    def test_given_choices_are_timed_in_every_run(self):
        header = "# Algorithms of broadcast: binomial, chain\n"
        dirs = []
        with tempfile.TemporaryDirectory() as tmp:
            for r, (b, c) in enumerate([(1.0, 2.0), (1.0, 1.2), (1.3, 1.0)]):  # binomial, chain at 64 B (16 floats)
                d = os.path.join(tmp, f"run{r}")
                os.mkdir(d)
                dirs.append(d)
                with open(os.path.join(d, "algos-tcp-broadcast-2ranks.txt"), "w") as f:
                    f.write(header + f"64 16 float none 0 {b} {c} {min(b, c)} chain 1.00 x 0\n")
            runs = consistency.load(dirs)
            choices = os.path.join(tmp, "choices.txt")
            with open(choices, "w") as f:  # as chorus-run prints it without --no-prefix
                f.write("[0] # chorus-tune choices: tcp, 2 ranks\n[0] broadcast 16 binomial\n")
            table = consistency.read_choices([choices])
        self.assertEqual(table, {("tcp", "broadcast", 2, 16): "binomial"})
        beyond10, beyond25, found = consistency.time_choices(runs, 3, table)
        self.assertEqual(found, 1)
        self.assertEqual(beyond10, [0, 0, 1])  # run 2: 1.3 / 1.0
        self.assertEqual(beyond25, [0, 0, 1])
        # A table for another world size, or another transport, times nothing.
        self.assertEqual(consistency.time_choices(runs, 3, {("shm", "broadcast", 2, 16): "binomial"})[2], 0)
        self.assertEqual(consistency.time_choices(runs, 3, {("tcp", "broadcast", 4, 16): "binomial"})[2], 0)

    def test_shapes_lists_the_counts_the_sweeps_ran_at_one_world_size(self):
        header = "# Algorithms of allgather: ring, bruck\n"
        with tempfile.TemporaryDirectory() as tmp:
            for n, rows in ((3, ["24 2", "48 4"]), (2, ["16 2"])):
                with open(os.path.join(tmp, f"algos-shm-allgather-{n}ranks.txt"), "w") as f:
                    f.write(header + "".join(f"{r} float none -1 1.0 2.0 1.0 ring 1.00 ring 0\n" for r in rows))
            out = subprocess.run([sys.executable, SCRIPT, "--shapes", "3", tmp], capture_output=True, text=True,
                                 check=True).stdout
        self.assertEqual([l for l in out.splitlines() if not l.startswith("#")], ["allgather 2", "allgather 4"])

    def test_geomean_choice_matches_the_brute_force(self):
        rng = random.Random(5)
        for _ in range(100):
            per_run = [({a: rng.uniform(1, 2) for a in "abcd"}, "a") for _ in range(3)]
            products = {a: per_run[0][0][a] * per_run[1][0][a] * per_run[2][0][a] for a in "abcd"}
            self.assertEqual(consistency.geomean_choice(per_run), min(products, key=products.get))

    def test_cross_validation_times_each_held_out_run_with_the_others_choice(self):
        # Two sizes, three runs. At 8 B, b wins runs 0 and 1 and a wins run 2 by 1.5x; at 16 B a always wins.
        t8 = [{"a": 1.2, "b": 1.0}, {"a": 1.2, "b": 1.0}, {"a": 1.0, "b": 1.5}]
        t16 = [{"a": 1.0, "b": 2.0}] * 3
        runs = {("shm", "broadcast", 4): {8: [(t, "a") for t in t8], 16: [(t, "a") for t in t16]}}
        out = consistency.cross_validate(runs, 3)
        # Held out 0 or 1: the other two runs (b 1.0, 1.5 against a 1.2, 1.0) choose a by both rules: a is
        # 1.2 times the fastest there (beyond 10%, within 25%). Held out 2: b is chosen, 1.5 times a.
        for rule in ("minimax", "geomean"):
            self.assertEqual(out[rule]["points"], 6)
            self.assertEqual(out[rule]["beyond10"], 3)
            self.assertEqual(out[rule]["beyond25"], 1)


if __name__ == "__main__":
    unittest.main()
