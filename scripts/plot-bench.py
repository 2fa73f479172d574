#!/usr/bin/python3
"""Plots and tabulates the compare.sh outputs that scripts/bench.sh writes.

  scripts/plot-bench.py DIR [--img DIR] [--summary FILE] [--doc FILE]

For every collective and transport: a PNG of bus bandwidth against message size (one line per
implementation, one panel per world size) in --img, and a Markdown table of chorus time / best peer time per
size (below 1: chorus is faster) in --summary, after an overview with one line per run (the worst ratio in
each band of sizes the performance issue's targets name). --doc FILE: the same Markdown also replaces the
text between the lines "<!-- bench:begin -->" and "<!-- bench:end -->" of FILE (docs/performance.md).
"""
import argparse
import collections
import glob
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchfiles import human, parse  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--img", default="docs/img")
    ap.add_argument("--summary")
    ap.add_argument("--doc")
    a = ap.parse_args()
    runs = collections.defaultdict(dict)  # (coll, transport) -> {n: path}
    for p in sorted(glob.glob(os.path.join(a.dir, "compare-*-*ranks-*.txt"))):
        m = re.match(r"compare-(\w+)-(\d+)ranks-(\w+)\.txt", os.path.basename(p))
        if m:
            runs[(m.group(1), m.group(3))][int(m.group(2))] = p
    os.makedirs(a.img, exist_ok=True)
    md = []
    overview = ["| collective | ranks | transport | 8-64 B | 128-512 B | 1-256 KiB | 1 MiB and up | sizes <= 1.0 |",
                "|---|---|---|---|---|---|---|---|"]
    bands = [(0, 64), (128, 512), (1 << 10, 256 << 10), (1 << 20, 1 << 62)]
    plots = []  # image links for --doc (relative to docs/)
    for (coll, t), by_n in sorted(runs.items()):
        ns = sorted(by_n)
        fig, axes = plt.subplots(1, len(ns), figsize=(6 * len(ns), 4.2), squeeze=False)
        for ax, n in zip(axes[0], ns):
            tables, ratios = parse(by_n[n])
            for impl, rows in sorted(tables.items()):
                sizes = sorted(s for s in rows if rows[s][1] > 0)
                if not sizes:
                    continue
                style = dict(linewidth=2.5, color="black") if impl.startswith("chorus") else dict(linewidth=1.2)
                ax.plot(sizes, [rows[s][1] for s in sizes], marker=".", label=impl, **style)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("bus bandwidth (GB/s)")
            ax.set_title(f"{coll}, {n} ranks, {t}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            peers = sorted(k for k in tables if not k.startswith("chorus"))
            md += [f"## {coll}, {n} ranks, {t}", "",
                   "| size | chorus (us) | " + " | ".join(f"{k} (us)" for k in peers) + " | best peer | ratio |",
                   "|---|---|" + "---|" * len(peers) + "---|---|"]
            for s, c, b, p, r in ratios:
                cells = [f"{tables[k][s][0]:g}" if s in tables[k] else "-" for k in peers]
                md.append(f"| {human(s)} | {c:g} | " + " | ".join(cells) + f" | {p} | {r:.2f} |")
            if ratios:
                cells = []
                for lo, hi in bands:
                    band = [r[4] for r in ratios if lo <= r[0] <= hi]
                    cells.append(f"{min(band):.2f}-{max(band):.2f}" if band else "-")
                overview.append(f"| {coll} | {n} | {t} | " + " | ".join(cells) +
                                f" | {sum(r[4] <= 1.0 for r in ratios)}/{len(ratios)} |")
                worst = max(ratios, key=lambda x: x[4])
                md += ["", f"worst ratio {worst[4]:.2f} at {human(worst[0])}; "
                       f"{sum(r[4] <= 1.0 for r in ratios)}/{len(ratios)} sizes at or below 1.0", ""]
        fig.tight_layout()
        out = os.path.join(a.img, f"bench-{coll}-{t}.png")
        plots.append(f"![{coll}, {t}](img/bench-{coll}-{t}.png)")
        fig.savefig(out, dpi=90)
        plt.close(fig)
        print("wrote", out)
    md = (["# chorus time / best peer time (below 1: chorus is faster)", "",
           "Overview: the range of the ratio in each band of sizes, and the sizes where chorus is at least as fast.",
           ""] + overview + [""] + md)
    if a.summary:
        with open(a.summary, "w") as f:
            f.write("\n".join(md) + "\n")
        print("wrote", a.summary)
    if a.doc:
        text = open(a.doc).read()
        begin, end = "<!-- bench:begin -->\n", "<!-- bench:end -->"
        i, j = text.find(begin), text.find(end)
        if i < 0 or j < i:
            raise SystemExit(f"{a.doc}: no {begin.strip()} ... {end} section")
        body = "\n".join("#### " + line[3:] if line.startswith("## ") else
                         ("" if line.startswith("# chorus time") else line) for line in md)
        body = body.replace("\n#### ", "\nBus bandwidth against size, per collective and transport (one panel per world "
                            "size):\n\n" + "\n".join(plots) + "\n\n#### ", 1)
        with open(a.doc, "w") as f:
            f.write(text[:i] + begin + body.strip() + "\n" + text[j:])
        print("updated", a.doc)


if __name__ == "__main__":
    main()
