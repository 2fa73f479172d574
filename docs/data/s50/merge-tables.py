#!/usr/bin/env python3
"""Merges chorus-tune --tables files as chorus-tune --merge does: each algorithm's measured table, size by size,
the geometric mean of the runs' (equal weights); everything else from the first file.

    docs/data/s50/merge-tables.py OUT.json IN.json[.gz]...
(docs/data/s50/tables3-merged/ holds the choices of `merge-tables.py /tmp/m.json tables3/tune-{1,2,3}.json.gz`,
printed by the second half of tune-tables-check.sh with CHORUS_TUNING_FILE=/tmp/m.json.)
"""
import gzip
import json
import math
import sys


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


out, ins = sys.argv[1], sys.argv[2:]
docs = [load(f) for f in ins]
base = docs[0]
for transport, entries in base["transports"].items():
    for e in entries:
        for key, cal in e["algorithms"].items():
            if "measured" not in cal:
                continue
            tables = [dict(map(tuple, e2["algorithms"][key]["measured"]))
                      for d in docs for e2 in d["transports"][transport] if e2["world_size"] == e["world_size"]]
            cal["measured"] = [[b, math.exp(sum(math.log(t[b]) for t in tables) / len(tables))]
                               for b, _ in cal["measured"]]
        e["table_runs"] = len(docs)
json.dump(base, open(out, "w"), indent=1)
