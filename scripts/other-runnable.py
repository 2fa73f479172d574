#!/usr/bin/env python3
"""How many tasks besides this probe were runnable on the host: the least of several readings of the running
count in /proc/loadavg (its fourth field, "running/total"), less one for the probe itself.

  scripts/other-runnable.py [--samples N] [--interval-ms MS] [--loadavg FILE]

Prints the number. 0: nothing else wanted the CPUs at any reading; 1 or more at every reading: something did,
such as a busy process left over from an earlier experiment, and benchmarks run then are slowed (a busy
process beside a 2-rank job made Chorus's small tcp calls ~8 times and its small shm calls up to several
hundred times slower: docs/performance.md, "Beside a busy process the peers are faster"). The kernel's own
threads rarely show in every reading, so the least of them is the figure. scripts/bench.sh notes it before
each comparison.
"""
import argparse
import time


def running_others(text):
    """The running count of one /proc/loadavg reading, less the reader."""
    fields = text.split()
    running = int(fields[3].split("/")[0])
    return max(0, running - 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--interval-ms", type=float, default=20)
    p.add_argument("--loadavg", default="/proc/loadavg")
    a = p.parse_args()
    if a.samples < 1:
        p.error("--samples must be at least 1")
    least = None
    for i in range(a.samples):
        if i:
            time.sleep(a.interval_ms / 1000)
        with open(a.loadavg) as f:
            n = running_others(f.read())
        least = n if least is None else min(least, n)
    print(least)


if __name__ == "__main__":
    main()
