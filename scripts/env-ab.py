#!/usr/bin/env python3
"""A/B of two environment settings on one build: chorus-perf runs alternate between them, round by round.

    scripts/env-ab.py ROUNDS NRANKS TRANSPORT 'A_SETTINGS' 'B_SETTINGS' -- CHORUS_PERF_ARGS...

Options before the --: --column N, --bin DIR (chorus-run and chorus-perf; default build/bin).
Each setting is a space-separated list of NAME=VALUE (use a dummy such as X=0 for "as it is"). Round i runs
A then B when i is even, B then A when it is odd, each as `build/bin/chorus-run -n NRANKS --
build/bin/chorus-perf ARGS` with CHORUS_TRANSPORT=TRANSPORT. For every size it prints the median over the rounds
of rank 0's out-of-place time (chorus-perf's time column; --column picks another field of its table rows),
B's median over A's, then every round's times, so that the spread is in view beside the ratio. On a shared
2-core machine a single run moves by up to 2x: alternate, and read ratios well inside the spread as no change.

Example (docs/performance.md, "4-rank tcp all_reduce, medians over three runs"):
    scripts/env-ab.py 6 4 tcp 'X=0' 'CHORUS_TCP_SPIN=512' -- allreduce -b 64K -e 2M -f 2 -c 0 --rotate 0 \\
        -R 0 --iters-by-size --average 3 -a rabenseifner
"""
import argparse
import collections
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_settings(text):
    env = {}
    for item in text.split():
        if "=" not in item:
            sys.exit(f"env-ab.py: '{item}' is not NAME=VALUE")
        name, value = item.split("=", 1)
        env[name] = value
    return env


def rows(output, column):
    """(size, time) of rank 0's table rows: '[0]  size count type redop root time ...'."""
    for line in output.splitlines():
        f = line.split()
        if len(f) > column and f[0] == "[0]" and f[1].isdigit():
            try:
                yield int(f[1]), float(f[column])
            except ValueError:
                sys.exit(f"env-ab.py: field {column} of chorus-perf's row is not a number: {line.strip()}")


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("rounds", type=int)
    p.add_argument("nranks")
    p.add_argument("transport")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--column", type=int, default=6,
                   help="field of a '[0] size ...' row to compare (6: out-of-place time in us)")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                   help="where chorus-run and chorus-perf are (default: build/bin)")
    args = p.parse_args(argv[:split])
    perf_args = argv[split + 1:]
    settings = [parse_settings(args.a), parse_settings(args.b)]
    times = [collections.defaultdict(list), collections.defaultdict(list)]
    bin_dir = args.bin
    for r in range(args.rounds):
        for i in ([0, 1] if r % 2 == 0 else [1, 0]):
            env = dict(os.environ, CHORUS_TRANSPORT=args.transport, **settings[i])
            cmd = [os.path.join(bin_dir, "chorus-run"), "-n", args.nranks, "--",
                   os.path.join(bin_dir, "chorus-perf")] + perf_args
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"env-ab.py: {' '.join(cmd)} ({'AB'[i]}) failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
            for size, t in rows(out.stdout, args.column):
                times[i][size].append(t)
    print(f"# {args.rounds} rounds, {args.nranks} ranks, {args.transport}: A = {args.a!r}, B = {args.b!r}")
    print(f"# chorus-perf {' '.join(perf_args)}")
    print(f"{'size':>10} {'A median':>10} {'B median':>10} {'B/A':>6}   rounds: A | B")
    for size in sorted(set(times[0]) & set(times[1])):
        a, b = statistics.median(times[0][size]), statistics.median(times[1][size])
        spread = " ".join(f"{x:.3g}" for x in times[0][size]) + " | " + " ".join(f"{x:.3g}" for x in times[1][size])
        print(f"{size:>10} {a:10.4g} {b:10.4g} {b / a:6.2f}   {spread}")


if __name__ == "__main__":
    main()
