#!/usr/bin/env python3
"""Puts back-to-back measurements into the built-in tuning.

Reads the chorus-perf --algos tables that scripts/algo-bench.sh writes (docs/data/algos-<transport>-<coll>-
<N>ranks.txt) and stores each algorithm's median time per size as the "measured" table of its calibration in
the tuning entry for that transport and world size (docs/data/builtin-tuning.json), then regenerates
src/tune/builtin_tuning.cc. Each table is smoothed across neighbouring sizes first (smooth_ratios below:
every algorithm's ratio to the fastest at a size averaged with its ratios at half and twice the size, at
--neighbour-weight, 0.5, and scaled by the size's fastest time). Within a measured range the cost model then
believes the measurement (see Calibration in src/algo/registry.h); chorus-tune's probes still shape the
estimates elsewhere and at other world sizes.

  scripts/fit-measured.py [--json docs/data/builtin-tuning.json] [--registered [--in-place]] [FILES...]

Tables timed with registered buffers (scripts/algo-bench.sh REGISTERED=1; a generation marked "registered")
go into each algorithm's "registered" table instead of "measured", and those timed in place too (IN_PLACE=1;
marked "in_place") into "registered_in_place": the cost model uses them for calls made with
CallOptions::registered, out of place and in place.

Without FILES: the tables of GENERATIONS below. A generation is a set of runs of one state of the transports
on one kind of host; for each (transport, collective, world size, kind of host) the newest generation that
measured it wins, and the tables of that generation are combined by the geometric mean of their runs; a row timed while the hypervisor stole more
than 5% of the host's CPU time is left out of it where another run of the generation timed that size quiet.
Older generations timed code that no longer exists (the shm rings before prefaulting paid page faults on their
first calls, for example).

Kinds of host: the tables of a generation go into the entries whose copy_gbps (the measuring host's copy rate,
base::copy_rate_gbps; chorus-tune records it) is within a factor of 2 of the generation's; FILES given on the command line go into
the kind --copy-gbps names (default: the earlier host's).
"""
import argparse
import glob
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module

summary = import_module("algo-summary")


# The copy rate recorded for the entries of the host the project was measured on until the eighteenth session.
# That host was not measured with base::copy_rate_gbps (8 MiB); its memory probe (../shared/peers/membw.c, in
# docs/data/bench/membw.txt's history) read 12-26 GB/s at 1 MiB and 4.2-12.8 GB/s at 16 MiB, against 41-43 and
# 24-31 on the eighteenth and nineteenth sessions' host.
EARLIER_HOST_COPY_GBPS = 8.0

# Oldest first. Add a generation when a transport change makes the older tables misleading. A plain list of
# directories is a generation of the earlier host; {"dirs": [...], "copy_gbps": X} one of another kind; with
# "registered": True, its tables were timed with registered buffers (chorus-perf -R 1) and fill the
# "registered" tables, which the newest registered generation of a (transport, collective, world size, kind)
# decides alone, as the newest plain one decides "measured"; with "in_place": True as well, the
# "registered_in_place" tables (chorus-perf --algos-in-place), likewise.
GENERATIONS = [
    # The first sweep and its partial rerun (2026-11-30, before the shm small-message path and prefaulting),
    # and a third tcp run (13:43-13:57 UTC): the tcp transport changed only by per-frame savings that shift every
    # algorithm alike, so its three runs are one generation.
    ["docs/data", "docs/data/algos-rerun", "docs/data/algos-tcp-s5"],
    # After the shm small-message path (c47b46b) and prefaulted rings (758e458): two full shm runs.
    ["docs/data/algos-s4", "docs/data/algos-s5"],
    # After the eighth and ninth sessions' shm changes (ring head, frame header, fewer stores per call, idle
    # senders streaming from 2 MiB, all_to_all posting its sends first): two full shm runs. The old tables
    # chose badly where the code had moved, e.g. 2-rank reduce from 2 MiB (reduce_scatter_gather, 1.25-1.74
    # times binomial's time) and all_to_all at 4 and 8 ranks (1.4-1.7 at small sizes).
    ["docs/data/algos-s9", "docs/data/algos-s9-check"],
    # After a reduce leaf streams to its parent at any size (SenderWork::idle_to_reducer): 2-rank reduce and
    # all_reduce (whose reduce_broadcast runs the binomial reduce) measured twice.
    ["docs/data/algos-s9r", "docs/data/algos-s9r2"],
    # tcp after all_to_all posting its sends first, the coarse-clock peer check, fewer stores per call and one
    # locked instruction per call (tenth session): two full tcp runs. With the old tables all_to_all at 3 ranks
    # chose bruck at small sizes where pairwise had become up to 1.3 times faster.
    # The twelfth session added this generation's check run (algos-s10-tcp-check, the same code timed with the
    # refitted tables; forced times do not depend on the tables) and its own sweep (algos-s12-tcp; the tcp
    # transport had not changed). Holding each run out in turn and choosing from the others
    # (scripts/algo-consistency.py --cross-validate) showed that more runs choose better: 5.9% of held-out sizes
    # beyond 10% when choosing from one run, 4.2% from two, 3.9% from three; and its check of the tables fitted
    # from those four (algos-s12-tcp-check) joined last: 3.5% from four (docs/algorithms.md, "How close can a
    # fixed table come?").
    # The sixteenth session's sweep with the tables fitted from those five (algos-s16-tcp, 0-24% stolen per
    # table, the stolen rows timed again) joined in the seventeenth: held out in turn over the six runs, 3.4%.
    ["docs/data/algos-s10-tcp", "docs/data/algos-s10-tcp2", "docs/data/algos-s10-tcp-check", "docs/data/algos-s12-tcp",
     "docs/data/algos-s12-tcp-check", "docs/data/algos-s16-tcp"],
    # shm after one locked instruction per call (tenth session), on the eleventh session's machine: two full shm
    # runs. With the older tables 4-rank broadcast chose binomial from 8 to 256 B where the chain had become
    # 1.3-1.5 times faster (15/24 sizes within 10%).
    # The twelfth session added the eleventh's check run and its own sweep of the same code (algos-s12-shm):
    # held out in turn, 6.1% of sizes beyond 10% when choosing from one run, 5.2% from two, 4.7% from three;
    # then the check of the tables fitted from those four (algos-s12-shm-check): 4.6% from four.
    # The sixteenth session's quiet sweep with the tables fitted from those five (algos-s16-shm, 0-13% stolen per
    # table; the shm transport had not changed) joined in the seventeenth: held out in turn over the six runs,
    # 5.2% of sizes beyond 10% (docs/algorithms.md, "A quiet sweep with the built-in tables").
    ["docs/data/algos-s11-shm1", "docs/data/algos-s11-shm", "docs/data/algos-s11-shm-check", "docs/data/algos-s12-shm",
     "docs/data/algos-s12-shm-check", "docs/data/algos-s16-shm"],
    # Another kind of host (the eighteenth and nineteenth sessions'): 8 MiB copied at 34-53 GB/s, first touch
    # of a 4 KiB page about 7 us. With the earlier host's tables it chose beyond 10% of the fastest algorithm
    # at 112 of 564 shm sizes and 73 tcp sizes (docs/algorithms.md, "Tables per kind of host"). Two runs of
    # each transport, of the code of commit 3ba3310 (the transports as in the newest generations above, plus
    # the eighteenth session's shm small-frame changes): the first timed the earlier host's tables, the check
    # run the tables fitted from the first alone; and a third shm run (algos-s19-shm-check2), which timed the
    # tables fitted from the first two: auto beyond 10% at 33 of 564 sizes, beyond 25% at 7.
    {"dirs": ["docs/data/algos-s19-shm", "docs/data/algos-s19-shm-check", "docs/data/algos-s19-shm-check2",
              "docs/data/algos-s19-tcp", "docs/data/algos-s19-tcp-check"], "copy_gbps": 40.0},
    # shm on that host once cross-memory attach is used only where a probe at creation finds it pays
    # (twentieth session): an attach read costs 7.0-8.4 copies there, so every large payload streams through
    # the rings, and 2-rank all_reduce from 128 KiB to 1 MiB takes a third of its time by attach. The tables of
    # the run before chose reduce_broadcast for 2-rank all_reduce from 2 MiB (1.44 times rabenseifner's time
    # at 16 MiB). Two full shm runs of the new code, then the check run that timed the tables fitted from them
    # (algos-s20-shm-check: auto beyond 10% at 39 of 564 sizes, beyond 25% at 11; held out in turn over the
    # three, 6.7-7.0% and 1.9-2.0%, against 8.3-8.5% and 2.7% choosing from one run). The twenty-first
    # session's run (algos-s21-shm) timed the tables fitted from those three: auto beyond 10% at 76 of 564 sizes,
    # beyond 25% at 26, of which a fixed choice consistent over the four runs would have avoided 10; held out in
    # turn over the four, 8.9-9.4% and 2.8-3.1%. It joins them. Its check run (algos-s21-shm-check, timing
    # the four-run tables): beyond 10% at 83 sizes, beyond 25% at 29, 14 of them avoidable by a consistent
    # fixed choice; most in 3- to 8-rank all_gather, where the two runs of this session's machine found bruck
    # faster than hierarchical below 32 KiB and the twentieth session's three found the opposite. Held out in
    # turn over all five, 9.9-10.1% and 3.0-3.3%. It joins them too.
    {"dirs": ["docs/data/algos-s20-shm", "docs/data/algos-s20-shm2", "docs/data/algos-s20-shm-check",
              "docs/data/algos-s21-shm", "docs/data/algos-s21-shm-check"],
     "copy_gbps": 40.0},
    # tcp after connections between two addresses of one host went to reno (commit c6b6f27; bbr's pacing had
    # doubled 2-rank all_reduce times from 128 KiB to 2 MiB): every transfer of that range got faster, and
    # the crossovers moved. With the tables of the generation before, the first sweep of the new code
    # (algos-s23-tcp) found auto beyond 10% at 80 of 564 sizes and beyond 25% at 27, most at 3, 4 and 8 ranks
    # (4-rank all_reduce at 1-4 MiB chose direct, 1.13-1.22 times the fastest). Two runs of commit b794e11 on
    # the twenty-second and twenty-third sessions' host (copy probe 12.5 GB/s: the earlier host's kind). The
    # check run that timed the tables fitted from those two (algos-s23-tcp-check): beyond 10% at 51 sizes (21 of
    # them avoidable by a table consistent over the three runs), beyond 25% at 15; held out in turn over the
    # three, 9.1-9.2% and 2.6-2.8%. It joins them.
    ["docs/data/algos-s23-tcp", "docs/data/algos-s23-tcp2", "docs/data/algos-s23-tcp-check"],
    # shm on the earlier host's kind, timed with cold buffers and with hot ones (twenty-fourth session). The shm
    # tables above were fitted to sweeps whose every call works on the next slot of large buffers
    # (chorus-perf --rotate 1: cold in the caches), and the transport has changed since (the eighteenth and
    # twentieth sessions). With the same buffers every call (--rotate 0: hot, as compare.sh's peers and data
    # just computed arrive), 2-rank all_reduce from 64 to 256 KiB ran rabenseifner or direct at 1.9-2.1 times
    # recursive doubling's time. Two cold sweeps (algos-s24-shm, -shm2) and two hot ones (ROTATE=0:
    # algos-s24-shm-hot, -hot2) of commit 45371c5 on the twenty-second to twenty-fourth sessions' host (copy
    # probe 12.9 GB/s): the geometric mean over the four chooses for both temperatures. The checks that timed
    # these tables (algos-s24-shm-check, cold; algos-s24-shm-hot-check, hot): auto beyond 10% at 41 and 50 of
    # 564 sizes (53, 48 and 66, 67 with the old tables), beyond 25% at 11 and 14. They did not join.
    ["docs/data/algos-s24-shm", "docs/data/algos-s24-shm2", "docs/data/algos-s24-shm-hot", "docs/data/algos-s24-shm-hot2"],
    # tcp on the earlier host's kind, cold and hot (twenty-fifth session). The tcp generation above timed cold
    # buffers only. A hot sweep of 4-rank all_reduce (--rotate 0, as compare.sh's peers time) found the tables'
    # ring at 512 KiB 1.31-1.51 times rabenseifner's time, and 4-rank broadcast within 10% at 15 of 24 sizes.
    # The three cold runs of that generation (the tcp transport has changed since only by CHORUS_TCP_SPIN, whose
    # default is the old behaviour) and two hot sweeps of commit d55f8ab (ROTATE=0: algos-s25-tcp-hot, -hot2).
    # The checks that timed these tables (algos-s25-tcp-check, cold; algos-s25-tcp-hot-check, hot): auto beyond
    # 10% at 33 and 51 of 564 sizes (the runs before, each with the tables of its time: 80, 83, 51 cold and 41,
    # 44 hot), beyond 25% at 6 and 11 (27, 34, 15 and 16, 15). Held out in turn over all seven runs: 6.9% and 1.5% (the generation
    # before, over its three: 9.1-9.2% and 2.6-2.8%). They did not join.
    ["docs/data/algos-s23-tcp", "docs/data/algos-s23-tcp2", "docs/data/algos-s23-tcp-check",
     "docs/data/algos-s25-tcp-hot", "docs/data/algos-s25-tcp-hot2"],
    # reduce, tcp and shm, after the linear reduce joined (twenty-seventh session, commit f018063): every other
    # rank sends its input straight to the root, one hop. The older tables have no column for it. Timed with
    # the slowest rank's time (algo-bench.sh AVERAGE=3, as compare.sh times): the first sweeps, with the mean
    # over ranks (algos-s27-reduce-{tcp,shm}*, kept as data), credited linear for leaves that hand their input
    # to the sockets and leave, and their tables chose it at 4-rank tcp 128 KiB-2 MiB where, timed by the
    # slowest rank, it takes 1.3-1.7 times binomial's time. Two cold and two hot sweeps of reduce alone per
    # transport, on the twenty-second to twenty-seventh sessions' host.
    ["docs/data/algos-s27-reduce-max-tcp", "docs/data/algos-s27-reduce-max-tcp-hot",
     "docs/data/algos-s27-reduce-max-tcp-2", "docs/data/algos-s27-reduce-max-tcp-hot2",
     "docs/data/algos-s27-reduce-max-shm", "docs/data/algos-s27-reduce-max-shm-hot",
     "docs/data/algos-s27-reduce-max-shm-2", "docs/data/algos-s27-reduce-max-shm-hot2"],
    # broadcast, tcp and shm, timed by the slowest rank as reduce above (twenty-eighth session, commit c2e5bc6).
    # A pipelined chain's root hands its chunks to the first link and leaves while the last rank still
    # receives; timed by the mean over ranks, 4-rank tcp chain / binomial at 64 KiB-4 MiB read 0.67-0.95, by the
    # slowest rank 0.83-1.13. Two cold and two hot sweeps of broadcast alone per transport (AVERAGE=3,
    # algos-s28-bcast-max-*), on the twenty-second to twenty-eighth sessions' host.
    ["docs/data/algos-s28-bcast-max-tcp", "docs/data/algos-s28-bcast-max-tcp-hot",
     "docs/data/algos-s28-bcast-max-tcp-2", "docs/data/algos-s28-bcast-max-tcp-hot2",
     "docs/data/algos-s28-bcast-max-shm", "docs/data/algos-s28-bcast-max-shm-hot",
     "docs/data/algos-s28-bcast-max-shm-2", "docs/data/algos-s28-bcast-max-shm-hot2"],
    # shm with registered buffers (thirtieth session, commit da1a2ab + the registered-table scripts), on the
    # fourth host (copy probe 26.0 GB/s: the second kind). chorus-perf -R 1 lets the transport read every
    # payload from 64 KiB in place; the heap tables chose hierarchical for 2-rank all_reduce at 512 KiB, 1.89
    # times rabenseifner's time, and recursive_doubling at 64 MiB, 1.3-1.6 times ring's. The six collectives
    # at 2 and 4 ranks from 64 KiB (AVERAGE=3 for broadcast and reduce, as their heap tables); 3 ranks joined
    # each directory at 17:29-17:36 UTC (commit 09ab3a4 + tables: forced times do not depend on the tables).
    # Four sweeps: two cold (algos-reg-h4, -h4-2) and two hot (ROTATE=0: -h4-hot, -h4-hot2), 16:39-16:47 UTC.
    {"dirs": ["docs/data/algos-reg-h4", "docs/data/algos-reg-h4-2", "docs/data/algos-reg-h4-hot",
              "docs/data/algos-reg-h4-hot2"], "copy_gbps": 40.0, "registered": True},
    # The same in place (IN_PLACE=1, chorus-perf --algos-in-place), for the collectives whose every rank passes
    # both buffers: all_reduce, all_gather, reduce_scatter, all_to_all. In place, 2-rank all_reduce with
    # registered buffers ran recursive doubling 1.13-1.25 times the ring-like algorithms' time from 1 to 4 MiB,
    # where out of place it is 2 times faster, and the Reducer's buckets are all-reduced in place. Two cold and two
    # hot sweeps of the commit above, 17:05-17:11 UTC; 3 ranks joined them at 17:33-17:36 UTC.
    {"dirs": ["docs/data/algos-reg-h4-inplace", "docs/data/algos-reg-h4-inplace2", "docs/data/algos-reg-h4-inplace-hot",
              "docs/data/algos-reg-h4-inplace-hot2"], "copy_gbps": 40.0, "registered": True, "in_place": True},
    # The second kind again, on the fortieth to forty-second sessions' host (AMD EPYC of CPU family 25; its
    # copy probe reads 18-38 GB/s with the 48-copy probe, the second kind every time: docs/algorithms.md, "A
    # copy-rate probe that holds still"). The tables above for this kind were timed in the nineteenth to
    # twenty-first sessions on another host, before the linear reduce, the tcp transport's reno and the shm
    # transport's later changes (frame prefetch, streaming own blocks, ring rewinds, attach chosen while
    # running); the sweeps of this code found the 4-rank tcp reduce's binomial, their choice from 1 to 16 MiB,
    # at 1.3-1.5 times reduce_scatter_gather (which those tables had at 1.4-1.7 times binomial), and the 2-rank
    # tcp all_reduce's tree at 1 MiB 1.24 times rabenseifner. Commit 8bdfb8e on this host: two cold sweeps
    # (algos-s42-shm, -shm2; algos-s42-tcp, -tcp2) and two hot ones (ROTATE=0: -hot, -hot2) at 2, 3 and 4
    # ranks, one of each at 8; all_reduce, all_gather, reduce_scatter and all_to_all timed by the mean over
    # ranks, broadcast and reduce by the slowest rank (AVERAGE=3), as the earlier kind's newest tables.
    # The forty-sixth session added the four check sweeps of the same code at 2 and 4 ranks per transport, each
    # a cold and a hot one: the forty-second session's, timed with the tables fitted to the four above, and the
    # forty-fourth's, timed with those tables smoothed (forced times do not depend on the tables). Held out in
    # turn over the eight (scripts/algo-consistency.py --cross-validate --smooth 0.5), a choice from seven runs
    # missed 10% at 10.0% (shm) and 7.3% (tcp) of the held-out points, against 10.0% and 9.2% from three over
    # the first four. 4-rank shm broadcast of 256 B-16 KiB is the clearest change (chain -> binomial): three of
    # the four runs above put the chain ahead of binomial by a few percent and one behind it by 1.4-1.5 times,
    # and two of the four checks sided with that one (docs/algorithms.md, "Eight runs behind the second kind's
    # tables"; a fresh check of the refit: 115 -> 102 sizes beyond 10% over its four runs).
    {"dirs": ["docs/data/algos-s42-shm", "docs/data/algos-s42-shm-hot", "docs/data/algos-s42-shm2",
              "docs/data/algos-s42-shm-hot2", "docs/data/algos-s42-tcp", "docs/data/algos-s42-tcp-hot",
              "docs/data/algos-s42-tcp2", "docs/data/algos-s42-tcp-hot2",
              "docs/data/algos-s42-shm-check", "docs/data/algos-s42-shm-hot-check",
              "docs/data/algos-s44-shm-check", "docs/data/algos-s44-shm-hot-check",
              "docs/data/algos-s42-tcp-check", "docs/data/algos-s42-tcp-hot-check",
              "docs/data/algos-s44-tcp-check", "docs/data/algos-s44-tcp-hot-check"], "copy_gbps": 40.0},
]


def table_field(registered, in_place):
    """The calibration field a table of that kind of run fills."""
    if in_place and not registered:
        sys.exit("fit-measured.py: in-place tables are kept for registered buffers only")
    return "registered_in_place" if in_place else "registered" if registered else "measured"


def generation_dirs(g):
    """(directories, copy_gbps, the calibration field its tables fill) of a GENERATIONS item."""
    if isinstance(g, dict):
        return g["dirs"], float(g["copy_gbps"]), table_field(g.get("registered", False), g.get("in_place", False))
    return g, EARLIER_HOST_COPY_GBPS, "measured"


def same_kind(a, b):
    """Whether copy rates a and b are one kind of host: within a factor of 2 (as chorus-tune's update), or
    either unknown (0; as tune::host_distance)."""
    return a <= 0 or b <= 0 or abs(math.log(a / b)) < math.log(2)


def default_files():
    """[(path, copy_gbps, field), ...]: per (transport, coll, n, kind of host, calibration field), the newest
    generation's tables."""
    newest = {}  # (transport, coll, n, copy_gbps, field) -> (generation, [paths])
    for g, item in enumerate(GENERATIONS):
        dirs, copy, field = generation_dirs(item)
        for d in dirs:
            for path in sorted(glob.glob(os.path.join(d, "algos-*-*-*ranks.txt"))):
                m = re.search(r"algos-(\w+)-(\w+)-(\d+)ranks", os.path.basename(path))
                if not m:
                    continue
                key = (m.group(1), m.group(2), int(m.group(3)), copy, field)
                if key not in newest or newest[key][0] < g:
                    newest[key] = (g, [])
                newest[key][1].append(path)
    return [(p, key[3], key[4])
            for key, (_, paths) in sorted(newest.items(), key=lambda kv: (kv[1][0], kv[0])) for p in paths]


# The stolen share (%) above which a row is left out when another run timed that size quiet (chorus-perf's
# default --stolen-limit).
STOLEN_LIMIT = 5


def geometric_mean(samples):
    """The geometric mean of [(seconds, stolen), ...] over the quiet samples, or over all if none is quiet."""
    quiet = [t for t, was_stolen in samples if not was_stolen]
    ts = quiet or [t for t, _ in samples]
    return math.exp(sum(math.log(t) for t in ts) / len(ts))


# How much a size's two neighbours (half and twice it) count beside the size itself when the tables are
# smoothed (smooth_ratios); 0 leaves them as measured. Chosen by holding runs out (docs/algorithms.md, "Tables
# smoothed across neighbouring sizes").
NEIGHBOUR_WEIGHT = 0.5


def smooth_ratios(per_algo, weight=NEIGHBOUR_WEIGHT):
    """{algorithm: {size: seconds}} -> the same with each time's ratio to the fastest at its size replaced by
    the weighted geometric mean of that ratio at the size (weight 1) and at half and twice the size (`weight`
    each, where the algorithm was timed there), times that size's fastest time. So the estimates stay on each
    size's measured scale (an algorithm fastest at a size and at both neighbours keeps its time), a choice that
    one noisy size flips against both its neighbours flips back, and a crossover that the neighbours agree on
    stays where it was measured."""
    if weight <= 0:
        return per_algo
    best = {}
    for by_size in per_algo.values():
        for size, t in by_size.items():
            best[size] = min(best.get(size, t), t)
    log_ratio = {a: {size: math.log(t / best[size]) for size, t in by_size.items()} for a, by_size in per_algo.items()}
    out = {}
    for a, by_size in per_algo.items():
        out[a] = {}
        for size in by_size:
            total, weights = log_ratio[a][size], 1.0
            for other in (size // 2, size * 2):
                if other in log_ratio[a]:
                    total += weight * log_ratio[a][other]
                    weights += weight
            out[a][size] = best[size] * math.exp(total / weights)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="docs/data/builtin-tuning.json")
    ap.add_argument("--source", default="src/tune/builtin_tuning.cc")
    ap.add_argument("--copy-gbps", type=float, default=EARLIER_HOST_COPY_GBPS,
                    help="the kind of host FILES were measured on (its entries' copy_gbps)")
    ap.add_argument("--registered", action="store_true",
                    help="FILES were timed with registered buffers (algo-bench.sh REGISTERED=1): fill the "
                         "'registered' tables")
    ap.add_argument("--in-place", action="store_true",
                    help="with --registered: FILES were timed in place (IN_PLACE=1): fill the "
                         "'registered_in_place' tables")
    ap.add_argument("--neighbour-weight", type=float, default=NEIGHBOUR_WEIGHT,
                    help="smooth each time's ratio to the fastest with its neighbouring sizes' at this weight "
                         "(0: the tables as measured)")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    if args.files:
        field = table_field(args.registered, args.in_place)
        files = [(f, args.copy_gbps, field) for f in args.files]
    else:
        files = default_files()
    data = json.load(open(args.json))
    # (transport, coll, n) -> algorithm -> size -> [(seconds, stolen), ...]: several runs of one table are
    # combined by their geometric mean, which damps the run-to-run spread of oversubscribed timings. A row
    # timed while the hypervisor stole more than 5% of the host's CPU time (scripts/algo-summary.py's
    # stolen_rows: the runs' --json, or chorus-perf's notes) is left out wherever another run has that size
    # quiet: it measured the host more than the algorithm.
    tables = {}
    for path, copy, field in files:
        m = re.search(r"algos-(\w+)-(\w+)-(\d+)ranks", path)
        if not m:
            continue
        key = (m.group(1), m.group(2), int(m.group(3)), copy, field)
        algos, rows = summary.parse(path)
        stolen = summary.stolen_rows(path)
        per_algo = tables.setdefault(key, {})
        for a in algos:
            for size, times, _, _ in rows:
                if size > 0 and times.get(a, 0) > 0:
                    was_stolen = (stolen.get(size) or 0) > STOLEN_LIMIT
                    per_algo.setdefault(a, {}).setdefault(size, []).append((times[a] * 1e-6, was_stolen))
    updated = 0
    for (transport, coll, n, copy, field), per_algo in sorted(tables.items()):
        entries = [e for e in data["transports"].get(transport, [])
                   if e["world_size"] == n and same_kind(e.get("copy_gbps", 0), copy)]
        if not entries:
            print(f"no {transport} entry for {n} ranks and copy_gbps {copy} in {args.json}: {coll} skipped "
                  "(scripts/tune-builtin.sh on such a host adds it)", file=sys.stderr)
            continue
        calib = entries[0].setdefault("algorithms", {})
        combined = smooth_ratios({a: {size: geometric_mean(samples) for size, samples in by_size.items()}
                                  for a, by_size in per_algo.items()}, args.neighbour_weight)
        for a, by_size in combined.items():
            points = sorted(by_size.items())
            c = calib.setdefault(f"{coll}/{a}", {"latency": 1.0, "bandwidth": 1.0, "corrections": []})
            c[field] = [[float(b), t] for b, t in points]
            updated += 1
    with open(args.json, "w") as f:
        f.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    text = json.dumps(data, indent=1, sort_keys=True)
    src = open(args.source).read()
    start = src.index('R"json(') + len('R"json(')
    end = src.index(')json"')
    open(args.source, "w").write(src[:start] + "\n" + text + "\n" + src[end:])
    print(f"measured tables for {updated} (collective, algorithm, transport, world size) entries -> {args.json}, "
          f"{args.source}")


if __name__ == "__main__":
    main()
