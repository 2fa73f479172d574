#!/usr/bin/env python3
"""Merges a later run of a chorus-perf --algos table into the first: per size, the row timed with less CPU time
stolen by the hypervisor.

  scripts/algo-merge.py TABLE LATER_TABLE

TABLE and LATER_TABLE are tables as scripts/algo-bench.sh writes them (docs/data/algos-<t>-<coll>-<n>ranks.txt),
each with its chorus-perf --json files beside it (.small.json, .large.json), whose stolen_share per row decides.
A row of the later run replaces the first's where both shares are known and the later one is smaller. TABLE and
its --json files are rewritten in place; a comment at the end of TABLE lists the sizes replaced. The footers of
each chorus-perf run (auto/best, stolen share over the run) still describe the first run; the scripts that read
the tables (algo-summary.py, algo-consistency.py, fit-measured.py) read the rows.

scripts/algo-bench.sh runs a table again after the sweep, and merges it with this, where more than a quarter of
its rows were timed with 5% or more stolen: on a machine where steal comes in stretches of minutes, a row that
--retry-stolen could not time quiet may be quiet a quarter of an hour later.
"""
import json
import os
import sys

JSONS = (".small.json", ".large.json")


def items(path):
    """The table as a list of items: ("line", text) or ("row", size, [the row's line and the notes under it])."""
    out = []
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit():
            out.append(["row", int(f[0]), [line]])
        elif line.startswith("#   ^") and out and out[-1][0] == "row":
            out[-1][2].append(line)
        else:
            out.append(["line", line])
    return out


def json_rows(path):
    """size -> (json file suffix, index in its results, row) from the table's --json files."""
    base = path[:-len(".txt")]
    rows = {}
    for suffix in JSONS:
        if not os.path.exists(base + suffix):  # a registered sweep (REGISTERED=1) times only the large sizes
            continue
        for i, row in enumerate(json.load(open(base + suffix))["results"]):
            rows[row["size"]] = (suffix, i, row)
    return rows


def merge(first, later):
    """Rewrites `first` (and its --json files) with the rows of `later` that were timed with less stolen.
    Returns the sizes replaced."""
    first_rows, later_rows = json_rows(first), json_rows(later)
    later_lines = {it[1]: it[2] for it in items(later) if it[0] == "row"}
    replaced = []
    for size, (_, _, row) in first_rows.items():
        if size not in later_rows or size not in later_lines:
            continue
        a, b = row.get("stolen_share"), later_rows[size][2].get("stolen_share")
        if a is not None and b is not None and b < a:
            replaced.append(size)
    replaced.sort()
    if not replaced:
        return replaced
    base = first[:-len(".txt")]
    docs = {suffix: json.load(open(base + suffix)) for suffix in JSONS if os.path.exists(base + suffix)}
    for size in replaced:
        suffix, i, _ = first_rows[size]
        docs[suffix]["results"][i] = later_rows[size][2]
    for suffix, doc in docs.items():
        doc["retaken_later"] = sorted(set(doc.get("retaken_later", [])) |
                                      {s for s in replaced if first_rows[s][0] == suffix})
        with open(base + suffix, "w") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
    text = []
    for it in items(first):
        if it[0] == "row" and it[1] in replaced:
            text.extend(later_lines[it[1]])
        elif it[0] == "row":
            text.extend(it[2])
        else:
            text.append(it[1])
    text.append(f"# retaken later (scripts/algo-merge.py): {len(replaced)} rows replaced by a later run's, timed with "
                f"less CPU time stolen: {' '.join(str(s) for s in replaced)}\n")
    with open(first, "w") as f:
        f.writelines(text)
    return replaced


def main():
    if len(sys.argv) != 3 or not all(p.endswith(".txt") for p in sys.argv[1:]):
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        # The large sizes' file is always there; a registered sweep has no small one.
        missing = [p[:-4] + s for s in JSONS[1:] if not os.path.exists(p[:-4] + s)]
        if missing:
            sys.exit(f"algo-merge.py: {', '.join(missing)} not found: the stolen shares come from chorus-perf --json")
    replaced = merge(sys.argv[1], sys.argv[2])
    print(f"{sys.argv[1]}: {len(replaced)} rows replaced by the later run's")


if __name__ == "__main__":
    main()
