"""Writes files in ../shared/peers/compare.sh's format, for the tests of the scripts that read them."""


def write_tables(f, coll, ranks, chorus, peers, sizes, times):
    """One table per implementation (chorus first), then the ratio rows against the best peer per size.

    times: {impl: {size: us}}. The busbw column repeats algbw's figure (the readers under test do not use it).
    """
    for impl in [chorus] + peers:
        f.write(f"## {impl}  ({coll}, {ranks} ranks)\n")
        f.write("        size      time_us      algbw      busbw   #wrong\n")
        for s in sizes:
            t = times[impl][s]
            f.write(f"{s:12d} {t:12.2f} {s / t / 1e3:10.3f} {s / t / 1e3:10.3f} 0\n")
    f.write("## chorus time / best peer time  (< 1: chorus faster)\n")
    f.write("        size    chorus_us best_peer_us best_peer       ratio\n")
    for s in sizes:
        best = min(peers, key=lambda p: times[p][s])
        c, b = times[chorus][s], times[best][s]
        f.write(f"{s:12d} {c:12.2f} {b:12.2f} {best:<12s} {c / b:8.3f}\n")
