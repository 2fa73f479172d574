#!/usr/bin/env python3
"""scripts/other-runnable.py: the least running count of /proc/loadavg over its readings, less itself."""
import os
import subprocess
import sys
import tempfile
import time
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "other-runnable.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class OtherRunnableTest(unittest.TestCase):
    def test_reads_the_fourth_field_less_the_reader(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "loadavg")
            for running, expected in [(1, 0), (4, 3), (0, 0), (17, 16)]:
                with open(path, "w") as f:
                    f.write(f"0.52 0.58 0.59 {running}/467 12345\n")
                r = run("--loadavg", path, "--samples", "3", "--interval-ms", "1")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout, f"{expected}\n")

    def test_busy_processes_show_in_every_reading(self):
        # One busy process per online CPU and one more: all of them are runnable at every reading, whatever else
        # the host runs, so the least reading counts at least that many.
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() + 1)]
        try:
            time.sleep(0.3)  # past their start-up, where one might wait for the disk
            r = run("--samples", "5", "--interval-ms", "20")
        finally:
            for b in busy:
                b.kill()
                b.wait()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreaterEqual(int(r.stdout), len(busy))

    def test_samples_below_one_is_a_usage_error(self):
        r = run("--samples", "0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--samples must be at least 1", r.stderr)


if __name__ == "__main__":
    unittest.main()
