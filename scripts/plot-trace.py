#!/usr/bin/python3
"""Draws Chorus timelines (CHORUS_TRACE files) as a PNG, and sums compute/communication overlap per rank.

  scripts/plot-trace.py [--out timeline.png] [--from-ms A] [--to-ms B] [--rows thread|kind] [--summary]
                        TRACE.json|DIR ...

A directory stands for its chorus-trace-*.json files. One row per (rank, thread), or with --rows kind one
compute row and one communication row per rank. Spans of category "compute" are compute; "collective",
"p2p" and "group" are communication; anything else is drawn grey. Times are ms from the earliest event of all
files (the files hold realtime microseconds, so ranks on one host line up).

--summary prints, per rank, in the window: compute_ms (the union of compute spans), comm_ms (the union of
communication spans), overlapped_ms (their intersection) and exposed_comm_ms (comm_ms - overlapped_ms).
Without --out, --summary draws nothing; without either, the image goes to chorus-trace.png.

Needs Debian's python3-matplotlib (scripts/setup.sh installs it).
"""
import argparse
import glob
import json
import os
import sys

COMPUTE = {"compute"}
COMM = {"collective", "p2p", "group"}
COLOURS = {"compute": "#4c9a2a", "comm": "#d95f02", "other": "#9e9e9e"}


def kind_of(category):
    if category in COMPUTE:
        return "compute"
    if category in COMM:
        return "comm"
    return "other"


def trace_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(glob.glob(os.path.join(p, "chorus-trace-*.json")))
            if not found:
                sys.exit(f"plot-trace: no chorus-trace-*.json in {p}")
            files += found
        else:
            files.append(p)
    return files


def load(files):
    """Returns (spans, instants, thread names, thread order); spans are dicts with rank, tid, start, end (us)."""
    spans, instants, names, order = [], [], {}, {}
    for path in files:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"plot-trace: cannot read {path}: {e}")
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        for e in events:
            ph, pid, tid = e.get("ph"), e.get("pid", 0), e.get("tid", 0)
            if ph == "M":
                if e.get("name") == "thread_name":
                    names[(pid, tid)] = e["args"]["name"]
                elif e.get("name") == "thread_sort_index":
                    order[(pid, tid)] = e["args"]["sort_index"]
            elif ph == "X":
                spans.append(dict(rank=pid, tid=tid, name=e.get("name", ""), cat=e.get("cat", ""),
                                  start=float(e["ts"]), end=float(e["ts"]) + float(e.get("dur", 0))))
            elif ph in ("i", "I"):
                instants.append(dict(rank=pid, tid=tid, name=e.get("name", ""), cat=e.get("cat", ""),
                                     t=float(e["ts"])))
    return spans, instants, names, order


def union(intervals):
    """Sorted, disjoint union of [a, b) intervals."""
    out = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(intervals):
    return sum(b - a for a, b in intervals)


def intersection(xs, ys):
    """Intersection of two sorted disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append([a, b])
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def summarise(spans, lo, hi):
    """Per rank: {compute, comm, overlapped, exposed_comm, wall} in ms, spans clipped to [lo, hi] (ms)."""
    result = {}
    for rank in sorted({s["rank"] for s in spans}):
        by_kind = {"compute": [], "comm": []}
        first, last = None, None
        for s in spans:
            if s["rank"] != rank:
                continue
            a, b = max(s["start"], lo), min(s["end"], hi)
            if b < a:
                continue
            first = a if first is None else min(first, a)
            last = b if last is None else max(last, b)
            k = kind_of(s["cat"])
            if k in by_kind:
                by_kind[k].append((a, b))
        compute, comm = union(by_kind["compute"]), union(by_kind["comm"])
        both = length(intersection(compute, comm))
        result[rank] = dict(compute=length(compute), comm=length(comm), overlapped=both,
                            exposed_comm=length(comm) - both, wall=(last - first) if first is not None else 0.0)
    return result


def depths(row_spans):
    """Nesting depth of each span within its row (0: outermost)."""
    stack, out = [], []
    for s in row_spans:
        while stack and stack[-1] <= s["start"]:
            stack.pop()
        out.append(len(stack))
        stack.append(s["end"])
    return out


def draw(spans, instants, names, order, lo, hi, rows_by, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if rows_by == "kind":
        def row_key(s):
            return (s["rank"], 0 if kind_of(s["cat"]) == "compute" else 1)

        def row_label(key):
            return f"rank {key[0]} {'compute' if key[1] == 0 else 'communication'}"
    else:
        def row_key(s):
            return (s["rank"], order.get((s["rank"], s["tid"]), s["tid"]), s["tid"])

        def row_label(key):
            return f"rank {key[0]} {names.get((key[0], key[2]), 'thread %d' % key[2])}"

    visible = [s for s in spans if s["end"] >= lo and s["start"] <= hi]
    # Every row of the trace, even one with nothing in the window.
    keys = sorted({row_key(s) for s in spans})
    if rows_by == "kind":
        keys = sorted({(r, k) for r in {s["rank"] for s in spans} for k in (0, 1)})
    row_of = {k: i for i, k in enumerate(keys)}
    fig_h = max(2.0, 0.45 * len(keys) + 1.2)
    fig, ax = plt.subplots(figsize=(14, fig_h))
    used = set()
    width_ms = max(hi - lo, 1e-9)
    for key in keys:
        row = [s for s in visible if row_key(s) == key]
        row.sort(key=lambda s: (s["start"], -s["end"]))
        y = row_of[key]
        # Nested spans (a step and its layers) go in lanes below their parent, as in Perfetto.
        ds = [min(d, 3) for d in depths(row)]
        lane_h = 0.8 / (max(ds, default=0) + 1)
        for s, d in zip(row, ds):
            k = kind_of(s["cat"])
            used.add(k)
            a, b = max(s["start"], lo), min(s["end"], hi)
            top = y - 0.4 + d * lane_h
            ax.broken_barh([(a, max(b - a, width_ms * 1e-4))], (top, lane_h * 0.92), facecolors=COLOURS[k],
                           edgecolors="black", linewidth=0.2, alpha=0.85 if d == 0 else 1.0)
            if (b - a) > width_ms * 0.06:
                ax.text((a + b) / 2, top + lane_h * 0.46, s["name"], ha="center", va="center", fontsize=6,
                        clip_on=True)
    marks = [i for i in instants if lo <= i["t"] <= hi]
    if marks and rows_by != "kind":
        ys, xs = [], []
        for i in marks:
            key = (i["rank"], order.get((i["rank"], i["tid"]), i["tid"]), i["tid"])
            if key in row_of:
                xs.append(i["t"])
                ys.append(row_of[key] + 0.45)
        if xs:
            ax.plot(xs, ys, "v", color="black", markersize=3, label="instant")
            used.add("instant")
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([row_label(k) for k in keys], fontsize=8)
    ax.set_ylim(len(keys) - 0.5, -0.5)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    handles = [Patch(facecolor=COLOURS["compute"], label="compute"),
               Patch(facecolor=COLOURS["comm"], label="communication (collective, p2p, group)")]
    if "other" in used:
        handles.append(Patch(facecolor=COLOURS["other"], label="other"))
    if "instant" in used:
        handles.append(ax.lines[-1])
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18 if len(keys) > 3 else -0.35),
              ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help="trace files or directories holding chorus-trace-*.json")
    ap.add_argument("--out", help="PNG to write (default chorus-trace.png unless --summary)")
    ap.add_argument("--from-ms", type=float, default=None, help="window start, ms from the first event")
    ap.add_argument("--to-ms", type=float, default=None, help="window end, ms from the first event")
    ap.add_argument("--rows", choices=("thread", "kind"), default="thread",
                    help="one row per (rank, thread) or per (rank, compute/communication)")
    ap.add_argument("--summary", action="store_true", help="print compute, communication and overlap per rank")
    args = ap.parse_args()

    spans, instants, names, order = load(trace_files(args.paths))
    if not spans:
        sys.exit("plot-trace: no spans in the trace")
    t0 = min([s["start"] for s in spans] + [i["t"] for i in instants])
    for s in spans:
        s["start"] = (s["start"] - t0) / 1000.0
        s["end"] = (s["end"] - t0) / 1000.0
    for i in instants:
        i["t"] = (i["t"] - t0) / 1000.0
    end = max([s["end"] for s in spans] + [i["t"] for i in instants])
    lo = args.from_ms if args.from_ms is not None else 0.0
    hi = args.to_ms if args.to_ms is not None else end
    if hi <= lo:
        sys.exit(f"plot-trace: empty window [{lo}, {hi}] ms")

    if args.summary:
        for rank, r in summarise(spans, lo, hi).items():
            print(f"rank {rank}: compute_ms={r['compute']:.3f} comm_ms={r['comm']:.3f} "
                  f"overlapped_ms={r['overlapped']:.3f} exposed_comm_ms={r['exposed_comm']:.3f} "
                  f"wall_ms={r['wall']:.3f}")
    out = args.out or (None if args.summary else "chorus-trace.png")
    if out:
        draw(spans, instants, names, order, lo, hi, args.rows, out)
        print(f"plot-trace: wrote {out}")


if __name__ == "__main__":
    main()
