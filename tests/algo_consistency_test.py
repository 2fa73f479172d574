#!/usr/bin/env python3
"""Tests of scripts/algo-consistency.py: the best fixed choice over several sweeps, and the held-out check; and of
scripts/algo-summary.py --stolen, which splits the automatic choice's misses by the CPU time stolen per row.

The references are brute forces over the runs: for the minimax choice, every algorithm's worst ratio to the
fastest forced time of each run; for the geometric-mean choice (scripts/fit-measured.py's rule), the product
of each algorithm's times.
"""
import itertools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import unittest
from importlib import import_module

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
consistency = import_module("algo-consistency")
summary = import_module("algo-summary")
fit = import_module("fit-measured")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "algo-consistency.py")
SUMMARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "algo-summary.py")


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


class StolenTime(unittest.TestCase):
    """algo-summary.py --stolen: the stolen share per row, from chorus-perf's notes or from its --json."""
    HEADER = "# Algorithms of broadcast: binomial, chain\n"
    # size: (binomial, chain, auto's algorithm): auto is 1.5 times the fastest at 8 B and 512 B, right at 64 B.
    ROWS = {8: (1.5, 1.0, "binomial"), 64: (1.0, 2.0, "binomial"), 512: (3.0, 2.0, "binomial")}

    def write_table(self, path, notes):
        with open(path, "w") as f:
            f.write(self.HEADER)
            for size, (b, c, auto) in self.ROWS.items():
                f.write(f"{size} {size // 4} float none 0 {b} {c} {b} {auto} {b / min(b, c):.2f} x 0\n")
                if size in notes:
                    f.write(f"#   ^ {notes[size]}% of this host's CPU time was stolen by its hypervisor while this "
                            "row ran\n")

    def test_notes_mark_rows_above_five_percent_and_json_tells_quiet_rows_from_short_ones(self):
        with tempfile.TemporaryDirectory() as tmp:
            table = os.path.join(tmp, "algos-shm-broadcast-3ranks.txt")
            # A note says more than 5%, even where its rounded figure is 5.
            self.write_table(table, {8: 37, 512: 5})
            self.assertEqual(summary.stolen_rows(table), {8: 37.0, 512: 5.5})
            out = subprocess.run([sys.executable, SUMMARY, "--stolen", table], capture_output=True, text=True,
                                 check=True).stdout
            self.assertIn("rows timed with more than 5% stolen: 2; auto beyond 10%: 2, beyond 25%: 2", out)
            self.assertIn("rows timed with 5% or less stolen: 0;", out)
            self.assertIn("rows too short to judge, or without a figure (tables without --json: not noted): 1; "
                          "auto beyond 10%: 0", out)
            # With the runs' --json beside the table, its figures win: 8 B quiet, 64 B too short, 512 B stolen.
            for name, results in ((".small.json", [{"size": 8, "stolen_share": 0.02},
                                                   {"size": 64, "stolen_share": None}]),
                                  (".large.json", [{"size": 512, "stolen_share": 0.30}])):
                with open(table[:-4] + name, "w") as f:
                    json.dump({"results": results}, f)
            self.assertEqual(summary.stolen_rows(table), {8: 2.0, 64: None, 512: 30.0})
            out = subprocess.run([sys.executable, SUMMARY, "--stolen", table], capture_output=True, text=True,
                                 check=True).stdout
            self.assertIn("rows timed with more than 5% stolen: 1; auto beyond 10%: 1, beyond 25%: 1", out)
            self.assertIn("rows timed with 5% or less stolen: 1; auto beyond 10%: 1, beyond 25%: 1", out)
            self.assertIn("not noted): 1; auto beyond 10%: 0, beyond 25%: 0", out)


class FitMeasured(unittest.TestCase):
    """fit-measured.py: the geometric mean of the runs per size, leaving out rows timed while the hypervisor
    stole more than 5% wherever another run timed that size quiet."""
    FIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "fit-measured.py")

    def test_stolen_rows_give_way_to_quiet_ones_of_other_runs(self):
        header = "# Algorithms of broadcast: binomial, chain\n"
        # run: size -> (binomial us, chain us, stolen % noted or None)
        runs = [{8: (1.0, 2.0, None), 64: (2.0, 2.0, 30), 512: (4.0, 1.0, None)},
                {8: (4.0, 8.0, 37), 64: (8.0, 8.0, 40), 512: (9.0, 4.0, None)}]
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for r, rows in enumerate(runs):
                path = os.path.join(tmp, f"run{r}", "algos-shm-broadcast-3ranks.txt")
                os.mkdir(os.path.dirname(path))
                with open(path, "w") as f:
                    f.write(header)
                    for size, (b, c, stolen) in rows.items():
                        f.write(f"{size} {size // 4} float none 0 {b} {c} {b} binomial {b / min(b, c):.2f} x 0\n")
                        if stolen:
                            f.write(f"#   ^ {stolen}% of this host's CPU time was stolen by its hypervisor\n")
                paths.append(path)
            tuning, source = os.path.join(tmp, "tuning.json"), os.path.join(tmp, "tuning.cc")
            with open(tuning, "w") as f:
                json.dump({"transports": {"shm": [{"world_size": 3}]}}, f)
            with open(source, "w") as f:
                f.write('const char* k = R"json(\n{}\n)json";\n')
            subprocess.run([sys.executable, self.FIT, "--json", tuning, "--source", source] + paths, check=True,
                           capture_output=True)
            algos = json.load(open(tuning))["transports"]["shm"][0]["algorithms"]
            binomial = dict((int(b), t * 1e6) for b, t in algos["broadcast/binomial"]["measured"])
            chain = dict((int(b), t * 1e6) for b, t in algos["broadcast/chain"]["measured"])
            # 8 B: run 1 was stolen, run 0 quiet: run 0 alone.
            self.assertAlmostEqual(binomial[8], 1.0)
            self.assertAlmostEqual(chain[8], 2.0)
            # 64 B: stolen in both runs: both, as no quiet one exists.
            self.assertAlmostEqual(binomial[64], 4.0)
            # 512 B: quiet in both: the geometric mean of both.
            self.assertAlmostEqual(binomial[512], 6.0)
            self.assertAlmostEqual(chain[512], 2.0)
            self.assertIn('R"json(', open(source).read())

    def test_tables_go_to_the_entry_of_their_kind_of_host(self):
        header = "# Algorithms of broadcast: binomial, chain\n"
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "algos-shm-broadcast-3ranks.txt")
            with open(path, "w") as f:
                f.write(header + "8 2 float none 0 1.0 2.0 1.0 binomial 1.00 x 0\n")
            tuning, source = os.path.join(tmp, "tuning.json"), os.path.join(tmp, "tuning.cc")
            with open(tuning, "w") as f:
                json.dump({"transports": {"shm": [{"world_size": 3, "copy_gbps": 8.0},
                                                  {"world_size": 3, "copy_gbps": 37.0}]}}, f)
            with open(source, "w") as f:
                f.write('const char* k = R"json(\n{}\n)json";\n')
            subprocess.run([sys.executable, self.FIT, "--json", tuning, "--source", source, "--copy-gbps", "45",
                            path], check=True, capture_output=True)
            entries = json.load(open(tuning))["transports"]["shm"]
            self.assertNotIn("algorithms", entries[0])  # 8 GB/s: another kind, untouched
            measured = entries[1]["algorithms"]["broadcast/binomial"]["measured"]
            self.assertAlmostEqual(measured[0][1] * 1e6, 1.0)


class SmoothRatios(unittest.TestCase):
    """fit-measured.py's smooth_ratios: each time becomes its size's fastest time times the weighted geometric
    mean of the algorithm's ratios to the fastest at the size and at half and twice it. Reference: the formula
    written out by hand for each point."""

    def test_a_lone_flip_goes_and_an_agreed_crossover_stays(self):
        # b is 5% ahead at 16 B alone and 20% behind on both sides; from 32 B on it is 20% ahead.
        per_algo = {"a": {8: 1.0, 16: 1.0, 32: 1.0, 64: 1.0, 128: 1.0, 256: 1.0},
                    "b": {8: 1.2, 16: 0.95, 32: 1.2, 64: 0.8, 128: 0.8, 256: 0.8}}
        out = fit.smooth_ratios(per_algo, 0.5)
        fastest = {s: min(per_algo["a"][s], per_algo["b"][s]) for s in per_algo["a"]}
        ratio = {a: {s: math.log(t / fastest[s]) for s, t in by.items()} for a, by in per_algo.items()}
        for a in per_algo:
            for s in per_algo[a]:
                neighbours = [ratio[a][o] for o in (s // 2, s * 2) if o in ratio[a]]
                want = fastest[s] * math.exp((ratio[a][s] + 0.5 * sum(neighbours)) / (1 + 0.5 * len(neighbours)))
                self.assertAlmostEqual(out[a][s], want, msg=f"{a} at {s}")
        choice = {s: min(out, key=lambda a: out[a][s]) for s in per_algo["a"]}
        self.assertEqual(choice[16], "a")  # the lone flip goes
        self.assertEqual([choice[s] for s in (8, 64, 128, 256)], ["a", "b", "b", "b"])
        # A size's fastest algorithm that is fastest at both neighbours too keeps its measured time.
        self.assertAlmostEqual(out["b"][128], 0.8)
        self.assertAlmostEqual(out["b"][256], 0.8)

    def test_weight_zero_and_missing_neighbours_leave_the_table(self):
        per_algo = {"a": {8: 1.0, 64: 3.0}, "b": {8: 2.0, 64: 1.0}}
        self.assertEqual(fit.smooth_ratios(per_algo, 0.0), per_algo)
        out = fit.smooth_ratios(per_algo, 0.5)  # 8 and 64 are not neighbours: nothing to average with
        for a in per_algo:
            for s in per_algo[a]:
                self.assertAlmostEqual(out[a][s], per_algo[a][s])


class Merge(unittest.TestCase):
    """algo-merge.py: per size, the row of the run timed with less stolen, in the table and its --json files."""
    MERGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "algo-merge.py")

    def write(self, path, rows):
        """rows: size -> (binomial us, stolen share or None); 8 and 64 B in the small run, 65536 in the large."""
        with open(path, "w") as f:
            for part in ("small", "large"):
                f.write("# Algorithms of broadcast: binomial, chain\n")
                for size, (t, share) in rows.items():
                    if (size < 65536) == (part == "small"):
                        f.write(f"{size} {size // 4} float none 0 {t} {t} {t} binomial 1.00 binomial 0\n")
                        if share is not None and share >= 0.05:
                            f.write(f"#   ^ {100 * share:.0f}% of this host's CPU time was stolen by its hypervisor "
                                    "while this row ran\n")
                f.write(f"# auto/best: worst 1.00 ({part})\n")
                with open(path[:-4] + f".{part}.json", "w") as j:
                    json.dump({"results": [{"size": size, "time": t, "stolen_share": share}
                                           for size, (t, share) in rows.items() if (size < 65536) == (part == "small")]},
                              j)

    def test_each_size_keeps_the_quieter_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            first = os.path.join(tmp, "algos-shm-broadcast-3ranks.txt")
            os.mkdir(os.path.join(tmp, "later"))
            later = os.path.join(tmp, "later", "algos-shm-broadcast-3ranks.txt")
            # 8 B: quieter later; 64 B: quieter first; 512 B: the first not judged (kept); 64 KiB: quieter later.
            self.write(first, {8: (1.0, 0.30), 64: (2.0, 0.02), 512: (3.0, None), 65536: (4.0, 0.50)})
            self.write(later, {8: (5.0, 0.02), 64: (6.0, 0.30), 512: (7.0, 0.0), 65536: (8.0, 0.10)})
            out = subprocess.run([sys.executable, self.MERGE, first, later], capture_output=True, text=True,
                                 check=True).stdout
            self.assertIn("2 rows replaced", out)
            _, rows = summary.parse(first)
            self.assertEqual({size: times["binomial"] for size, times, _, _ in rows},
                             {8: 5.0, 64: 2.0, 512: 3.0, 65536: 8.0})
            text = open(first).read()
            # The replaced rows bring their notes (and drop the first run's): 64 KiB is now noted at 10%.
            self.assertNotIn("30% of this host", text.split("64 16 float")[0])
            self.assertIn("65536 16384 float none 0 8.0", text)
            self.assertIn("#   ^ 10% of this host's CPU time", text)
            self.assertNotIn("#   ^ 50%", text)
            self.assertEqual(text.count("# auto/best"), 2)
            self.assertTrue(text.endswith("rows replaced by a later run's, timed with less CPU time stolen: 8 65536\n"))
            small = json.load(open(first[:-4] + ".small.json"))
            self.assertEqual([r["time"] for r in small["results"]], [5.0, 2.0, 3.0])
            self.assertEqual(small["retaken_later"], [8])
            large = json.load(open(first[:-4] + ".large.json"))
            self.assertEqual(large["results"][0]["stolen_share"], 0.10)
            self.assertEqual(large["retaken_later"], [65536])
            self.assertEqual(summary.stolen_rows(first), {8: 2.0, 64: 2.0, 512: None, 65536: 10.0})

    def test_without_the_json_files_it_refuses(self):
        with tempfile.TemporaryDirectory() as tmp:
            first = os.path.join(tmp, "algos-shm-broadcast-3ranks.txt")
            open(first, "w").write("# Algorithms of broadcast: binomial, chain\n")
            r = subprocess.run([sys.executable, self.MERGE, first, first], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("not found", r.stderr)


if __name__ == "__main__":
    unittest.main()
