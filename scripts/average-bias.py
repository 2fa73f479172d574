#!/usr/bin/env python3
"""Whether timing by the mean over ranks misleads the choice of algorithm, for symmetric collectives.

    scripts/average-bias.py [--ranks N] [--transport T] [--min B] [--max B] [--bin DIR] COLL[,COLL...]
                            [-- extra chorus-perf args]

For each collective, four runs of `chorus-perf COLL --algos all` alternate the time reported across ranks
(--average 1: the mean; 3: the slowest rank's, as compare.sh times). Per size, the fastest algorithm of one run
is timed in another, and its time there is divided by that run's fastest. Three pairings are printed: chosen by
the mean and judged by the slowest rank (what tables timed by the mean do to compare.sh's figure), chosen and
judged by the slowest rank (the run-to-run noise floor of the same), and mean against mean. If the first is no
worse than the second, the mean's tables serve; a rooted collective whose root leaves early (broadcast's chain,
a linear reduce) is where it is worse (docs/algorithms.md, "Broadcast timed by the slowest rank").
"""
import argparse
import os
import re
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, coll, average, extra):
    cmd = [os.path.join(args.bin, "chorus-run"), "-n", str(args.ranks), "--no-prefix", "--",
           os.path.join(args.bin, "chorus-perf"), coll, "-b", args.min, "-e", args.max, "-f", "4",
           "--algos", "all", "-n", "20", "--repeats", "5", "-w", "2", "-c", "0", "--rotate", "0",
           "--average", str(average)] + extra
    out = subprocess.run(cmd, env=dict(os.environ, CHORUS_TRANSPORT=args.transport), capture_output=True,
                         text=True, check=True).stdout
    names = re.search(r"# Algorithms of \w+: (.*)", out).group(1).split(", ")
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) > 5 + len(names) and f[0].isdigit() and f[1].isdigit() and int(f[0]) > 0:
            rows[int(f[0])] = dict(zip(names, map(float, f[5:5 + len(names)])))
    return rows


def loss(choose, judge):
    """Per size: the time in `judge` of `choose`'s fastest algorithm over `judge`'s fastest."""
    return [judge[s][min(choose[s], key=choose[s].get)] / min(judge[s].values()) for s in judge if s in choose]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("colls")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--transport", default="tcp")
    p.add_argument("--min", default="4K")
    p.add_argument("--max", default="4M")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"), help="where chorus-run and chorus-perf are")
    p.add_argument("extra", nargs="*")
    args = p.parse_args()
    for coll in args.colls.split(","):
        mean1, max1, mean2, max2 = (run(args, coll, a, args.extra) for a in (1, 3, 1, 3))

        def text(r):
            return f"median {statistics.median(r):.3f}, beyond 10% {sum(v > 1.1 for v in r)}/{len(r)}"

        print(f"{coll}: chosen by the mean, judged by the slowest rank: {text(loss(mean1, max2) + loss(mean2, max1))}; "
              f"slowest / slowest: {text(loss(max1, max2) + loss(max2, max1))}; "
              f"mean / mean: {text(loss(mean1, mean2) + loss(mean2, mean1))}")


if __name__ == "__main__":
    main()
