#!/usr/bin/env python3
"""The tcp transport's ceiling on this host: what iperf3 moves over loopback, and the all_reduce time it allows.

  scripts/loopback-probe.py [--seconds S] [--repeats R] [--port P] [COMPARE_FILE...]
  scripts/loopback-probe.py --bytes-per-second B COMPARE_FILE...   (no probe: B from an earlier one)

Runs an iperf3 server on 127.0.0.1 and times six clients against it, each R times for S seconds (medians):
one stream with the system's congestion control, then with reno (as Chorus's same-host connections use,
docs/performance.md "Same-host tcp connections use reno"; bbr moves a quarter as much over loopback here): one
stream, one with 1 MiB writes, four streams (-P 4), one each way (--bidir), two each way. Every byte that
crosses loopback is copied twice by the kernel (into the socket buffer on the sending side, out of it on the
receiving side), so on a host with few cores the total over all streams is bound by CPU time rather than by
any wire; the best of the totals is the figure used below.

The bound: an all_reduce of K bytes over N ranks has each rank send and receive at least 2(N-1)/N x K bytes
(Patarasuk and Yuan, 2009; ring, rabenseifner and reduce+broadcast all move exactly that in total), so when all
N ranks share one host, 2(N-1) x K bytes cross its loopback per call: at B bytes per second no all_reduce over
sockets takes less than 2(N-1) x K / B. The bound leaves out the reduction and every wake-up, so a real call
is slower; a target below it is beyond sockets on this host.

COMPARE_FILE: compare.sh output of tcp all_reduce rows (scripts/bench.sh, docs/data/bench/...; several runs of
one row give medians). For every size from 1 MiB it prints the bound, Chorus's time and its share of the
bound, the best peer's time, and whether 0.7 x the best peer (issue 5's tcp target) is below the bound.
Installs iperf3 through apt-get when it is missing (Debian; run as root).
"""
import argparse
import collections
import json
import re
import shutil
import statistics
import subprocess
import sys
import time

from benchfiles import human, parse

CONFIGS = (("1 stream, system cc", []), ("1 stream", ["-C", "reno"]),
           ("1 stream, 1 MiB writes", ["-C", "reno", "-l", "1M"]), ("4 streams", ["-C", "reno", "-P", "4"]),
           ("1 stream each way", ["-C", "reno", "--bidir"]), ("2 streams each way", ["-C", "reno", "--bidir", "-P", "2"]))


def ensure_iperf3():
    if shutil.which("iperf3"):
        return
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "iperf3"], check=True, env=env, stdout=subprocess.DEVNULL)


def client(port, seconds, extra):
    """Bytes per second received in total over all of the run's streams, both ways."""
    for attempt in range(3):
        # The server takes one test at a time and can still be closing the last one ("the server is busy").
        out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J", *extra],
                             capture_output=True, text=True).stdout
        result = json.loads(out) if out.strip() else {"error": "no output"}
        if "error" not in result:
            break
        time.sleep(1)
    else:
        raise SystemExit(f"iperf3 {' '.join(extra)}: {result['error']}")
    end = result["end"]
    total = end["sum_received"]["bits_per_second"]
    if "sum_received_bidir_reverse" in end:
        total += end["sum_received_bidir_reverse"]["bits_per_second"]
    return total / 8


def probe(port, seconds, repeats):
    server = subprocess.Popen(["iperf3", "-s", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        results = {}
        for name, extra in CONFIGS:
            runs = [client(port, seconds, extra) for _ in range(repeats)]
            results[name] = runs
            print(f"{name:24s} median {statistics.median(runs) / 1e9:6.2f} GB/s  runs " +
                  " ".join(f"{r / 1e9:.2f}" for r in runs), flush=True)
        return results
    finally:
        server.terminate()
        server.wait()


def bounds(best, files):
    """Per (ranks) the medians over the files of Chorus's and the best peer's times, beside the bound."""
    rows = collections.defaultdict(lambda: collections.defaultdict(list))  # ranks -> size -> [(chorus, best)]
    for path in files:
        first = open(path).readline()
        m = re.search(r"-n (\d+) -t (\S+) -c (\S+)", first)
        if not m or m.group(2) != "tcp" or m.group(3) != "allreduce":
            print(f"skipped {path}: not a tcp all_reduce row", file=sys.stderr)
            continue
        for s, c, b, _, _ in parse(path)[1]:
            rows[int(m.group(1))][s].append((c, b))
    for n in sorted(rows):
        print()
        print(f"tcp all_reduce, {n} ranks ({len(next(iter(rows[n].values())))} runs; times are medians, us):")
        print()
        print("| size | loopback bound | chorus | chorus's share of the bound | best peer | 0.7 x best peer | "
              "0.7 x best peer against the bound |")
        print("|---|---|---|---|---|---|---|")
        for s in sorted(rows[n]):
            if s < 1 << 20:
                continue
            c = statistics.median(x[0] for x in rows[n][s])
            b = statistics.median(x[1] for x in rows[n][s])
            bound = 2 * (n - 1) * s / best * 1e6
            verdict = "below: beyond sockets here" if 0.7 * b < bound else "above"
            print(f"| {human(s)} | {bound:.0f} | {c:.0f} | {bound / c:.0%} | {b:.0f} | {0.7 * b:.0f} | {verdict} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--port", type=int, default=5299)
    ap.add_argument("--bytes-per-second", type=float, help="skip the probe and use this total")
    ap.add_argument("compare", nargs="*")
    a = ap.parse_args()
    if a.bytes_per_second:
        if a.bytes_per_second <= 0 or not a.compare:
            ap.error("--bytes-per-second needs a positive figure and COMPARE_FILEs")
        best = a.bytes_per_second
        print(f"loopback total given: {best / 1e9:.2f} GB/s")
    else:
        ensure_iperf3()
        print(time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime()), "loopback over iperf3,",
              f"{a.repeats} runs of {a.seconds} s each")
        results = probe(a.port, a.seconds, a.repeats)
        name, runs = max(results.items(), key=lambda kv: statistics.median(kv[1]))
        best = statistics.median(runs)
        print(f"best total: {best / 1e9:.2f} GB/s ({name})")
    if a.compare:
        bounds(best, a.compare)


if __name__ == "__main__":
    main()
