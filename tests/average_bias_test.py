#!/usr/bin/env python3
"""Tests of scripts/average-bias.py: whether tables timed by the mean over ranks mislead the choice.

    average_bias_test.py BIN_DIR   (where chorus-run and chorus-perf were built)

The pairing arithmetic is checked on hand-made tables; a real run of two small collectives checks that every
size of every run is read and that each printed figure is a ratio to the fastest (at least 1).
"""
import importlib.util
import os
import re
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "average-bias.py")
BIN = None
spec = importlib.util.spec_from_file_location("average_bias", SCRIPT)
average_bias = importlib.util.module_from_spec(spec)
spec.loader.exec_module(average_bias)


class Loss(unittest.TestCase):
    def test_choice_of_one_run_timed_in_the_other(self):
        choose = {8: {"ring": 1.0, "tree": 2.0}, 64: {"ring": 5.0, "tree": 4.0}}
        judge = {8: {"ring": 3.0, "tree": 2.0}, 64: {"ring": 4.0, "tree": 4.0}}
        # 8: ring chosen, 3.0 where the fastest is 2.0; 64: tree chosen, 4.0, the fastest.
        self.assertEqual(average_bias.loss(choose, judge), [1.5, 1.0])

    def test_sizes_missing_from_the_choosing_run_are_skipped(self):
        self.assertEqual(average_bias.loss({8: {"a": 1.0}}, {8: {"a": 2.0}, 16: {"a": 1.0}}), [1.0])


class RealRun(unittest.TestCase):
    def test_every_size_read_and_ratios_at_least_one(self):
        out = subprocess.run([sys.executable, SCRIPT, "--ranks", "2", "--transport", "shm", "--min", "1K", "--max",
                              "16K", "--bin", BIN, "allgather,reducescatter"],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual([l.split(":")[0] for l in lines], ["allgather", "reducescatter"])
        for line in lines:
            # 1K, 4K and 16K in each of two pairings per figure: 6 points.
            figures = re.findall(r"median ([0-9.]+), beyond 10% (\d+)/(\d+)", line)
            self.assertEqual(len(figures), 3, line)
            for median, beyond, total in figures:
                self.assertGreaterEqual(float(median), 1.0, line)
                self.assertEqual(int(total), 6, line)
                self.assertLessEqual(int(beyond), 6, line)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
