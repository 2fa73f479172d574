#!/usr/bin/env python3
"""Tests of scripts/choice-compare.py: two sets of choices judged on the forced times of the same check run.

Hand-made --algos tables: the "before" directory's auto column names the old choice, the check's its own.
"""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "choice-compare.py")


def table(rows):
    """A chorus-perf --algos table of ring and tree: rows of (size, ring us, tree us, auto algorithm)."""
    lines = ["# Algorithms of allreduce: ring, tree\n", "#       size  count  type  redop  root  ring  tree\n"]
    for size, ring, tree, auto in rows:
        auto_time = ring if auto == "ring" else tree
        lines.append(f"{size} {size // 4} float sum -1 {ring} {tree} {auto_time} {auto} 1.00 ring 0\n")
    return "".join(lines)


class ChoiceCompare(unittest.TestCase):
    def run_script(self, before_rows, check_rows):
        with tempfile.TemporaryDirectory() as d:
            before, check = os.path.join(d, "before"), os.path.join(d, "check")
            for path, rows in ((before, before_rows), (check, check_rows)):
                os.mkdir(path)
                with open(os.path.join(path, "algos-shm-allreduce-2ranks.txt"), "w") as f:
                    f.write(table(rows))
            out = subprocess.run([sys.executable, SCRIPT, before, check], capture_output=True, text=True,
                                 timeout=60)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            return out.stdout

    def test_both_choices_are_timed_in_the_check_run(self):
        # Before chose tree at both sizes (its own times do not matter); the check run chose ring, then tree.
        # Check times: 8 B ring 1.0, tree 2.0; 64 B ring 5.0, tree 4.0.
        out = self.run_script([(8, 9.0, 1.0, "tree"), (64, 9.0, 1.0, "tree")],
                              [(8, 1.0, 2.0, "ring"), (64, 5.0, 4.0, "tree")])
        # before: 2.0 / 1.0 and 4.0 / 4.0; after: 1.0 and 1.0.
        self.assertIn("before: within 10% 1/2, worst 2.00, geometric mean 1.414", out)
        self.assertIn("after: within 10% 2/2, worst 1.00, geometric mean 1.000", out)
        self.assertIn("all, before: within 10% 1/2, within 25% 1, geometric mean 1.414", out)
        self.assertIn("all, after: within 10% 2/2, within 25% 2, geometric mean 1.000", out)

    def test_sizes_the_before_run_lacks_are_left_out(self):
        out = self.run_script([(8, 1.0, 1.0, "ring")], [(8, 1.0, 1.2, "tree"), (64, 1.0, 1.0, "ring")])
        self.assertIn("before: within 10% 1/1", out)
        self.assertIn("after: within 10% 0/1, worst 1.20", out)

    def test_usage_without_arguments(self):
        out = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("BEFORE_DIR CHECK_DIR", out.stderr)


if __name__ == "__main__":
    unittest.main()
