#!/usr/bin/env python3
"""A/B of two environment settings on one build: chorus-perf runs alternate between them, round by round.

    scripts/env-ab.py ROUNDS NRANKS TRANSPORT 'A_SETTINGS' 'B_SETTINGS' -- CHORUS_PERF_ARGS...

Options before the --: --column N, --bin DIR (chorus-run and chorus-perf; default build/bin), --c SETTINGS (a
third setting, C, run after A and B in each round), --placement (before and after each round, time a cache-line
round trip between the two CPUs with build/bin/cacheline_pingpong, and report rounds where both probes read
under 200 ns apart from rounds where both read over 400 ns; rounds that moved in between are left out: on a
virtual machine whose two CPUs sit in changing places, copies between them cost several times more in some),
--only near|far (implies --placement: start a round only once the probe reads under 200 ns, or over 400 ns,
probing every 5 s; --wait-s S, default 1800, bounds the whole wait, after which the rounds so far are reported).
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
import time

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
    p.add_argument("--c", default=None, help="a third setting, run after A and B in every round")
    p.add_argument("--placement", action="store_true",
                   help="probe the CPUs' cache-line round trip around each round and group rounds by it")
    p.add_argument("--only", choices=["near", "far"], default=None,
                   help="run rounds only while the CPUs sit under 200 ns (near) or over 400 ns (far) apart")
    p.add_argument("--wait-s", type=float, default=1800.0,
                   help="with --only: the longest total wait for the placement (default 1800 s)")
    p.add_argument("--column", type=int, default=6,
                   help="field of a '[0] size ...' row to compare (6: out-of-place time in us)")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                   help="where chorus-run and chorus-perf are (default: build/bin)")
    args = p.parse_args(argv[:split])
    if args.only:
        args.placement = True
    perf_args = argv[split + 1:]
    names = ["A", "B"] + (["C"] if args.c is not None else [])
    texts = [args.a, args.b] + ([args.c] if args.c is not None else [])
    settings = [parse_settings(t) for t in texts]
    groups = collections.defaultdict(lambda: [collections.defaultdict(list) for _ in names])
    left_out = 0
    bin_dir = args.bin

    def probe():
        out = subprocess.run([os.path.join(bin_dir, "cacheline_pingpong"), "-q", "-s", "3", "-i", "100",
                              "-n", "10000"], capture_output=True, text=True)
        last = out.stdout.strip().splitlines()[-1].split() if out.stdout.strip() else []
        return int(last[8]) if len(last) > 8 and last[8].isdigit() else -1  # "... median N ns" (the 9th field)

    def wanted(ns):
        return ns > 0 and (ns < 200 if args.only == "near" else ns > 400)

    waited = 0.0
    for r in range(args.rounds):
        before = probe() if args.placement else 0
        while args.only and not wanted(before) and waited < args.wait_s:
            time.sleep(5)
            waited += 5
            before = probe()
        if args.only and not wanted(before):
            print(f"# waited {waited:.0f} s for the CPUs to sit {args.only}: {r} rounds run", file=sys.stderr)
            break
        order = [0, 1] if r % 2 == 0 else [1, 0]
        order += list(range(2, len(names)))
        round_times = [collections.defaultdict(list) for _ in names]
        for i in order:
            env = dict(os.environ, CHORUS_TRANSPORT=args.transport, **settings[i])
            cmd = [os.path.join(bin_dir, "chorus-run"), "-n", args.nranks, "--",
                   os.path.join(bin_dir, "chorus-perf")] + perf_args
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"env-ab.py: {' '.join(cmd)} ({names[i]}) failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
            for size, t in rows(out.stdout, args.column):
                round_times[i][size].append(t)
        group = "all rounds"
        if args.placement:
            after = probe()
            group = ("under 200 ns" if max(before, after) < 200 and min(before, after) > 0 else
                     "over 400 ns" if min(before, after) > 400 else None)
            if group is None:
                left_out += 1
                continue
        for i in range(len(names)):
            for size, ts in round_times[i].items():
                groups[group][i][size].extend(ts)
    print(f"# {args.rounds} rounds, {args.nranks} ranks, {args.transport}: " +
          ", ".join(f"{n} = {t!r}" for n, t in zip(names, texts)))
    print(f"# chorus-perf {' '.join(perf_args)}")
    if args.placement:
        print(f"# rounds whose placement moved between the probes (left out): {left_out}")
    for group, times in groups.items():
        count = len(next(iter(times[0].values()), []))
        if args.placement:
            print(f"## cache-line round trip {group}: {count} rounds")
        print(f"{'size':>10} " + " ".join(f"{n + ' median':>10}" for n in names) + " " +
              " ".join(f"{n + '/A':>6}" for n in names[1:]) + "   rounds: " + " | ".join(names))
        for size in sorted(set.intersection(*(set(t) for t in times))):
            med = [statistics.median(t[size]) for t in times]
            spread = " | ".join(" ".join(f"{x:.3g}" for x in t[size]) for t in times)
            print(f"{size:>10} " + " ".join(f"{m:10.4g}" for m in med) + " " +
                  " ".join(f"{m / med[0]:6.2f}" for m in med[1:]) + f"   {spread}")

if __name__ == "__main__":
    main()
