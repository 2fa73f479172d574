"""Reads the files that ../shared/peers/compare.sh writes (through scripts/bench.sh)."""
import re


def parse(path):
    """{implementation: {size: (time_us, busbw)}} and the ratio rows [(size, chorus, best, peer, ratio)]."""
    tables, ratios, cur = {}, [], None
    for line in open(path):
        m = re.match(r"## (\S+)\s+\(", line)
        if m:
            cur = m.group(1)
            tables[cur] = {}
            continue
        if line.startswith("## chorus time / best peer"):
            cur = "ratio"
            continue
        f = line.split()
        if not f or not f[0].isdigit() or cur is None:
            continue
        if cur == "ratio" and len(f) >= 5:
            ratios.append((int(f[0]), float(f[1]), float(f[2]), f[3], float(f[4])))
        elif cur != "ratio" and len(f) >= 4:
            try:
                tables[cur][int(f[0])] = (float(f[1]), float(f[3]))
            except ValueError:
                pass
    return tables, ratios


def human(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"
